package kubelocal

import "testing"

// TestFreePortsAvoidTheEphemeralRange checks the ports freePorts gives
// are distinct and below the range outgoing connections take theirs from.
func TestFreePortsAvoidTheEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	if lo <= minPort+1000 {
		t.Skipf("the ephemeral range starts at %d, leaving no room below it", lo)
	}
	for range 20 {
		ports, err := freePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		if ports[0] == ports[1] || ports[1] == ports[2] || ports[0] == ports[2] {
			t.Fatalf("ports %v are not distinct", ports)
		}
		for _, p := range ports {
			if p < minPort || p >= lo {
				t.Fatalf("port %d outside [%d, %d)", p, minPort, lo)
			}
		}
	}
}
