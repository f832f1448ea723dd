package natengine

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/snorkel-net/snorkel/packet"
)

var bigPayload = make([]byte, 100)

func frags(k pkt) (first, second, last []byte) {
	k.payload = bigPayload
	f, s, l := k, k, k
	f.more = true
	s.fragOff, s.more = 4, true
	l.fragOff = 8
	return f.build(), s.build(), l.build()
}

func srcOf(t *testing.T, b []byte) netip.Addr {
	var p packet.Parsed
	if p.Decode(b) != packet.DropNone {
		t.Fatal("does not decode")
	}
	return p.SrcAddr()
}

func dstOf(t *testing.T, b []byte) netip.Addr {
	var p packet.Parsed
	if p.Decode(b) != packet.DropNone {
		t.Fatal("does not decode")
	}
	return p.DstAddr()
}

func TestFragmentsFollowTheFirstFragment(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rules Rules
		out   pkt
		want  string
	}{
		{"IPv4 UDP", testRules(), pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53, id: 77}, "242.1.0.3"},
		{"IPv6 UDP", testRules6(), pkt{src: "fd00::7", dst: "fd42:2::9", proto: udp, sport: 5000, dport: 53, id: 77}, "fd42:1::1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEngine(t, Config{}, tt.rules)
			f, s, l := frags(tt.out)
			for i, b := range [][]byte{f, s, l} {
				out, ok := e.egress(t, b)
				if !ok || srcOf(t, out) != ip(tt.want) {
					t.Fatalf("egress fragment %d: ok=%v", i, ok)
				}
			}
			// The reply comes back in fragments too.
			r := tt.out
			r.src, r.dst, r.sport, r.dport, r.id = tt.out.dst, tt.want, tt.out.dport, tt.out.sport, 99
			f, s, l = frags(r)
			for i, b := range [][]byte{f, s, l} {
				in, ok := e.ingress(t, b)
				if !ok || dstOf(t, in) != ip(tt.out.src) {
					t.Fatalf("ingress fragment %d: ok=%v drops %v", i, ok, e.Stats().Drops)
				}
			}
			if e.Stats().Fragments != 2 {
				t.Errorf("pending fragment mappings %d, want 2", e.Stats().Fragments)
			}
			e.clock.Advance(fragTimeout * 1e9)
			e.egress(t, pkt{src: tt.out.src, dst: tt.out.dst, proto: udp, sport: 1, dport: 2, id: 1, more: true, payload: bigPayload}.build())
			if n := e.Stats().Fragments; n != 1 {
				t.Errorf("after the reassembly timeout %d mappings, want only the new one", n)
			}
		})
	}
}

func TestFragmentsOutOfOrder(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	// Egress: a pod's source address does not depend on ports.
	f, s, l := frags(pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53, id: 5})
	for i, b := range [][]byte{l, s, f} {
		out, ok := e.egress(t, b)
		if !ok || srcOf(t, out) != ip("242.1.0.3") {
			t.Fatalf("egress fragment %d out of order: ok=%v", i, ok)
		}
	}
	// Ingress to a service's global IP: one local address.
	f, s, l = frags(pkt{src: "242.2.0.9", dst: "242.1.0.200", proto: udp, sport: 5000, dport: 53, id: 6})
	for i, b := range [][]byte{s, l, f} {
		in, ok := e.ingress(t, b)
		if !ok || dstOf(t, in) != ip("10.96.0.10") {
			t.Fatalf("ingress fragment %d out of order: ok=%v", i, ok)
		}
	}
	// The ClusterIP's reply fragments, last first, leave from the service's global IP.
	f, s, l = frags(pkt{src: "10.96.0.10", dst: "242.2.0.9", proto: udp, sport: 53, dport: 5000, id: 8})
	for i, b := range [][]byte{l, f, s} {
		out, ok := e.egress(t, b)
		if !ok || srcOf(t, out) != ip("242.1.0.200") {
			t.Fatalf("reply fragment %d out of order: ok=%v", i, ok)
		}
	}
	// Ingress to an egress IP: many pods share it; without the first
	// fragment there is no telling which.
	_, s, _ = frags(pkt{src: "242.2.0.9", dst: "242.1.0.3", proto: udp, sport: 53, dport: 5000, id: 7})
	if _, ok := e.ingress(t, s); ok {
		t.Fatal("an unattributable fragment passed")
	}
	if n := e.Stats().Drops[DropFragmentUnknown]; n != 1 {
		t.Errorf("fragment_unknown = %d, want 1", n)
	}
}

