package natengine

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/packet"
)

// twoRemotes is testRules with a second remote cluster, 242.3.0.0/16, so
// that one remote can attack while the other behaves.
func twoRemotes() Rules {
	r := testRules()
	r.Remotes = append(r.Remotes, pfx("242.3.0.0/16"))
	return r
}

// through runs a copy of b through fn as arriving from or leaving for remote
// cluster remote.
func through(fn func(int, []byte, *packet.Parsed) bool, remote int, b []byte) (*packet.Parsed, bool) {
	b = bytes.Clone(b)
	var p packet.Parsed
	if p.Decode(b) != packet.DropNone {
		return nil, false
	}
	return &p, fn(remote, b, &p)
}

// TestFragmentFloodDoesNotStarveOthers: a source that sends first fragments
// it never completes, fast enough to fill the pending-fragment table many
// times over within the reassembly timeout, does not stop a well-behaved
// source's fragmented datagrams, whichever way they go.
func TestFragmentFloodDoesNotStarveOthers(t *testing.T) {
	const (
		seconds   = 90   // past the reassembly timeout
		perSecond = 10   // legitimate datagrams
		flood     = 2000 // attacker first fragments per second
	)
	for _, tt := range []struct {
		name      string
		attackers int  // distinct attacking pods (egress)
		ingress   bool // the flood comes from another remote cluster
	}{
		{"egress, one pod floods", 1, false},
		{"egress, 64 pods flood", 64, false},
		{"ingress, another remote cluster floods", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEngine(t, Config{}, twoRemotes())
			// The legitimate datagrams: a pod's, or the replies to it.
			legit := pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 5000, dport: 53}
			fn, want := e.Egress, a16("242.1.0.3")
			if tt.ingress {
				if _, ok := through(e.Egress, 0, legit.build()); !ok {
					t.Fatal("the legitimate flow was not created")
				}
				legit = pkt{src: "242.2.0.9", dst: "242.1.0.3", proto: udp, sport: 53, dport: 5000}
				fn, want = e.Ingress, a16("10.0.0.7")
			}
			attack := func(i int) {
				k := pkt{src: "242.3.0.9", dst: "242.1.0.200", proto: udp, sport: 6000, dport: 53, id: uint32(i), more: true, payload: bigPayload}
				afn, remote := e.Ingress, 1
				if !tt.ingress {
					k.src, k.dst = addrOf(pod(0x500+i%tt.attackers), false).String(), "242.2.0.9"
					afn, remote = e.Egress, 0
				}
				through(afn, remote, k.build())
			}
			passed, sent, a := 0, 0, 0
			burst := flood / perSecond / 3
			for range seconds {
				for range perSecond {
					k := legit
					k.id = uint32(sent)
					f, s, l := frags(k)
					ok := true
					for _, b := range [][]byte{f, s, l} {
						for range burst {
							attack(a)
							a++
						}
						p, pass := through(fn, 0, b)
						got := p.Src
						if tt.ingress {
							got = p.Dst
						}
						ok = ok && pass && got == want
					}
					sent++
					if ok {
						passed++
					}
				}
				e.clock.Advance(time.Second)
			}
			st := e.Stats()
			if passed*100 < sent*99 {
				t.Errorf("%d of %d legitimate datagrams got through beside %d attacking first fragments; drops %v", passed, sent, a, st.Drops)
			}
			if st.Evictions[EvictFragmentSourceLimit]+st.Evictions[EvictFragmentTableFull] == 0 {
				t.Errorf("the flood evicted nothing: %v", st.Evictions)
			}
		})
	}
}

