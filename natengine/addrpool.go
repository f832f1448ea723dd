package natengine

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
)

// AddrPool hands out the addresses of an IPv4 global CIDR, never its network
// or broadcast address. It is the one allocator of global IPs: the
// Globalnet IPAM of the controller and the gateway's own configuration
// both count addresses out of it, so that the same request gets the same
// addresses either way. Like Submariner's pool, a single address comes from
// the top of the range and a block of several from the bottom (first fit),
// so that single allocations do not fragment the space blocks need.
//
// A set bit in used marks an address taken; the network and broadcast
// addresses are set from the start. AddrPool is not safe for concurrent use.
type AddrPool struct {
	prefix netip.Prefix
	base   uint32 // the network address
	size   uint32 // addresses in the prefix, network and broadcast included
	used   []uint64
	free   int
}

// Limits on a pool's prefix: a /30 leaves two usable addresses, and a /8
// keeps the bitmap at 2 MiB.
const (
	MinPoolBits = 8
	MaxPoolBits = 30
)

// Free is the number of addresses left.
func (p *AddrPool) Free() int { return p.free }

// ErrExhausted is the cause of every failed allocation.
var ErrExhausted = errors.New("global CIDR exhausted")

// NewAddrPool returns a pool of the addresses of the IPv4 prefix p.
func NewAddrPool(p netip.Prefix) *AddrPool {
	p = p.Masked()
	size := uint32(1) << (32 - p.Bits())
	pl := &AddrPool{
		prefix: p,
		base:   u32(p.Addr()),
		size:   size,
		used:   make([]uint64, (size+63)/64),
		free:   int(size) - 2,
	}
	pl.set(0)
	pl.set(size - 1)
	// Bits past the end of a small prefix are never free.
	for i := size; i%64 != 0; i++ {
		pl.set(i)
	}
	return pl
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func addr4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (p *AddrPool) isSet(i uint32) bool { return p.used[i/64]&(1<<(i%64)) != 0 }
func (p *AddrPool) set(i uint32)        { p.used[i/64] |= 1 << (i % 64) }
func (p *AddrPool) clear(i uint32)      { p.used[i/64] &^= 1 << (i % 64) }

// check says why a cannot be one of the pool's addresses, or returns its
// offset.
func (p *AddrPool) check(a netip.Addr) (uint32, error) {
	if !a.Is4() || !p.prefix.Contains(a) {
		return 0, fmt.Errorf("%s is outside the global CIDR %s", a, p.prefix)
	}
	i := u32(a) - p.base
	if i == 0 || i == p.size-1 {
		return 0, fmt.Errorf("%s is the network or broadcast address of the global CIDR %s", a, p.prefix)
	}
	return i, nil
}

// Reserve takes the given addresses, all or none: an address that is
// outside the CIDR, taken, or listed twice fails the call.
func (p *AddrPool) Reserve(addrs []netip.Addr) error {
	offs := make([]uint32, 0, len(addrs))
	undo := func() {
		for _, i := range offs {
			p.clear(i)
		}
	}
	for _, a := range addrs {
		i, err := p.check(a)
		if err != nil {
			undo()
			return err
		}
		if p.isSet(i) { // taken before, or listed twice
			undo()
			return fmt.Errorf("%s is already allocated", a)
		}
		p.set(i)
		offs = append(offs, i)
	}
	p.free -= len(offs)
	return nil
}

// Release returns addresses to the pool; those it does not hold are
// ignored.
func (p *AddrPool) Release(addrs []netip.Addr) {
	for _, a := range addrs {
		if i, err := p.check(a); err == nil && p.isSet(i) {
			p.clear(i)
			p.free++
		}
	}
}

// Allocate takes n addresses: the highest free one when n is 1, else the
// lowest block of n contiguous free ones.
func (p *AddrPool) Allocate(n int) ([]netip.Addr, error) {
	switch {
	case n < 1:
		return nil, fmt.Errorf("cannot allocate %d addresses", n)
	case n > p.free:
		return nil, fmt.Errorf("%w: %d of %d addresses free", ErrExhausted, p.free, p.size-2)
	case n == 1:
		return []netip.Addr{p.take(p.highestFree())}, nil
	}
	start, ok := p.lowestBlock(uint32(n))
	if !ok {
		return nil, fmt.Errorf("%w: %d addresses free, but no %d contiguous", ErrExhausted, p.free, n)
	}
	out := make([]netip.Addr, n)
	for k := range out {
		out[k] = p.take(start + uint32(k))
	}
	return out, nil
}

func (p *AddrPool) take(i uint32) netip.Addr {
	p.set(i)
	p.free--
	return addr4(p.base + i)
}

// highestFree returns the highest free offset; the caller has checked that
// one is free.
func (p *AddrPool) highestFree() uint32 {
	for w := len(p.used) - 1; ; w-- {
		if inv := ^p.used[w]; inv != 0 {
			return uint32(w*64 + 63 - bits.LeadingZeros64(inv))
		}
	}
}

// lowestBlock finds the lowest run of n free offsets, skipping full words.
func (p *AddrPool) lowestBlock(n uint32) (uint32, bool) {
	var run, start uint32
	for i := uint32(1); i < p.size-1; i++ {
		if run == 0 && i%64 == 0 && p.used[i/64] == ^uint64(0) {
			i += 63
			continue
		}
		if p.isSet(i) {
			run = 0
			continue
		}
		if run == 0 {
			start = i
		}
		if run++; run == n {
			return start, true
		}
	}
	return 0, false
}
