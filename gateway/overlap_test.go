package gateway

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// overlapErrorsReference is the obviously correct overlapErrors: every pair,
// in configuration order.
func overlapErrorsReference(c *Config) []error {
	type owned struct {
		cluster, field string
		p              netip.Prefix
	}
	var all []owned
	add := func(cluster, base string, pods, svcs []string) {
		for i, v := range pods {
			if p, err := netip.ParsePrefix(v); err == nil {
				all = append(all, owned{cluster, fmt.Sprintf("%s.podCIDRs[%d]", base, i), p.Masked()})
			}
		}
		for i, v := range svcs {
			if p, err := netip.ParsePrefix(v); err == nil {
				all = append(all, owned{cluster, fmt.Sprintf("%s.serviceCIDRs[%d]", base, i), p.Masked()})
			}
		}
	}
	add(c.Cluster.ID, "cluster", c.Cluster.PodCIDRs, c.Cluster.ServiceCIDRs)
	for i, r := range c.Remotes {
		add(r.ID, fmt.Sprintf("remotes[%d]", i), r.PodCIDRs, r.ServiceCIDRs)
	}
	var errs []error
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			a, b := all[i], all[j]
			if a.p.Overlaps(b.p) {
				if a.cluster == b.cluster {
					errs = append(errs, fmt.Errorf("%s: %s overlaps %s %s of the same cluster; list each range once", b.field, b.p, a.field, a.p))
					continue
				}
				if c.Globalnet != nil {
					continue
				}
				errs = append(errs, fmt.Errorf("%s: %s of cluster %q overlaps %s %s of cluster %q; give the clusters distinct CIDRs, or connect them through Globalnet", b.field, b.p, b.cluster, a.field, a.p, a.cluster))
			}
		}
	}
	return errs
}

func errStrings(errs []error) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	slices.Sort(out)
	return out
}

// randomCIDRs draws up to four CIDRs from a small space, so that overlaps,
// containment across many entries, duplicates, both families and the odd
// unparsable or unmasked entry are all common.
func randomCIDRs(r *rand.Rand) []string {
	out := make([]string, r.IntN(5))
	for i := range out {
		switch r.IntN(10) {
		case 0:
			out[i] = "not a cidr"
		case 1, 2:
			out[i] = fmt.Sprintf("fd00:%x::/%d", r.IntN(4), 16+r.IntN(24))
		default:
			bits := 8 + r.IntN(10)
			a := netip.AddrFrom4([4]byte{10, byte(r.IntN(4) << 6), byte(r.IntN(256)), byte(r.IntN(256))})
			out[i] = netip.PrefixFrom(a, bits).String() // host bits often set
		}
	}
	return out
}

func TestOverlapErrorsMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ids := []string{"c1", "c2", "c3", "c4", "c5"}
	for n := range 2000 {
		c := &Config{Cluster: Cluster{ID: ids[0], PodCIDRs: randomCIDRs(r), ServiceCIDRs: randomCIDRs(r)}}
		for range r.IntN(8) {
			c.Remotes = append(c.Remotes, Remote{ID: ids[r.IntN(len(ids))], PodCIDRs: randomCIDRs(r), ServiceCIDRs: randomCIDRs(r)})
		}
		if r.IntN(2) == 0 {
			c.Globalnet = &Globalnet{}
		}
		got, want := errStrings(overlapErrors(c.parse(&errList{}))), errStrings(overlapErrorsReference(c))
		if !slices.Equal(got, want) {
			t.Fatalf("case %d, config %+v:\ngot  %q\nwant %q", n, c, got, want)
		}
	}
}

// manyRemotes is a config with n remotes, each with a pod and a service
// CIDR of its own.
func manyRemotes(n int) *Config {
	c := &Config{Cluster: Cluster{ID: "local", PodCIDRs: []string{"10.0.0.0/16"}, ServiceCIDRs: []string{"10.1.0.0/16"}}}
	next := netip.MustParseAddr("100.64.0.0")
	cidr := func() string {
		p := netip.PrefixFrom(next, 28)
		for range 16 {
			next = next.Next()
		}
		return p.String()
	}
	for i := range n {
		c.Remotes = append(c.Remotes, Remote{ID: fmt.Sprintf("r%d", i), PodCIDRs: []string{cidr()}, ServiceCIDRs: []string{cidr()}})
	}
	return c
}

func BenchmarkOverlapErrors20000Remotes(b *testing.B) {
	c := manyRemotes(20000).parse(&errList{})
	b.ReportAllocs()
	for b.Loop() {
		if errs := overlapErrors(c); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}
