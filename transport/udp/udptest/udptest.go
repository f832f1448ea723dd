// Package udptest gives tests the ports they bind later: a port is
// picked, checked free and closed, and some time passes before the code
// under test binds it. A port the kernel picked (bind to port 0) can be
// handed to another test's socket in that time, since the kernel gives
// out its ephemeral ports (32768 and up on Linux) to every socket that
// asks. The ports here are drawn from below that range, which the kernel
// never hands out on its own.
package udptest

import (
	"math/rand/v2"
	"net"
	"slices"
	"testing"
)

// The range ports are drawn from: above the well-known and most
// registered services a test machine may run, below Linux's ephemeral
// range.
const (
	low  = 20000
	high = 32768
)

// FreePort returns a port that is free for UDP and for TCP on every
// address now, from below the kernel's ephemeral range.
func FreePort(t testing.TB) uint16 {
	t.Helper()
	return FreePorts(t, 1)[0]
}

// FreePorts returns n distinct ports, each as FreePort's.
func FreePorts(t testing.TB, n int) []uint16 {
	t.Helper()
	ports := make([]uint16, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000*n {
			t.Fatalf("udptest: found %d of %d free ports in %d-%d", len(ports), n, low, high-1)
		}
		port := uint16(low + rand.IntN(high-low))
		if !slices.Contains(ports, port) && free(port) {
			ports = append(ports, port)
		}
	}
	return ports
}

// free reports whether port can be bound for UDP and for TCP on every
// address.
func free(port uint16) bool {
	u, err := net.ListenUDP("udp", &net.UDPAddr{Port: int(port)})
	if err != nil {
		return false
	}
	defer u.Close()
	l, err := net.ListenTCP("tcp", &net.TCPAddr{Port: int(port)})
	if err != nil {
		return false
	}
	l.Close()
	return true
}
