// Package loopback picks loopback ports for a listener that another
// process (or a later step) will open.
//
// Asking the kernel for port 0 and closing the listener is not enough: the
// port it hands out comes from the ephemeral range, the same range every
// outgoing connection on the machine takes its local port from. Between
// the close and the real listen, a connection to Postgres, Redis or a
// broker may take that port, and the listen then fails with "address
// already in use". FreeAddr therefore picks below the ephemeral range,
// where the kernel never assigns a port on its own.
package loopback

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port FreeAddr picks: well clear of the registered
// ports services commonly use on a developer's machine.
const lowest = 10000

// FreeAddr returns "127.0.0.1:P" where port P can be listened on now and
// lies below the kernel's ephemeral range.
func FreeAddr() (string, error) {
	top := ephemeralLow()
	for range 200 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(lowest+rand.IntN(top-lowest)))
		if bindable(addr) {
			return addr, nil
		}
	}
	return "", errors.New("loopback: no free port found below the ephemeral range")
}

// bindable reports whether addr can be listened on.
func bindable(addr string) bool {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// ephemeralLow is the first port of Linux's ephemeral range, or the IANA
// range's first port where the kernel does not say.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > lowest {
				return n
			}
		}
	}
	return 49152
}
