package loopback

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeAddrIsBelowTheEphemeralRangeAndListens(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	if p < lowest || p >= ephemeralLow() {
		t.Errorf("port %d is outside [%d, %d)", p, lowest, ephemeralLow())
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s: %v", addr, err)
	}
	ln.Close()
}

func TestFreeAddrSkipsAPortInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if bindable(held.Addr().String()) {
		t.Fatalf("%s is held, yet reported bindable", held.Addr())
	}
}
