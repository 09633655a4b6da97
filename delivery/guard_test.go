package delivery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

type urlCase struct {
	name string
	url  string
	want string // expected URLError reason; "" means any refusal
}

// refusedURLCases are refused by a development Guard with no exceptions.
var refusedURLCases = []urlCase{
	// Localhost by name.
	{"localhost", "http://localhost", reasonLocalhost},
	{"localhost upper trailing dot", "http://LOCALHOST.", reasonLocalhost},
	{"localhost subdomain", "http://foo.localhost", reasonLocalhost},
	{"localhost subdomain https", "https://api.Foo.LocalHost./hook", reasonLocalhost},
	{"localhost port not allowed", "http://localhost:8089/hook", reasonLocalhost},

	// IPv4 loopback in every spelling.
	{"loopback", "http://127.0.0.1", reasonPrivate},
	{"loopback port", "http://127.0.0.1:8080", reasonPrivate},
	{"loopback https", "https://127.0.0.1/hook", reasonPrivate},
	{"loopback trailing dot", "http://127.0.0.1.", reasonPrivate},
	{"loopback scheme upper", "HTTP://127.0.0.1", reasonPrivate},
	{"decimal 32-bit", "http://2130706433", reasonPrivate},
	{"hex 32-bit", "http://0x7f000001", reasonPrivate},
	{"hex 32-bit upper", "http://0X7F000001", reasonPrivate},
	{"octal 32-bit", "http://017700000001", reasonPrivate},
	{"hex first part", "http://0x7f.0.0.1", reasonPrivate},
	{"octal first part", "http://0177.0.0.1", reasonPrivate},
	{"octal padded parts", "http://0177.0000.0000.0001", reasonPrivate},
	{"zero padded decimal", "http://127.000.000.001", reasonPrivate},
	{"short a.b", "http://127.1", reasonPrivate},
	{"short a.b.c", "http://127.0.1", reasonPrivate},
	{"short hex a.b", "http://0x7f.1", reasonPrivate},
	{"short octal a.b", "http://0177.1", reasonPrivate},
	{"short private a.b", "http://10.1", reasonPrivate},
	{"octal 192.168", "http://0300.0250.0.1", reasonPrivate},

	// Other refused IPv4 ranges.
	{"zero", "http://0", reasonPrivate},
	{"bare 0x", "http://0x", reasonPrivate},
	{"unspecified", "http://0.0.0.0", reasonPrivate},
	{"unspecified port", "https://0.0.0.0:8443", reasonPrivate},
	{"private 10", "http://10.0.0.1", reasonPrivate},
	{"private 10 https", "https://10.0.0.1:443", reasonPrivate},
	{"private 172.31", "http://172.31.255.255", reasonPrivate},
	{"private 172.16", "https://172.16.0.1", reasonPrivate},
	{"private 192.168", "http://192.168.1.1", reasonPrivate},
	{"metadata", "http://169.254.169.254/latest/meta-data", reasonPrivate},
	{"metadata decimal", "http://2852039166/latest/meta-data", reasonPrivate},
	{"cgnat low", "http://100.64.0.1", reasonPrivate},
	{"cgnat high", "http://100.127.255.254", reasonPrivate},
	{"ietf 192.0.0", "http://192.0.0.8", reasonPrivate},
	{"test-net-1", "http://192.0.2.1", reasonPrivate},
	{"6to4 relay", "http://192.88.99.1", reasonPrivate},
	{"benchmark", "http://198.18.0.1", reasonPrivate},
	{"test-net-2", "http://198.51.100.7", reasonPrivate},
	{"test-net-3", "http://203.0.113.5", reasonPrivate},
	{"test-net-1 last", "http://192.0.2.255/hook", reasonPrivate},
	{"test-net-2 hex", "https://0xc6336401", reasonPrivate},
	{"test-net-3 short", "http://203.0.28933", reasonPrivate},
	{"multicast", "http://224.0.0.1", reasonPrivate},
	{"reserved", "http://240.0.0.1", reasonPrivate},
	{"broadcast", "https://255.255.255.255", reasonPrivate},

	// Numeric-looking hosts that are not addresses.
	{"octet too big", "http://256.1.1.1", reasonBadIP},
	{"five parts", "http://1.2.3.4.5", reasonBadIP},
	{"bad hex digit", "http://0x1g.0.0.1", reasonBadIP},
	{"bad octal digit", "http://08.0.0.1", reasonBadIP},
	{"32-bit overflow", "http://4294967296", reasonBadIP},
	{"short overflow", "http://1.16777216", reasonBadIP},
	{"numeric tld", "http://example.123", reasonBadIP},

	// IPv6 literals.
	{"v6 loopback", "http://[::1]", reasonPrivate},
	{"v6 loopback port", "http://[::1]:80", reasonPrivate},
	{"v6 loopback https", "https://[::1]:8443", reasonPrivate},
	{"v6 unspecified", "http://[::]", reasonPrivate},
	{"v4-mapped dotted", "http://[::ffff:127.0.0.1]", reasonPrivate},
	{"v4-mapped hex", "http://[::ffff:7f00:1]", reasonPrivate},
	{"v4-mapped long", "http://[0:0:0:0:0:ffff:127.0.0.1]", reasonPrivate},
	{"v4-mapped metadata", "http://[::ffff:a9fe:a9fe]", reasonPrivate},
	{"v4-compatible", "http://[::127.0.0.1]", reasonPrivate},
	{"siit", "http://[::ffff:0:7f00:1]", reasonPrivate},
	{"nat64", "http://[64:ff9b::a00:1]", reasonPrivate},
	{"nat64 local-use", "http://[64:ff9b:1::a00:1]", reasonPrivate},
	{"6to4 loopback", "http://[2002:7f00:1::]", reasonPrivate},
	{"6to4 private", "https://[2002:c0a8:101::1]", reasonPrivate},
	{"teredo", "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]", reasonPrivate},
	{"link-local zone", "http://[fe80::1%25eth0]", "url host must not contain a zone"},
	{"link-local", "http://[fe80::1]", reasonPrivate},
	{"unique local fc", "http://[fc00::1]", reasonPrivate},
	{"unique local fd", "https://[fd12:3456::1]", reasonPrivate},
	{"site-local", "http://[fec0::1]", reasonPrivate},
	{"multicast v6", "http://[ff02::1]", reasonPrivate},
	{"documentation v6", "http://[2001:db8::1]", reasonPrivate},
	{"documentation v6 last", "https://[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:8443", reasonPrivate},
	{"documentation v6 3fff", "http://[3fff::1]", reasonPrivate},
	{"documentation v6 3fff last", "https://[3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff]/hook", reasonPrivate},
	{"v4-mapped test-net-1", "http://[::ffff:192.0.2.1]", reasonPrivate},
	{"v4-mapped test-net-2 hex", "https://[::ffff:c633:6401]", reasonPrivate},
	{"v4-compatible test-net-3", "http://[::203.0.113.9]", reasonPrivate},
	{"nat64 test-net-3", "https://[64:ff9b::cb00:7105]", reasonPrivate},
	{"6to4 test-net-1", "https://[2002:c000:201::1]", reasonPrivate},
	{"discard v6", "http://[100::1]", reasonPrivate},
	{"bracketed v4", "http://[127.0.0.1]", ""},

	// Form of the URL.
	{"empty", "", "url is required"},
	{"too long", "https://example.com/" + strings.Repeat("a", 2049-len("https://example.com/")), "url must be at most 2048 characters"},
	{"credentials", "http://user:pw@example.com", "url must not contain credentials"},
	{"credentials user only", "https://user@example.com", "url must not contain credentials"},
	{"credentials hiding loopback", "http://example.com@127.0.0.1", "url must not contain credentials"},
	{"credentials looking like host", "http://127.0.0.1:80@example.com", "url must not contain credentials"},
	{"ftp", "ftp://example.com", "url scheme must be http or https"},
	{"javascript", "javascript:alert(1)", "url scheme must be http or https"},
	{"file", "file:///etc/passwd", "url scheme must be http or https"},
	{"gopher", "gopher://127.0.0.1:6379/_INFO", "url scheme must be http or https"},
	{"scheme relative", "//example.com", "url must be absolute"},
	{"no scheme", "example.com", "url must be absolute"},
	{"opaque", "http:example.com", reasonNoHost},
	{"no host", "http://", reasonNoHost},
	{"no host path", "http:///hook", reasonNoHost},
	{"port only", "http://:8080", reasonNoHost},
	{"fragment", "https://example.com/hook#x", "url must not contain a fragment"},
	{"empty fragment", "https://example.com/hook#", "url must not contain a fragment"},
	{"port zero", "https://example.com:0", reasonBadPort},
	{"port too big", "https://example.com:65536", reasonBadPort},
	{"port huge", "https://example.com:99999999999999999999", reasonBadPort},
	{"port empty", "https://example.com:", reasonBadPort},
	{"port not numeric", "https://example.com:http", "url is not a valid URL"},
	{"percent-encoded host", "http://%6c%6fcalhost", "url is not a valid URL"},
	{"space in host", "http://exa mple.com", "url contains a space at position 11, which a URI may not hold unescaped; percent-encode it as %20"},
	{"space in path", "https://example.com/a b", "url contains a space at position 22, which a URI may not hold unescaped; percent-encode it as %20"},
	{"space in query", "https://example.com/hook?a=b c", "url contains a space at position 29, which a URI may not hold unescaped; percent-encode it as %20"},
	{"less than", "https://example.com/<script>", "url contains '<' at position 21, which a URI may not hold unescaped; percent-encode it as %3C"},
	{"greater than", "https://example.com/a>b", "url contains '>' at position 22, which a URI may not hold unescaped; percent-encode it as %3E"},
	{"double quote", `https://example.com/"x"`, `url contains '"' at position 21, which a URI may not hold unescaped; percent-encode it as %22`},
	{"braces", "https://example.com/{id}", "url contains '{' at position 21, which a URI may not hold unescaped; percent-encode it as %7B"},
	{"pipe", "https://example.com/a|b", "url contains '|' at position 22, which a URI may not hold unescaped; percent-encode it as %7C"},
	{"backslash", `https://example.com\@evil.example`, `url contains '\' at position 20, which a URI may not hold unescaped; percent-encode it as %5C`},
	{"caret", "https://example.com/a^b", "url contains '^' at position 22, which a URI may not hold unescaped; percent-encode it as %5E"},
	{"backtick", "https://example.com/a`b", "url contains '`' at position 22, which a URI may not hold unescaped; percent-encode it as %60"},
	{"tab", "https://example.com/a\tb", "url contains the control character U+0009 at position 22, which a URI may not hold unescaped; percent-encode it as %09"},
	{"delete", "https://example.com/a\x7fb", "url contains the control character U+007F at position 22, which a URI may not hold unescaped; percent-encode it as %7F"},
	{"non-ascii path", "https://example.com/päth", "url contains 'ä' (U+00E4) at position 22, which a URI may not hold unescaped; percent-encode it as %C3%A4"},
	{"not utf-8", "https://example.com/a\xffb", "url contains the byte 0xFF (not UTF-8) at position 22, which a URI may not hold unescaped; percent-encode it as %FF"},
	{"bad escape", "https://example.com/a%zzb", "url contains '%' at position 22 not followed by two hex digits; a URI writes a literal '%' as %25"},
	{"cut escape", "https://example.com/a%2", "url contains '%' at position 22 not followed by two hex digits; a URI writes a literal '%' as %25"},
	{"underscore", "http://exa_mple.com", reasonBadName},
	{"unicode host", "http://exämple.com", "url contains 'ä' (U+00E4) at position 10, which a URI may not hold unescaped; percent-encode it as %C3%A4"},
	{"empty label", "http://example..com", reasonBadName},
	{"leading dot", "http://.example.com", reasonBadName},
	{"two trailing dots", "http://example.com..", reasonBadName},
	{"label too long", "http://" + strings.Repeat("a", 64) + ".com", reasonBadName},
	{"name too long", "http://" + strings.Repeat(strings.Repeat("a", 60)+".", 4) + "example.com", reasonBadName},
}

