package gateway

import (
	"math/rand/v2"
	"net"
	"testing"
)

// FreeUDPPort returns a UDP port that is free on every address now, for a
// gateway to bind later; the tests of both this package and gateway_test
// take their ports from it. It is drawn from below the ports the kernel
// hands out on its own (Linux's ephemeral range starts at 32768): a port
// the kernel picked can be given to another test's socket before the
// gateway binds it.
func FreeUDPPort(t testing.TB) int {
	t.Helper()
	const low, high = 20000, 32768
	for range 1000 {
		port := low + rand.IntN(high-low)
		c, err := net.ListenUDP("udp4", &net.UDPAddr{Port: port})
		if err != nil {
			continue
		}
		c.Close()
		return port
	}
	t.Fatalf("no free UDP port in %d-%d", low, high-1)
	return 0
}
