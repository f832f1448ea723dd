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

// TestInClusterAccess checks what pods need to reach an API server that
// serves real nodes: the kubernetes Service's ClusterIP in its
// certificate, and its endpoints kept at a non-loopback address.
func TestInClusterAccess(t *testing.T) {
	ip, err := firstServiceIP("10.88.0.0/16")
	if err != nil || ip.String() != "10.88.0.1" {
		t.Errorf("firstServiceIP(10.88.0.0/16) = %v, %v; want 10.88.0.1", ip, err)
	}
	if _, err := firstServiceIP("fd00::/108"); err == nil {
		t.Error("an IPv6 Service CIDR was taken")
	}
	if got := endpointReconciler("127.0.0.1"); got != "none" {
		t.Errorf("loopback: reconciler %s, want none", got)
	}
	if got := endpointReconciler("198.18.0.1"); got != "lease" {
		t.Errorf("198.18.0.1: reconciler %s, want lease", got)
	}
}
