package delivery

import (
	"errors"
	"github.com/printpod/pod/internal/uri"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// atonRef is a second, independent reading of inet_aton spellings built on
// strconv (base 0 knows the 0x and 0 prefixes), used to cross-check
// parseInetAton.
func atonRef(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		lp := strings.ToLower(p)
		switch {
		case p == "", strings.Contains(p, "_"),
			strings.HasPrefix(lp, "0b"), strings.HasPrefix(lp, "0o"):
			return netip.Addr{}, false
		case lp == "0x":
			vals[i] = 0
			continue
		}
		v, err := strconv.ParseUint(p, 0, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	n := len(vals)
	var ip uint64
	for i, v := range vals[:n-1] {
		if v > 255 {
			return netip.Addr{}, false
		}
		ip += v << (8 * (3 - i))
	}
	room := uint64(1) << (8 * (4 - (n - 1)))
	if vals[n-1] >= room {
		return netip.Addr{}, false
	}
	ip += vals[n-1]
	var b [4]byte
	for i := range b {
		b[i] = byte(ip >> (8 * (3 - i)))
	}
	return netip.AddrFrom4(b), true
}

func sameAton(t *testing.T, s string) {
	t.Helper()
	a, ok := parseInetAton(s)
	b, okRef := atonRef(s)
	if ok != okRef || a != b {
		t.Fatalf("parseInetAton(%q) = %v %v, reference %v %v", s, a, ok, b, okRef)
	}
}

func FuzzCheckURL(f *testing.F) {
	for _, c := range refusedURLCases {
		f.Add(c.url)
	}
	for _, c := range acceptedURLCases {
		f.Add(c.url)
	}
	g := &Guard{}
	f.Fuzz(func(t *testing.T, raw string) {
		sameAton(t, raw)
		err := g.CheckURL(raw)
		if err != nil {
			var ue *URLError
			if !errors.As(err, &ue) || !strings.HasPrefix(ue.Error(), "url ") {
				t.Fatalf("CheckURL(%q) = %T %v", raw, err, err)
			}
		}
		u, perr := url.Parse(raw)
		if perr != nil {
			if err == nil {
				t.Fatalf("accepted %q, which url.Parse refuses: %v", raw, perr)
			}
			return
		}
		host := u.Hostname()
		h := strings.TrimSuffix(strings.ToLower(host), ".")
		sameAton(t, h)
		if err != nil {
			return
		}

		if verr := uri.Valid(raw); verr != nil {
			t.Fatalf("accepted %q, which is not a URI: %v", raw, verr)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			t.Fatalf("accepted %q with scheme %q", raw, u.Scheme)
		}
		if u.User != nil || host == "" {
			t.Fatalf("accepted %q with credentials or no host", raw)
		}
		if h == "localhost" || strings.HasSuffix(h, ".localhost") {
			t.Fatalf("accepted localhost %q", raw)
		}
		if a, err := netip.ParseAddr(host); err == nil && BlockedAddr(a) {
			t.Fatalf("accepted %q: %v is blocked", raw, a)
		}
		if ip := net.ParseIP(host); ip != nil {
			if a, _ := netip.AddrFromSlice(ip); BlockedAddr(a) {
				t.Fatalf("accepted %q: net.ParseIP gives blocked %v", raw, ip)
			}
		}
		if a, ok := parseInetAton(h); ok && BlockedAddr(a) {
			t.Fatalf("accepted %q: inet_aton reading %v is blocked", raw, a)
		}
		if a, ok := atonRef(h); ok && BlockedAddr(a) {
			t.Fatalf("accepted %q: reference inet_aton reading %v is blocked", raw, a)
		}
	})
}