// TestFragmentTableEvictsInsteadOfRefusing: a source at its share gives up
// its own oldest mapping, a full table its oldest one; a new first fragment
// is never refused.
func TestFragmentTableEvictsInsteadOfRefusing(t *testing.T) {
	e := newTestEngine(t, Config{MaxFragments: 4, MaxFragmentsPerSource: 2}, testRules())
	k := pkt{dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53}
	for _, f := range []struct {
		src string
		id  uint32
	}{{"10.0.0.7", 1}, {"10.0.0.7", 2}, {"10.0.0.7", 3}, {"10.0.0.8", 1}, {"10.0.0.8", 2}, {"10.0.0.9", 1}} {
		k.src, k.id = f.src, f.id
		first, _, _ := frags(k)
		if _, ok := e.egress(t, first); !ok {
			t.Fatalf("first fragment %s/%d refused", f.src, f.id)
		}
	}
	s := e.Stats()
	if s.Fragments != 4 || s.Evictions[EvictFragmentSourceLimit] != 1 || s.Evictions[EvictFragmentTableFull] != 1 {
		t.Errorf("fragments %d, evictions %v; want 4, one by source limit, one by a full table", s.Fragments, s.Evictions)
	}
	for _, f := range []struct {
		src  string
		id   uint32
		kept bool
	}{{"10.0.0.7", 1, false}, {"10.0.0.7", 2, false}, {"10.0.0.7", 3, true}, {"10.0.0.8", 1, true}, {"10.0.0.8", 2, true}, {"10.0.0.9", 1, true}} {
		k.src, k.id = f.src, f.id
		_, second, _ := frags(k)
		var p packet.Parsed
		p.Decode(second)
		if _, ok := e.frags.lookup(&p, e.Engine.clock()); ok != f.kept {
			t.Errorf("mapping of %s/%d kept=%v, want %v", f.src, f.id, ok, f.kept)
		}
	}
}

// refFragments is the obviously-correct model of the fragment table: its
// entries in arrival order, counted by scanning.
type refFragments struct {
	max, perSource int
	entries        []refFragment
}

type refFragment struct {
	k   fragKey
	src source
	to  [16]byte
	at  uint32
}

func (r *refFragments) record(k fragKey, src source, to [16]byte, now uint32) {
	for i := range r.entries {
		if r.entries[i].k == k {
			r.entries[i].to = to
			return
		}
	}
	for len(r.entries) > 0 && now-r.entries[0].at >= fragTimeout {
		r.entries = r.entries[1:]
	}
	n := 0
	for _, e := range r.entries {
		if e.src == src {
			n++
		}
	}
	switch {
	case n >= r.perSource:
		for i, e := range r.entries {
			if e.src == src {
				r.entries = append(r.entries[:i:i], r.entries[i+1:]...)
				break
			}
		}
	case len(r.entries) == r.max:
		r.entries = r.entries[1:]
	}
	r.entries = append(r.entries, refFragment{k, src, to, now})
}

func (r *refFragments) lookup(k fragKey, now uint32) ([16]byte, bool) {
	for _, e := range r.entries {
		if e.k == k && now-e.at < fragTimeout {
			return e.to, true
		}
	}
	return [16]byte{}, false
}

// TestFragmentTableMatchesAReference drives the table and the model with
// random first fragments, lookups and time, from few sources in a small
// table so that every eviction path runs often.
func TestFragmentTableMatchesAReference(t *testing.T) {
	const max, perSource = 32, 8
	tbl := newFragments(max, perSource)
	ref := &refFragments{max: max, perSource: perSource}
	var c counters
	rng := rand.New(rand.NewPCG(3, 4))
	now := uint32(1)
	for step := range 200000 {
		var p packet.Parsed
		p.Version, p.Proto = 4, udp
		p.Src = [16]byte{10, 0, 0, byte(rng.IntN(12))}
		p.Dst = [16]byte{242, 2, 0, 9}
		p.FragID = uint32(rng.IntN(16))
		k := fragKeyOf(&p)
		switch rng.IntN(8) {
		case 0:
			now += uint32(rng.IntN(20))
		case 1, 2, 3:
			to := [16]byte{242, 1, 0, byte(rng.IntN(256))}
			src := localSource(&p.Src)
			tbl.record(&p, src, to, now, &c)
			ref.record(k, src, to, now)
		default:
			got, ok := tbl.lookup(&p, now)
			want, wok := ref.lookup(k, now)
			if ok != wok || got != want {
				t.Fatalf("step %d: lookup %v/%d = %v %v, reference %v %v", step, p.Src[:4], p.FragID, got[:4], ok, want[:4], wok)
			}
		}
		if tbl.n != len(ref.entries) || len(tbl.m) != tbl.n {
			t.Fatalf("step %d: %d entries (%d mapped), reference %d", step, tbl.n, len(tbl.m), len(ref.entries))
		}
	}
}

// TestFragmentRecordAllocatesNothing: once the table has held as many
// entries and sources as it can, recording and evicting allocate nothing.
func TestFragmentRecordAllocatesNothing(t *testing.T) {
	tbl := newFragments(DefaultMaxFragments, DefaultMaxFragments/16)
	var c counters
	var p packet.Parsed
	p.Version, p.Proto = 4, udp
	i := 0
	next := func() {
		p.Src = [16]byte{10, 0, byte(i >> 8 & 0x3f), byte(i)}
		p.FragID = uint32(i)
		tbl.record(&p, localSource(&p.Src), p.Src, 1, &c)
		i++
	}
	for range 4 * DefaultMaxFragments {
		next()
	}
	if allocs := testing.AllocsPerRun(10000, next); allocs != 0 {
		t.Errorf("%v allocations per first fragment, want 0", allocs)
	}
}
