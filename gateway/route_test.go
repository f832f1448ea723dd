package gateway

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// lookupSlow is the obviously-correct reference: scan every route and keep the
// longest prefix that contains a.
func lookupSlow(routes []route, a netip.Addr) int {
	best, bestBits := noRoute, -1
	for _, r := range routes {
		if r.prefix.Masked().Contains(a) && r.prefix.Bits() > bestBits {
			best, bestBits = r.value, r.prefix.Bits()
		}
	}
	return best
}

func lookupAddr(t *routeTable, a netip.Addr) int {
	if a.Is4() {
		return t.lookup4(a.As4())
	}
	return t.lookup6(a.As16())
}

func TestRouteTableLongestPrefixWins(t *testing.T) {
	routes := []route{
		{netip.MustParsePrefix("10.0.0.0/8"), 0},
		{netip.MustParsePrefix("10.9.0.0/16"), 1},
		{netip.MustParsePrefix("10.9.3.0/24"), 2},
		{netip.MustParsePrefix("0.0.0.0/0"), 3},
		{netip.MustParsePrefix("fd00::/8"), 4},
		{netip.MustParsePrefix("fd00:9::/32"), 5},
	}
	tbl := newRouteTable(routes)
	for _, tc := range []struct {
		addr string
		want int
	}{
		{"10.1.2.3", 0},
		{"10.9.1.1", 1},
		{"10.9.3.200", 2},
		{"192.0.2.1", 3},
		{"fd00:1::1", 4},
		{"fd00:9::1", 5},
		{"2001:db8::1", noRoute},
	} {
		if got := lookupAddr(tbl, netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("lookup(%s) = %d, want %d", tc.addr, got, tc.want)
		}
	}
}

func TestRouteTableEmptyFindsNothing(t *testing.T) {
	tbl := newRouteTable(nil)
	if got := lookupAddr(tbl, netip.MustParseAddr("10.0.0.1")); got != noRoute {
		t.Fatalf("lookup on empty table = %d, want noRoute", got)
	}
}

func TestRouteTableMatchesReferenceOnRandomInput(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 50; round++ {
		var routes []route
		for i := 0; i < 1+r.IntN(20); i++ {
			if r.IntN(2) == 0 {
				var b [4]byte
				for j := range b {
					b[j] = byte(r.IntN(4)) // a small space so prefixes nest and collide
				}
				routes = append(routes, route{netip.PrefixFrom(netip.AddrFrom4(b), r.IntN(33)), i})
			} else {
				var b [16]byte
				for j := range b {
					b[j] = byte(r.IntN(4))
				}
				routes = append(routes, route{netip.PrefixFrom(netip.AddrFrom16(b), r.IntN(129)), i})
			}
		}
		// Later duplicates of the same prefix replace earlier ones in both.
		tbl := newRouteTable(routes)
		dedup := map[netip.Prefix]route{}
		for _, rt := range routes {
			dedup[rt.prefix.Masked()] = rt
		}
		var ref []route
		for _, rt := range dedup {
			ref = append(ref, rt)
		}
		for k := 0; k < 500; k++ {
			var a netip.Addr
			if r.IntN(2) == 0 {
				var b [4]byte
				for j := range b {
					b[j] = byte(r.IntN(4))
				}
				a = netip.AddrFrom4(b)
			} else {
				var b [16]byte
				for j := range b {
					b[j] = byte(r.IntN(4))
				}
				a = netip.AddrFrom16(b)
			}
			if got, want := lookupAddr(tbl, a), lookupSlow(ref, a); got != want {
				t.Fatalf("round %d: lookup(%s) = %d, reference %d; routes %v", round, a, got, want, routes)
			}
		}
	}
}

func TestRouteLookupAllocatesNothing(t *testing.T) {
	tbl := newRouteTable([]route{{netip.MustParsePrefix("10.9.0.0/16"), 1}, {netip.MustParsePrefix("10.99.0.0/16"), 1}})
	a := [16]byte{10, 99, 0, 10}
	if n := testing.AllocsPerRun(1000, func() { tbl.lookup(4, &a) }); n != 0 {
		t.Fatalf("lookup allocates %v times", n)
	}
}

func BenchmarkRouteLookup(b *testing.B) {
	tbl := newRouteTable([]route{
		{netip.MustParsePrefix("10.9.0.0/16"), 1}, {netip.MustParsePrefix("10.99.0.0/16"), 1},
		{netip.MustParsePrefix("10.10.0.0/16"), 2}, {netip.MustParsePrefix("10.100.0.0/16"), 2},
		{netip.MustParsePrefix("10.11.0.0/24"), 3},
	})
	a := [16]byte{10, 99, 0, 10}
	b.ReportAllocs()
	for b.Loop() {
		tbl.lookup(4, &a)
	}
}
