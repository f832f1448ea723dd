package gateway

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/snorkel-net/snorkel/natengine"
)

// TestSetAllocationsRoundTrips checks that rules written back into a
// config section resolve to the same rules: what the agent hands the
// gateway is what the IPAM allocated.
func TestSetAllocationsRoundTrips(t *testing.T) {
	c := globalnetConfig()
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	want := s.globalnet.rules

	back := globalnetConfig()
	back.Globalnet = &Globalnet{}
	back.Globalnet.SetAllocations(want)
	s2, err := back.build()
	if err != nil {
		t.Fatalf("the written-back section is refused: %v\n%+v", err, back.Globalnet)
	}
	if got := s2.globalnet.rules; !reflect.DeepEqual(got, want) {
		t.Errorf("rules after the round trip\n%+v\nwant\n%+v", got, want)
	}
}

// TestSetAllocationsEdges checks the two cases a config section cannot
// say the way rules do: no cluster egress IPs (not the default eight) and
// a pool that holds no pods (left out).
func TestSetAllocationsEdges(t *testing.T) {
	c := globalnetConfig()
	c.Globalnet = &Globalnet{}
	c.Globalnet.SetAllocations(natengine.Rules{
		Global: netip.MustParsePrefix("242.1.0.0/16"),
		Pools:  []natengine.EgressPool{{Name: "empty", Kind: natengine.PoolNamespace, IPs: []netip.Addr{netip.MustParseAddr("242.1.0.9")}}},
	})
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	r := s.globalnet.rules
	if len(r.ClusterEgress) != 0 || len(r.Pools) != 0 || len(r.Ingress) != 0 {
		t.Errorf("rules %+v; want no cluster egress IPs, no pools and no ingress", r)
	}
}
