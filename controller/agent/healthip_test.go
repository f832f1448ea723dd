package agent

import (
	"net/netip"
	"testing"
)

func TestHealthCheckAddressPrefersTheNodesPodCIDRAddress(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		pods  []string
		addrs []netip.Addr
		want  string
	}{
		{"the CNI bridge's address", []string{"10.8.0.0/16"}, addrs("127.0.0.1", "198.18.1.10", "10.8.0.1"), "10.8.0.1"},
		{"the second Pod CIDR", []string{"10.8.0.0/16", "10.18.0.0/16"}, addrs("198.18.1.10", "10.18.3.1"), "10.18.3.1"},
		{"no pod on the node yet: the private IP", []string{"10.8.0.0/16"}, addrs("127.0.0.1", "198.18.1.10"), "198.18.1.10"},
		{"an unreadable CIDR is skipped", []string{"junk", "10.8.0.0/16"}, addrs("10.8.0.1"), "10.8.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HealthCheckAddress(tc.pods, "198.18.1.10", tc.addrs); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
