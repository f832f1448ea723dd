package routeagent

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/nftables"
)

func TestIntervals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cidrs []string
		want  []string // "a" starts an interval, "a)" ends one (exclusive)
	}{
		{"none", nil, nil},
		{"one CIDR is its first address and the address after its last", []string{"10.9.0.0/16"}, []string{"10.9.0.0", "10.10.0.0)"}},
		{"separate CIDRs stay apart, sorted", []string{"10.20.0.0/16", "10.9.0.0/16"}, []string{"10.9.0.0", "10.10.0.0)", "10.20.0.0", "10.21.0.0)"}},
		{"a nested CIDR merges into its parent", []string{"10.9.4.0/24", "10.9.0.0/16"}, []string{"10.9.0.0", "10.10.0.0)"}},
		{"adjacent CIDRs merge", []string{"10.9.0.0/16", "10.10.0.0/16"}, []string{"10.9.0.0", "10.11.0.0)"}},
		{"a range to the last address has no end", []string{"255.255.255.0/24"}, []string{"255.255.255.0"}},
		{"everything", []string{"0.0.0.0/0", "10.0.0.0/8"}, []string{"0.0.0.0"}},
		{"a host", []string{"10.9.0.1/32"}, []string{"10.9.0.1", "10.9.0.2)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in []netip.Prefix
			for _, c := range tc.cidrs {
				in = append(in, netip.MustParsePrefix(c))
			}
			got := describe(intervals(in))
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("intervals(%v) = %v, want %v", tc.cidrs, got, tc.want)
			}
		})
	}
}

func describe(elems []nftables.SetElement) []string {
	var out []string
	for _, e := range elems {
		a, _ := netip.AddrFromSlice(e.Key)
		s := a.String()
		if e.IntervalEnd {
			s += ")"
		}
		out = append(out, s)
	}
	return out
}