// acceptedURLCases are accepted by a development Guard with no exceptions.
var acceptedURLCases = []urlCase{
	{"name", "https://example.com", ""},
	{"name http", "http://example.com/hook", ""},
	{"name port", "https://hooks.example.org:8443", ""},
	{"name path query", "https://hooks.example.org:8443/v1/events?tenant=7", ""},
	{"name mixed case trailing dot", "https://Example.COM./hook", ""},
	{"punycode", "https://xn--exmple-cua.com/", ""},
	{"hyphens", "https://a-b.c-d.example", ""},
	{"localhost as a prefix", "https://localhost.example.com", ""},
	{"localhost inside a label", "https://mylocalhost.com", ""},
	{"numeric first label", "https://1.example.com", ""},
	{"hex-looking name", "https://deadbeef.example", ""},
	{"public v4", "http://93.184.216.34", ""},
	{"public v4 https port", "https://93.184.216.34:443/x", ""},
	{"public v4 hex", "http://0x5db8d822", ""},
	{"public v4 short", "http://8.8", ""},
	{"public dns", "https://8.8.8.8", ""},
	{"public v6", "https://[2606:2800:220:1:248:1893:25c8:1946]", ""},
	{"public v6 port", "https://[2606:2800:220:1:248:1893:25c8:1946]:8443/hook", ""},
	{"public v4-mapped", "https://[::ffff:93.184.216.34]", ""},
	{"public nat64", "https://[64:ff9b::5db8:d822]", ""},
	{"public 6to4", "https://[2002:5db8:d822::1]", ""},
	{"max port", "https://example.com:65535", ""},
	{"max label", "https://" + strings.Repeat("a", 63) + ".com", ""},
	{"escapes", "https://example.com/a%20b?x=%3C%3e&y=%25", ""},
	{"sub-delims", "https://example.com/a!$&'()*+,;=:@b?c=/?", ""},
	{"unreserved", "https://example.com/A-Z_a.z~09", ""},
	{"brackets in query", "https://example.com/hook?a[]=1", ""},
	{"past documentation v6 3fff", "https://[3fff:1000::1]", ""},
}