// TestFlowFloodDoesNotStarveOthers: one pod opening flows as fast as it can
// (many source ports), or one remote cluster opening flows to an ingress IP
// from addresses all over its global CIDR, to a peer that answers every one,
// does not stop a well-behaved pod from opening and using its flows.
func TestFlowFloodDoesNotStarveOthers(t *testing.T) {
	const (
		maxFlows = 8192
		legitN   = 500
		perLegit = 20 // attacker flows per legitimate one
	)
	for _, tt := range []struct {
		name    string
		ingress bool
	}{
		{"one pod floods egress", false},
		{"another remote cluster floods ingress", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEngine(t, Config{MaxFlows: maxFlows}, twoRemotes())
			tp := newTCPPacket(ip("10.0.0.7"), ip("242.2.0.9"), 1, 443, syn)
			remote := a16("242.2.0.9")
			a := 0
			attack := func() {
				a++
				if tt.ingress {
					src := [16]byte{242, 3, byte(a >> 8), byte(a)}
					b, p := tp.set(src, a16("242.1.0.200"), uint16(1024+a%60000), 80, syn)
					if e.Ingress(1, b, p) {
						// The service answers.
						b, p = tp.set(a16("10.96.0.10"), src, 80, uint16(1024+a%60000), syn|ack)
						e.Egress(1, b, p)
					}
					return
				}
				b, p := tp.set(a16("10.0.6.6"), remote, uint16(1024+a%60000), 80, syn)
				if e.Egress(0, b, p) {
					b, p = tp.set(remote, p.Src, 80, p.SrcPort, syn|ack)
					e.Ingress(0, b, p)
				}
			}
			passed := 0
			for i := range legitN {
				for range perLegit {
					attack()
				}
				port := uint16(20000 + i)
				b, p := tp.set(a16("10.0.0.7"), remote, port, 443, syn)
				if !e.Egress(0, b, p) || p.Src != a16("242.1.0.3") {
					continue
				}
				g, gp := p.Src, p.SrcPort
				attack()
				b, p = tp.set(remote, g, 443, gp, syn|ack)
				if !e.Ingress(0, b, p) || p.Dst != a16("10.0.0.7") || p.DstPort != port {
					continue
				}
				attack()
				b, p = tp.set(a16("10.0.0.7"), remote, port, 443, ack)
				if !e.Egress(0, b, p) || p.Src != g || p.SrcPort != gp {
					continue
				}
				attack()
				b, p = tp.set(remote, g, 443, gp, ack)
				if !e.Ingress(0, b, p) || p.Dst != a16("10.0.0.7") || p.DstPort != port {
					continue
				}
				passed++
				if i%100 == 99 {
					e.clock.Advance(time.Second)
				}
			}
			st := e.Stats()
			if passed*100 < legitN*99 {
				t.Errorf("%d of %d legitimate flows created and used beside %d attacking ones; drops %v", passed, legitN, a, st.Drops)
			}
			if st.Drops[DropSourceLimit] == 0 {
				t.Error("the attacker was never held to its share")
			}
			checkShares(t, e.Engine)
		})
	}
}

// checkShares compares the engine's per-source counts with a count by
// scanning every live flow.
func checkShares(t *testing.T, e *Engine) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	want := map[uint32]uint32{}
	for i := uint32(1); i <= e.t.used; i++ {
		if f := e.t.flow(i); f.linked() {
			want[f.owner]++
		}
	}
	if len(want) != len(e.share.ids) {
		t.Errorf("%d sources hold flows, %d recorded", len(want), len(e.share.ids))
	}
	for src, id := range e.share.ids {
		if n := e.share.recs[id].n; n != want[id] || e.share.recs[id].src != src {
			t.Errorf("source %v: counted %d flows, holds %d", src.addr[:4], n, want[id])
		}
	}
}

// TestFullTableTakesOnlyFromHeavierSources: in a table full of replied
// flows, a new flow takes a flow of a source holding at least two more
// than its own, never an established TCP connection, and is refused when
// there is none.
func TestFullTableTakesOnlyFromHeavierSources(t *testing.T) {
	const max = 64
	// Sampling needs real randomness: the tests' counting Rand would look
	// at neighbouring slots only.
	rng := rand.New(rand.NewPCG(5, 6))
	e := newTestEngine(t, Config{MaxFlows: max, MaxFlowsPerSource: max, Rand: rng.Uint32}, testRules())
	remote := a16("242.2.0.9")
	tp := newTCPPacket(ip("10.0.0.1"), ip("242.2.0.9"), 1, 443, syn)
	open := func(src [16]byte, port uint16, establish bool) bool {
		b, p := tp.set(src, remote, port, 443, syn)
		if !e.Egress(0, b, p) {
			return false
		}
		g, gp := p.Src, p.SrcPort
		b, p = tp.set(remote, g, 443, gp, syn|ack)
		e.Ingress(0, b, p)
		if establish {
			b, p = tp.set(src, remote, port, 443, ack)
			e.Egress(0, b, p)
		}
		return true
	}
	// A heavy pod's 40 half-open but replied flows, and 24 light pods'
	// established ones, fill the table.
	for i := range 40 {
		open(pod(1), uint16(2000+i), false)
	}
	for i := range 24 {
		open(pod(100+i), 3000, true)
	}
	for i := range 30 {
		if !open(pod(200+i), 4000, true) {
			t.Fatalf("new flow %d refused while the heavy pod held %d", i, e.share.count(localSource(new(pod(1)))))
		}
		checkShares(t, e.Engine)
	}
	s := e.Stats()
	if s.Evictions[EvictFairShare] != 30 {
		t.Errorf("fair_share evictions %d, want 30", s.Evictions[EvictFairShare])
	}
	for i := range 24 {
		b, p := tp.set(pod(100+i), remote, 3000, 443, ack)
		if !e.Egress(0, b, p) {
			t.Fatalf("established flow of light pod %d lost", i)
		}
	}
	// Now the heavy pod holds 10 and every other flow is established:
	// nothing may go for the heavy pod's own new flow.
	if open(pod(1), 5000, false) {
		t.Error("a flow was evicted for the heaviest source")
	}
	if s := e.Stats(); s.Drops[DropTableFull] == 0 {
		t.Errorf("table_full %d, want a refusal", s.Drops[DropTableFull])
	}
}
