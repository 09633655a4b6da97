package loopback

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeAddrIsBelowTheEphemeralRangeAndEveryPortOfItsSpanListens(t *testing.T) {
	for _, span := range []int{1, 3} {
		addr, err := FreeAddr(span)
		if err != nil {
			t.Fatal(err)
		}
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		if p < lowest || p+span > ephemeralLow() {
			t.Errorf("span %d: port %d is outside [%d, %d)", span, p, lowest, ephemeralLow())
		}
		for i := range span {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+i)))
			if err != nil {
				t.Fatalf("span %d: port %d: %v", span, p+i, err)
			}
			ln.Close()
		}
	}
}

func TestFreeAddrSkipsAPortInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	p := held.Addr().(*net.TCPAddr).Port
	if bindable(p, 1) {
		t.Fatalf("port %d is held, yet reported bindable", p)
	}
	if p > 0 && bindable(p-1, 2) {
		t.Fatalf("ports %d-%d include a held one, yet reported bindable", p-1, p)
	}
}