func wantReason(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted, want refused")
	}
	var ue *URLError
	if !errors.As(err, &ue) {
		t.Fatalf("error %T %v, want *URLError", err, err)
	}
	if !strings.HasPrefix(ue.Error(), "url ") {
		t.Fatalf("reason %q does not start with \"url \"", ue.Error())
	}
	if want != "" && ue.Reason != want {
		t.Fatalf("reason %q, want %q", ue.Reason, want)
	}
}

func TestCheckURLRefusesSSRF(t *testing.T) {
	if len(refusedURLCases) < 40 {
		t.Fatalf("only %d refused cases", len(refusedURLCases))
	}
	g := &Guard{}
	for _, c := range refusedURLCases {
		t.Run(c.name, func(t *testing.T) {
			wantReason(t, g.CheckURL(c.url), c.want)
		})
	}
}

func TestCheckURLAccepts(t *testing.T) {
	g := &Guard{}
	for _, c := range acceptedURLCases {
		t.Run(c.name, func(t *testing.T) {
			if err := g.CheckURL(c.url); err != nil {
				t.Fatalf("CheckURL(%q) = %v", c.url, err)
			}
		})
	}
}

func TestCheckURLAllowTargets(t *testing.T) {
	g := &Guard{AllowTargets: []string{"127.0.0.1:9000", "LocalHost:8089", "[::1]:9001", "localhost:443", " 10.0.0.5:80 "}}
	accepted := []urlCase{
		{"ip", "http://127.0.0.1:9000/hook", ""},
		{"name", "http://localhost:8089", ""},
		{"name upper", "http://LOCALHOST:8089/x", ""},
		{"v6", "https://[::1]:9001", ""},
		{"default https port", "https://localhost/hook", ""},
		{"default http port", "http://10.0.0.5/", ""},
		{"leading zero port", "http://127.0.0.1:09000", ""},
	}
	for _, c := range accepted {
		t.Run("accept "+c.name, func(t *testing.T) {
			if err := g.CheckURL(c.url); err != nil {
				t.Fatalf("CheckURL(%q) = %v", c.url, err)
			}
		})
	}
	refused := []urlCase{
		{"other port", "http://127.0.0.1:9001", reasonPrivate},
		{"default port not listed", "http://localhost", reasonLocalhost},
		{"other spelling", "http://0x7f.1:9000", reasonPrivate},
		{"trailing dot", "http://localhost.:8089", reasonLocalhost},
		{"credentials still refused", "http://u:p@127.0.0.1:9000", "url must not contain credentials"},
		{"scheme still refused", "ftp://127.0.0.1:9000", "url scheme must be http or https"},
	}
	for _, c := range refused {
		t.Run("refuse "+c.name, func(t *testing.T) {
			wantReason(t, g.CheckURL(c.url), c.want)
		})
	}
}

