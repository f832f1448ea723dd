package gateway

import (
	"testing"

	"github.com/snorkel-net/snorkel/transport/udp/udptest"
)

// FreeUDPPort returns a UDP port that is free now, for a gateway to bind
// later (udptest); the tests of both this package and gateway_test take
// their ports from it.
func FreeUDPPort(t testing.TB) int {
	t.Helper()
	return int(udptest.FreePort(t))
}
