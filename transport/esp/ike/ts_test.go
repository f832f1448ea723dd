package ike

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func rng(first, last string) selector {
	return selector{endPort: 65535, start: netip.MustParseAddr(first), end: netip.MustParseAddr(last)}
}

func TestRangePrefixes(t *testing.T) {
	tests := []struct {
		first, last string
		want        []netip.Prefix
	}{
		{"10.0.0.0", "10.0.255.255", pfx("10.0.0.0/16")},
		{"10.0.0.1", "10.0.0.6", pfx("10.0.0.1/32", "10.0.0.2/31", "10.0.0.4/31", "10.0.0.6/32")},
		{"0.0.0.0", "255.255.255.255", pfx("0.0.0.0/0")},
		{"255.255.255.254", "255.255.255.255", pfx("255.255.255.254/31")},
		{"::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", pfx("::/0")},
		{"fd00::", "fd00::1:ffff", pfx("fd00::/111")},
		{"10.0.0.5", "10.0.0.4", nil},
		{"10.0.0.0", "::1", nil},
	}
	for _, tt := range tests {
		if got := rangePrefixes(netip.MustParseAddr(tt.first), netip.MustParseAddr(tt.last)); !slices.Equal(got, tt.want) {
			t.Errorf("%s-%s: %v, want %v", tt.first, tt.last, got, tt.want)
		}
	}
}

// TestRangePrefixesCoverExactly compares with the obvious reference on
// random small IPv4 ranges: every address of the range in exactly one
// prefix, no address outside it.
func TestRangePrefixesCoverExactly(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		base := r.Uint32() &^ 0xfff
		a, b := base+r.Uint32N(4096), base+r.Uint32N(4096)
		if a > b {
			a, b = b, a
		}
		ps := rangePrefixes(u32addr(a), u32addr(b))
		count := map[uint32]int{}
		for _, p := range ps {
			f, l := prefixRange(p)
			for x := addru32(f); ; x++ {
				count[x]++
				if x == addru32(l) {
					break
				}
			}
		}
		for x := base; x < base+4096; x++ {
			want := 0
			if x >= a && x <= b {
				want = 1
			}
			if count[x] != want {
				t.Fatalf("%v-%v: %v covers %v %d times", u32addr(a), u32addr(b), ps, u32addr(x), count[x])
			}
		}
	}
}

func u32addr(x uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
}

func addru32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func TestNarrow(t *testing.T) {
	tests := []struct {
		name   string
		theirs []selector
		ours   []netip.Prefix
		want   []netip.Prefix
	}{
		{"equal", []selector{rng("10.1.0.0", "10.1.255.255")}, pfx("10.1.0.0/16"), pfx("10.1.0.0/16")},
		{"theirs wider", []selector{rng("10.0.0.0", "10.255.255.255")}, pfx("10.1.0.0/16", "10.9.0.0/24"), pfx("10.1.0.0/16", "10.9.0.0/24")},
		{"theirs narrower", []selector{rng("10.1.2.0", "10.1.2.255")}, pfx("10.1.0.0/16"), pfx("10.1.2.0/24")},
		{"partial overlap", []selector{rng("10.1.255.0", "10.2.0.255")}, pfx("10.1.0.0/16"), pfx("10.1.255.0/24")},
		{"disjoint", []selector{rng("10.2.0.0", "10.2.255.255")}, pfx("10.1.0.0/16"), nil},
		{"single protocol is skipped", []selector{{proto: 6, endPort: 65535, start: netip.MustParseAddr("10.1.0.0"), end: netip.MustParseAddr("10.1.255.255")}}, pfx("10.1.0.0/16"), nil},
		{"single port is skipped", []selector{{startPort: 80, endPort: 80, start: netip.MustParseAddr("10.1.0.0"), end: netip.MustParseAddr("10.1.255.255")}}, pfx("10.1.0.0/16"), nil},
		{"families apart", []selector{rng("fd00::", "fd00::ffff"), rng("10.1.0.0", "10.1.0.255")}, pfx("fd00::/64", "10.1.0.0/16"), pfx("10.1.0.0/24", "fd00::/112")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := narrow(tt.theirs, tt.ours); !slices.Equal(got, tt.want) {
				t.Fatalf("%v, want %v", got, tt.want)
			}
		})
	}
}

func TestWithin(t *testing.T) {
	ours := pfx("10.1.0.0/17", "10.1.128.0/17")
	if got, ok := within([]selector{rng("10.1.0.0", "10.1.255.255")}, ours); !ok || !slices.Equal(got, pfx("10.1.0.0/16")) {
		t.Fatalf("a selector spanning two adjacent prefixes of ours: %v %v", got, ok)
	}
	for _, bad := range [][]selector{
		{rng("10.1.0.0", "10.2.0.0")},
		{rng("10.1.0.0", "10.1.0.255"), rng("10.3.0.0", "10.3.0.0")},
		{{proto: 17, endPort: 65535, start: netip.MustParseAddr("10.1.0.0"), end: netip.MustParseAddr("10.1.0.255")}},
		{rng("10.1.0.9", "10.1.0.1")},
		nil,
	} {
		if got, ok := within(bad, ours); ok {
			t.Fatalf("%v accepted as %v", bad, got)
		}
	}
}

func TestCanonical(t *testing.T) {
	got := canonical(pfx("10.0.1.0/24", "10.0.0.0/24", "10.0.0.128/25", "fd00::/65", "fd00:0:0:0:8000::/65", "0.0.0.0/32"))
	if want := pfx("0.0.0.0/32", "10.0.0.0/23", "fd00::/64"); !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}