func TestCheckURLProduction(t *testing.T) {
	g := &Guard{Production: true, AllowTargets: []string{"127.0.0.1:9000", "localhost:443"}}
	refused := []urlCase{
		{"http", "http://example.com", "url must use https"},
		{"http allowed target", "http://127.0.0.1:9000", "url must use https"},
		{"https allowed target ignored", "https://127.0.0.1:9000", reasonPrivate},
		{"localhost allowed target ignored", "https://localhost", reasonLocalhost},
		{"ftp", "ftp://example.com", "url scheme must be https"},
		{"private", "https://10.0.0.1", reasonPrivate},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			wantReason(t, g.CheckURL(c.url), c.want)
		})
	}
	for _, raw := range []string{"https://example.com/hook", "https://93.184.216.34:8443"} {
		if err := g.CheckURL(raw); err != nil {
			t.Errorf("CheckURL(%q) = %v", raw, err)
		}
	}
}

func TestBlockedAddr(t *testing.T) {
	cases := []struct {
		addr    string
		blocked bool
	}{
		{"0.0.0.0", true},
		{"0.255.255.255", true},
		{"10.0.0.1", true},
		{"10.255.255.255", true},
		{"100.64.0.0", true},
		{"100.127.255.255", true},
		{"127.0.0.1", true},
		{"127.255.255.254", true},
		{"169.254.169.254", true},
		{"172.16.0.1", true},
		{"172.31.255.255", true},
		{"192.0.0.1", true},
		{"192.0.2.1", true},
		{"192.88.99.1", true},
		{"192.168.0.1", true},
		{"198.18.0.1", true},
		{"198.19.255.255", true},
		{"198.51.100.1", true},
		{"203.0.113.1", true},
		{"224.0.0.1", true},
		{"239.255.255.255", true},
		{"240.0.0.1", true},
		{"255.255.255.255", true},
		{"::", true},
		{"::1", true},
		{"::127.0.0.1", true},
		{"::ffff:127.0.0.1", true},
		{"::ffff:10.0.0.1", true},
		{"::ffff:0:a00:1", true},
		{"64:ff9b::7f00:1", true},
		{"64:ff9b::a9fe:a9fe", true},
		{"64:ff9b:1::1", true},
		{"100::1", true},
		{"2001::1", true},
		{"2001:db8::1", true},
		{"2001:db8:ffff::1", true},
		{"3fff::", true},
		{"3fff::1", true},
		{"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", true},
		{"::ffff:192.0.2.1", true},
		{"::ffff:198.51.100.1", true},
		{"::ffff:203.0.113.1", true},
		{"64:ff9b::c633:6401", true},
		{"2002:cb00:7101::1", true},
		{"2002:7f00:1::", true},
		{"2002:a00:1::1", true},
		{"fc00::1", true},
		{"fd00::1", true},
		{"fe80::1", true},
		{"febf::1", true},
		{"fec0::1", true},
		{"ff02::1", true},
		{"fe80::1%eth0", true},
		{"2606:2800:220:1::1%eth0", true},

		{"1.1.1.1", false},
		{"8.8.8.8", false},
		{"93.184.216.34", false},
		{"100.63.255.255", false},
		{"100.128.0.0", false},
		{"172.15.255.255", false},
		{"172.32.0.0", false},
		{"192.0.1.1", false},
		{"192.169.0.1", false},
		{"198.17.255.255", false},
		{"198.20.0.0", false},
		{"223.255.255.255", false},
		{"::ffff:93.184.216.34", false},
		{"::8.8.8.8", false},
		{"64:ff9b::808:808", false},
		{"2002:808:808::1", false},
		{"2001:4860:4860::8888", false},
		{"2606:2800:220:1:248:1893:25c8:1946", false},
		{"2a00:1450:4001::1", false},
		{"3ffe:ffff::1", false},
		{"3fff:1000::1", false},
		{"2001:db9::1", false},
		{"192.0.3.1", false},
		{"198.51.101.1", false},
		{"203.0.114.1", false},
	}
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			if got := BlockedAddr(netip.MustParseAddr(c.addr)); got != c.blocked {
				t.Fatalf("BlockedAddr(%s) = %v, want %v", c.addr, got, c.blocked)
			}
		})
	}
	if !BlockedAddr(netip.Addr{}) {
		t.Error("zero Addr not blocked")
	}
}

