package natengine

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// refPool is the obviously correct pool: a set of taken offsets, searched
// one address at a time.
type refPool struct {
	base, size uint32
	used       map[uint32]bool
}

func newRefPool(p netip.Prefix) *refPool {
	size := uint32(1) << (32 - p.Bits())
	return &refPool{base: u32(p.Addr()), size: size, used: map[uint32]bool{0: true, size - 1: true}}
}

func (p *refPool) allocate(n int) []netip.Addr {
	if n == 1 {
		for i := p.size - 1; i > 0; i-- {
			if !p.used[i] {
				p.used[i] = true
				return []netip.Addr{addr4(p.base + i)}
			}
		}
		return nil
	}
	for start := uint32(1); start+uint32(n) <= p.size-1; start++ {
		free := true
		for i := start; i < start+uint32(n); i++ {
			free = free && !p.used[i]
		}
		if free {
			var out []netip.Addr
			for i := start; i < start+uint32(n); i++ {
				p.used[i] = true
				out = append(out, addr4(p.base+i))
			}
			return out
		}
	}
	return nil
}

func TestPoolMatchesReference(t *testing.T) {
	for _, cidr := range []string{"242.1.0.0/30", "242.1.0.0/29", "242.1.0.0/26", "242.1.0.0/23"} {
		t.Run(cidr, func(t *testing.T) {
			prefix := netip.MustParsePrefix(cidr)
			p, ref := NewAddrPool(prefix), newRefPool(prefix)
			rng := rand.New(rand.NewPCG(1, uint64(prefix.Bits())))
			var held [][]netip.Addr
			for step := range 5000 {
				switch op := rng.IntN(10); {
				case op < 5:
					n := 1 + rng.IntN(20)
					if rng.IntN(2) == 0 {
						n = 1
					}
					got, err := p.Allocate(n)
					want := ref.allocate(n)
					if !slices.Equal(got, want) || (err == nil) != (want != nil) {
						t.Fatalf("step %d: allocate(%d) = %v, %v; reference %v", step, n, got, err, want)
					}
					if got != nil {
						held = append(held, got)
					}
				case op < 8 && len(held) > 0:
					k := rng.IntN(len(held))
					p.Release(held[k])
					for _, a := range held[k] {
						delete(ref.used, u32(a)-ref.base)
					}
					held = slices.Delete(held, k, k+1)
				default:
					a := addr4(ref.base + uint32(rng.IntN(int(ref.size))))
					err := p.Reserve([]netip.Addr{a})
					off := u32(a) - ref.base
					if (err == nil) == ref.used[off] {
						t.Fatalf("step %d: reserve(%s) = %v, reference taken=%v", step, a, err, ref.used[off])
					}
					if err == nil {
						ref.used[off] = true
						held = append(held, []netip.Addr{a})
					}
				}
				if p.free != int(ref.size)-len(ref.used) {
					t.Fatalf("step %d: free %d, reference %d", step, p.free, int(ref.size)-len(ref.used))
				}
			}
		})
	}
}

func TestPoolNeverHandsOutNetworkOrBroadcast(t *testing.T) {
	p := NewAddrPool(netip.MustParsePrefix("242.1.0.0/29"))
	got, err := p.Allocate(6)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{}
	for i := 1; i <= 6; i++ {
		want = append(want, netip.AddrFrom4([4]byte{242, 1, 0, byte(i)}))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("allocate(6) in a /29 = %v, want %v", got, want)
	}
	if _, err := p.Allocate(1); err == nil {
		t.Fatal("allocate(1) in a full /29 succeeded")
	}
	for _, s := range []string{"242.1.0.0", "242.1.0.7", "242.1.0.8", "10.0.0.1"} {
		if err := p.Reserve([]netip.Addr{netip.MustParseAddr(s)}); err == nil {
			t.Errorf("reserve(%s) succeeded", s)
		}
	}
}

func TestPoolReserveIsAllOrNothing(t *testing.T) {
	p := NewAddrPool(netip.MustParsePrefix("242.1.0.0/24"))
	a, b := netip.MustParseAddr("242.1.0.10"), netip.MustParseAddr("242.1.0.11")
	if err := p.Reserve([]netip.Addr{a, b, a}); err == nil {
		t.Fatal("reserving an address twice in one call succeeded")
	}
	if err := p.Reserve([]netip.Addr{a, netip.MustParseAddr("242.2.0.1")}); err == nil {
		t.Fatal("reserving an address outside the CIDR succeeded")
	}
	if p.free != 254 {
		t.Fatalf("failed reservations left %d free, want 254", p.free)
	}
	if err := p.Reserve([]netip.Addr{a, b}); err != nil {
		t.Fatalf("reserving free addresses: %v", err)
	}
}
