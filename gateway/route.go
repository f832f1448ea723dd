package gateway

import (
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
)

// noRoute is what a routeTable lookup returns for an address no prefix covers.
const noRoute = -1

// routeTable maps destination prefixes to a value (a remote's index) by
// longest-prefix match. It is built once and never modified, so lookups need
// no lock; a new table replaces it whole.
//
// A lookup tries each prefix length in use, longest first, with one map probe
// per length: clusters bring a handful of distinct lengths, so this beats a
// trie walk of up to 32 or 128 steps and allocates nothing.
type routeTable struct {
	v4lens []int          // IPv4 prefix lengths in use, longest first
	v4     map[uint64]int // key4(masked address, length)
	v6lens []int
	v6     map[prefix6]int
}

type prefix6 struct {
	addr [16]byte
	bits int
}

// key4 packs a masked IPv4 prefix into one integer: integer map keys take the
// runtime's fast hash path.
func key4(masked uint32, bits int) uint64 { return uint64(masked)<<8 | uint64(bits) }

type route struct {
	prefix netip.Prefix
	value  int
}

func newRouteTable(routes []route) *routeTable {
	t := &routeTable{v4: map[uint64]int{}, v6: map[prefix6]int{}}
	for _, r := range routes {
		p := r.prefix.Masked()
		if p.Addr().Is4() {
			t.v4[key4(mask4(p.Addr().As4(), p.Bits()), p.Bits())] = r.value
			t.v4lens = append(t.v4lens, p.Bits())
		} else {
			t.v6[prefix6{mask16(p.Addr().As16(), p.Bits()), p.Bits()}] = r.value
			t.v6lens = append(t.v6lens, p.Bits())
		}
	}
	for _, l := range []*[]int{&t.v4lens, &t.v6lens} {
		slices.SortFunc(*l, func(a, b int) int { return cmp.Compare(b, a) })
		*l = slices.Compact(*l)
	}
	return t
}

// lookup4 returns the value of the longest prefix covering a, or noRoute.
func (t *routeTable) lookup4(a [4]byte) int {
	for _, l := range t.v4lens {
		if v, ok := t.v4[key4(mask4(a, l), l)]; ok {
			return v
		}
	}
	return noRoute
}

// lookup6 returns the value of the longest prefix covering a, or noRoute.
func (t *routeTable) lookup6(a [16]byte) int {
	for _, l := range t.v6lens {
		if v, ok := t.v6[prefix6{mask16(a, l), l}]; ok {
			return v
		}
	}
	return noRoute
}

// lookup dispatches on the IP version of a decoded address (IPv4 in the
// first four bytes).
func (t *routeTable) lookup(version uint8, a *[16]byte) int {
	if version == 4 {
		return t.lookup4([4]byte(a[:4]))
	}
	return t.lookup6(*a)
}

func mask4(a [4]byte, bits int) uint32 {
	v := binary.BigEndian.Uint32(a[:])
	if bits == 0 {
		return 0
	}
	return v &^ (1<<(32-bits) - 1)
}

func mask16(a [16]byte, bits int) [16]byte {
	for i := range a {
		switch {
		case bits >= 8:
			bits -= 8
		case bits > 0:
			a[i] &= ^byte(0xff >> bits)
			bits = 0
		default:
			a[i] = 0
		}
	}
	return a
}
