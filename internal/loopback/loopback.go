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
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port FreeAddr picks: well clear of the registered
// ports services commonly use on a developer's machine.
const lowest = 10000

// FreeAddr returns "127.0.0.1:P" where ports P to P+span-1 can all be
// listened on now and lie below the kernel's ephemeral range. A span above
// one serves a program that derives further ports from the first.
func FreeAddr(span int) (string, error) {
	if span < 1 {
		span = 1
	}
	top := ephemeralLow() - span
	if top <= lowest {
		return "", fmt.Errorf("loopback: no room below the ephemeral range for %d ports", span)
	}
	for range 200 {
		p := lowest + rand.IntN(top-lowest)
		if bindable(p, span) {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
		}
	}
	return "", fmt.Errorf("loopback: no %d free consecutive ports found below the ephemeral range", span)
}

// bindable reports whether ports p to p+span-1 can be listened on.
func bindable(p, span int) bool {
	var open []net.Listener
	defer func() {
		for _, ln := range open {
			_ = ln.Close()
		}
	}()
	for i := range span {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+i)))
		if err != nil {
			return false
		}
		open = append(open, ln)
	}
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