func TestParseInetAton(t *testing.T) {
	cases := []struct {
		in   string
		want string // "" means invalid
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0x7f.0.0.1", "127.0.0.1"},
		{"0177.0000.0000.0001", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"10.1", "10.0.0.1"},
		{"1.0x10203", "1.1.2.3"},
		{"1.2.0xffff", "1.2.255.255"},
		{"0300.0250.0.1", "192.168.0.1"},
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"0xFFFFFFFF", "255.255.255.255"},
		{"4294967295", "255.255.255.255"},
		{"", ""},
		{".", ""},
		{"1.", ""},
		{"1..2", ""},
		{"256.1.1.1", ""},
		{"1.2.3.256", ""},
		{"1.2.65536", ""},
		{"1.16777216", ""},
		{"4294967296", ""},
		{"0x100000000", ""},
		{"1.2.3.4.5", ""},
		{"0x1g.0.0.1", ""},
		{"08", ""},
		{"0b1", ""},
		{"1_0", ""},
		{"+1", ""},
		{"-1", ""},
		{"00000000000000000000000000000000000000001", "0.0.0.1"},
	}
	for _, c := range cases {
		a, ok := parseInetAton(c.in)
		got := ""
		if ok {
			got = a.String()
		}
		if got != c.want {
			t.Errorf("parseInetAton(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// stubResolver answers from a map (keys lowercase, without trailing dot) and
// counts lookups.
type stubResolver struct {
	answers map[string][]netip.Addr
	calls   atomic.Int32
}

func (r *stubResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.calls.Add(1)
	as, ok := r.answers[strings.TrimSuffix(strings.ToLower(host), ".")]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return as, nil
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func TestDialContextRefusesSSRF(t *testing.T) {
	r := &stubResolver{answers: map[string][]netip.Addr{
		"rebind.test":         addrs("127.0.0.1"),
		"mixed.test":          addrs("93.184.216.34", "10.0.0.1"),
		"mixed-first.test":    addrs("169.254.169.254", "93.184.216.34"),
		"mapped.test":         addrs("::ffff:127.0.0.1"),
		"v6-private.test":     addrs("2606:2800:220:1::1", "fd00::1"),
		"metadata.test":       addrs("169.254.169.254"),
		"zero-answer.test":    nil,
		"nat64-loopback.test": addrs("64:ff9b::7f00:1"),
	}}
	g := &Guard{Resolver: r}
	ctx := context.Background()
	blocked := []string{
		"rebind.test:80",
		"REBIND.test.:443",
		"mixed.test:443",
		"mixed-first.test:443",
		"mapped.test:80",
		"v6-private.test:443",
		"metadata.test:80",
		"nat64-loopback.test:80",
		"127.0.0.1:8080",
		"10.0.0.1:443",
		"[::1]:80",
		"[::ffff:127.0.0.1]:80",
		"[fe80::1%eth0]:80",
		"0x7f.1:80",
		"2130706433:80",
		"256.1.1.1:80",
		"localhost:80",
		"api.localhost.:80",
	}
	for _, addr := range blocked {
		t.Run(addr, func(t *testing.T) {
			conn, err := g.DialContext(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
				t.Fatal("dial succeeded")
			}
			if !errors.Is(err, ErrBlockedTarget) {
				t.Fatalf("error %v does not wrap ErrBlockedTarget", err)
			}
		})
	}

	t.Run("lookup error", func(t *testing.T) {
		_, err := g.DialContext(ctx, "tcp", "missing.test:80")
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || errors.Is(err, ErrBlockedTarget) {
			t.Fatalf("error %v, want the resolver's error", err)
		}
	})
	t.Run("no addresses", func(t *testing.T) {
		if _, err := g.DialContext(ctx, "tcp", "zero-answer.test:80"); err == nil {
			t.Fatal("dial succeeded")
		}
	})
	t.Run("unsupported network", func(t *testing.T) {
		if _, err := g.DialContext(ctx, "udp", "93.184.216.34:53"); err == nil {
			t.Fatal("dial succeeded")
		}
	})
	t.Run("bad address", func(t *testing.T) {
		if _, err := g.DialContext(ctx, "tcp", "no-port.test"); err == nil {
			t.Fatal("dial succeeded")
		}
	})
}

func TestDialControlRechecksAddress(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:80", "[::1]:443", "[::ffff:10.0.0.1]:80", "[fe80::1%eth0]:80", "not-an-address"} {
		if err := controlDial("tcp", addr, nil); !errors.Is(err, ErrBlockedTarget) {
			t.Errorf("controlDial(%q) = %v, want ErrBlockedTarget", addr, err)
		}
	}
	for _, addr := range []string{"93.184.216.34:443", "[2606:2800:220:1::1]:443"} {
		if err := controlDial("tcp", addr, nil); err != nil {
			t.Errorf("controlDial(%q) = %v", addr, err)
		}
	}
}

// newHookServer serves "/" with 204, "/start" with a 302 to "/second", and
// counts requests to "/second".
func newHookServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var second atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/start", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/second", http.StatusFound)
	})
	mux.HandleFunc("/second", func(w http.ResponseWriter, r *http.Request) {
		second.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &second
}

// post sends a small JSON body to url and returns the answer's status.
func post(t *testing.T, c *fasthttp.Client, url string) (int, error) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer func() {
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}()
	req.SetRequestURI(url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBodyString(`{"event":"test"}`)
	if err := c.DoTimeout(req, resp, 5*time.Second); err != nil {
		return 0, err
	}
	return resp.StatusCode(), nil
}

func TestClientAllowedTarget(t *testing.T) {
	srv, _ := newHookServer(t)
	g := &Guard{AllowTargets: []string{srv.Listener.Addr().String()}}
	if err := g.CheckURL(srv.URL + "/"); err != nil {
		t.Fatalf("CheckURL(%q) = %v", srv.URL, err)
	}
	status, err := post(t, g.Client(5*time.Second, 256), srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusNoContent {
		t.Fatalf("status %d", status)
	}
}

func TestClientRefusesUnlistedTarget(t *testing.T) {
	srv, _ := newHookServer(t)
	for name, g := range map[string]*Guard{
		"no exceptions": {},
		"production":    {Production: true, AllowTargets: []string{srv.Listener.Addr().String()}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := post(t, g.Client(5*time.Second, 256), srv.URL+"/")
			if !errors.Is(err, ErrBlockedTarget) {
				t.Fatalf("error %v, want ErrBlockedTarget", err)
			}
		})
	}
}

func TestClientRefusesRebinding(t *testing.T) {
	srv, _ := newHookServer(t)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	r := &stubResolver{answers: map[string][]netip.Addr{"rebind.test": addrs("127.0.0.1")}}
	g := &Guard{Resolver: r}
	hook := "http://rebind.test:" + port + "/"
	if err := g.CheckURL(hook); err != nil {
		t.Fatalf("CheckURL(%q) = %v (names are only checked at connect time)", hook, err)
	}
	_, err := post(t, g.Client(5*time.Second, 256), hook)
	if !errors.Is(err, ErrBlockedTarget) {
		t.Fatalf("error %v, want ErrBlockedTarget", err)
	}
	if r.calls.Load() == 0 {
		t.Fatal("resolver not used")
	}
}

func TestClientDoesNotFollowRedirects(t *testing.T) {
	srv, second := newHookServer(t)
	g := &Guard{AllowTargets: []string{srv.Listener.Addr().String()}}
	status, err := post(t, g.Client(5*time.Second, 256), srv.URL+"/start")
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusFound {
		t.Fatalf("status %d, want 302", status)
	}
	if n := second.Load(); n != 0 {
		t.Fatalf("redirect target requested %d times", n)
	}
}

// A proxy named in the environment would take the connection past the
// guard's connect-time check.
func TestClientIgnoresProxyEnvironment(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	t.Setenv("NO_PROXY", "")
	srv, _ := newHookServer(t)
	g := &Guard{AllowTargets: []string{srv.Listener.Addr().String()}}
	status, err := post(t, g.Client(5*time.Second, 256), srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusNoContent {
		t.Fatalf("status %d", status)
	}
}

func TestClientSettings(t *testing.T) {
	c := (&Guard{}).Client(7*time.Second, 256)
	if c.DialTimeout == nil || c.Dial != nil {
		t.Error("the client does not dial only through the guard")
	}
	if c.ReadTimeout != 7*time.Second || c.WriteTimeout != 7*time.Second || c.MaxConnWaitTimeout != 7*time.Second {
		t.Errorf("timeouts: read %v, write %v, connection wait %v", c.ReadTimeout, c.WriteTimeout, c.MaxConnWaitTimeout)
	}
	if c.MaxConnsPerHost != 256 || c.MaxIdleConnDuration != 90*time.Second || c.MaxResponseBodySize != ResponseBodyLimit {
		t.Errorf("limits: %d connections a host, idle %v, body %d", c.MaxConnsPerHost, c.MaxIdleConnDuration, c.MaxResponseBodySize)
	}
	if c.TLSConfig == nil || c.TLSConfig.InsecureSkipVerify || c.TLSConfig.MinVersion < tls.VersionTLS12 {
		t.Errorf("TLS config %+v", c.TLSConfig)
	}
}

// An endpoint's certificate is verified: one no trusted authority signed
// fails the request, and the same endpoint answers once its authority is
// trusted.
func TestClientVerifiesCertificates(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	g := &Guard{AllowTargets: []string{srv.Listener.Addr().String()}}
	_, err := post(t, g.Client(5*time.Second, 256), srv.URL+"/")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("error %v, want an unknown authority", err)
	}
	c := g.Client(5*time.Second, 256)
	c.TLSConfig.RootCAs = x509.NewCertPool()
	c.TLSConfig.RootCAs.AddCert(srv.Certificate())
	status, err := post(t, c, srv.URL+"/")
	if err != nil || status != http.StatusNoContent {
		t.Fatalf("with the authority trusted: %d, %v", status, err)
	}
}

// BenchmarkCheckURL is what the sender adds to each delivery by holding
// the stored URL to the URL rules again.
func BenchmarkCheckURL(b *testing.B) {
	g := &Guard{Production: true}
	b.ReportAllocs()
	for b.Loop() {
		if err := g.CheckURL("https://hooks.example.com/pod/events?shop=acme"); err != nil {
			b.Fatal(err)
		}
	}
}
