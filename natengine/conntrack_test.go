package natengine

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"

	"github.com/snorkel-net/snorkel/packet"
)

// tcpPacket is a reusable IPv4 TCP packet whose tuple the tests rewrite in
// place, for runs of many flows.
type tcpPacket struct {
	b []byte
	p packet.Parsed
}

func newTCPPacket(src, dst netip.Addr, sport, dport uint16, flags uint8) *tcpPacket {
	k := pkt{src: src.String(), dst: dst.String(), proto: tcp, sport: sport, dport: dport, flags: flags, payload: []byte{}}
	t := &tcpPacket{b: k.build()}
	t.p.Decode(t.b)
	return t
}

// set rewrites the tuple, keeping checksums right, and returns a fresh copy
// ready for translation.
func (t *tcpPacket) set(src, dst [16]byte, sport, dport uint16, flags uint8) ([]byte, *packet.Parsed) {
	packet.SetSrcAddr(t.b, &t.p, src)
	packet.SetDstAddr(t.b, &t.p, dst)
	packet.SetSrcPort(t.b, &t.p, sport)
	packet.SetDstPort(t.b, &t.p, dport)
	tcp := packet.TCP(t.b[20:])
	old := binary.BigEndian.Uint16(t.b[32:])
	t.b[33] = flags
	tcp.SetChecksum(packet.UpdateChecksum16(tcp.Checksum(), old, binary.BigEndian.Uint16(t.b[32:])))
	t.p.TCPFlags = flags
	p := t.p
	return t.b, &p
}

func pod(i int) [16]byte { return [16]byte{10, 0, byte(i >> 8), byte(i)} }

// TestFloodKeepsEstablishedFlows: new flows at twice the table's size evict
// each other but never an established flow, and memory stays bounded.
func TestFloodKeepsEstablishedFlows(t *testing.T) {
	const max, established = 20000, 10000
	e := newTestEngine(t, Config{MaxFlows: max}, testRules())
	remote := a16("242.2.0.9")
	tp := newTCPPacket(ip("10.0.0.1"), ip("242.2.0.9"), 1, 443, syn)
	globals := make([][16]byte, established)
	gports := make([]uint16, established)
	for i := range established {
		b, p := tp.set(pod(i), remote, 30000, 443, syn)
		if !e.Egress(0, b, p) {
			t.Fatalf("flow %d dropped", i)
		}
		globals[i], gports[i] = p.Src, p.SrcPort
		b, p = tp.set(remote, globals[i], 443, gports[i], syn|ack)
		if !e.Ingress(0, b, p) {
			t.Fatalf("reply %d dropped", i)
		}
	}
	heap := e.t.used
	for i := range 2 * max {
		b, p := tp.set(pod(i%4000+20000), remote, uint16(1024+i/4000), 80, syn)
		e.Egress(0, b, p)
	}
	for i := range established {
		b, p := tp.set(pod(i), remote, 30000, 443, ack)
		if !e.Egress(0, b, p) || p.Src != globals[i] || p.SrcPort != gports[i] {
			t.Fatalf("established flow %d lost or remapped after the flood", i)
		}
		b, p = tp.set(remote, globals[i], 443, gports[i], ack)
		if !e.Ingress(0, b, p) || p.Dst != pod(i) {
			t.Fatalf("established flow %d's reply lost after the flood", i)
		}
	}
	s := e.Stats()
	if s.Flows > max || s.Evicted < max || e.t.used > max {
		t.Errorf("flows %d (max %d), evicted %d, slots %d (before the flood %d)", s.Flows, max, s.Evicted, e.t.used, heap)
	}
	if s.Drops[DropTableFull] != 0 {
		t.Errorf("table_full %d while unreplied flows could be evicted", s.Drops[DropTableFull])
	}
}

func TestTableFullOfRepliedFlowsDropsNewFlows(t *testing.T) {
	e := newTestEngine(t, Config{MaxFlows: 10}, testRules())
	remote := a16("242.2.0.9")
	tp := newTCPPacket(ip("10.0.0.1"), ip("242.2.0.9"), 1, 443, syn)
	for i := range 10 {
		b, p := tp.set(pod(i), remote, 30000, 443, syn)
		e.Egress(0, b, p)
		b, p = tp.set(remote, p.Src, 443, p.SrcPort, syn|ack)
		e.Ingress(0, b, p)
	}
	b, p := tp.set(pod(99), remote, 30000, 443, syn)
	if e.Egress(0, b, p) {
		t.Fatal("a new flow passed a table full of replied flows")
	}
	if s := e.Stats(); s.Drops[DropTableFull] != 1 || s.Flows != 10 {
		t.Errorf("table_full %d, flows %d", s.Drops[DropTableFull], s.Flows)
	}
}

// refConntrack is the obviously-correct model: maps from each direction's
// tuple to the flow's translation, filled from what the engine chose.
type refConntrack struct {
	out map[key]refFlow // egress tuple
	in  map[key]refFlow // reply tuple
}

type refFlow struct {
	local, global netip.AddrPort
}

// TestConntrackMatchesAMapReference drives the engine with random traffic —
// new flows, replies, repeats — and checks every translation against the
// reference: a known tuple translates as before, replies map back, and no
// two flows share a reply tuple.
func TestConntrackMatchesAMapReference(t *testing.T) {
	r := testRules()
	r.ClusterEgress = r.ClusterEgress[:1]
	e := newTestEngine(t, Config{}, r)
	ref := refConntrack{out: map[key]refFlow{}, in: map[key]refFlow{}}
	rng := rand.New(rand.NewPCG(1, 2))
	tp := newTCPPacket(ip("10.0.0.1"), ip("242.2.0.9"), 1, 443, syn)
	remotes := [][16]byte{a16("242.2.0.9"), a16("242.2.0.10")}
	type out struct {
		k   key
		got refFlow
	}
	var known []out
	for range 100000 {
		switch rng.IntN(3) {
		case 0: // a packet from a pod, new or known
			k := key{a: pod(rng.IntN(50)), ap: uint16(1024 + rng.IntN(20)), b: remotes[rng.IntN(2)], bp: 443, proto: tcp}
			b, p := tp.set(k.a, k.b, k.ap, k.bp, ack)
			if !e.Egress(0, b, p) {
				t.Fatalf("egress dropped: %v", e.Stats().Drops)
			}
			if p.Dst != k.b || p.DstPort != k.bp {
				t.Fatal("egress changed the destination")
			}
			got := refFlow{netip.AddrPortFrom(addrOf(k.a, false), k.ap), netip.AddrPortFrom(addrOf(p.Src, false), p.SrcPort)}
			if want, ok := ref.out[k]; ok && want != got {
				t.Fatalf("known tuple %v translated to %v, before to %v", got.local, got.global, want.global)
			}
			rk := key{a: k.b, ap: k.bp, b: p.Src, bp: p.SrcPort, proto: tcp}
			if prev, ok := ref.in[rk]; ok && prev.local != got.local {
				t.Fatalf("reply tuple of %v already belongs to %v", got.local, prev.local)
			}
			ref.out[k], ref.in[rk] = got, got
			known = append(known, out{rk, got})
		case 1, 2: // a reply to a known flow
			if len(known) == 0 {
				continue
			}
			o := known[rng.IntN(len(known))]
			b, p := tp.set(o.k.a, o.k.b, o.k.ap, o.k.bp, ack)
			if !e.Ingress(0, b, p) {
				t.Fatal("reply dropped")
			}
			if netip.AddrPortFrom(addrOf(p.Dst, false), p.DstPort) != o.got.local || p.Src != o.k.a || p.SrcPort != o.k.ap {
				t.Fatalf("reply to %v reached %v:%d", o.got.local, addrOf(p.Dst, false), p.DstPort)
			}
		}
	}
	if n := e.Stats().Flows; n != len(ref.out) {
		t.Errorf("engine has %d flows, reference %d", n, len(ref.out))
	}
}

// TestMillionFlowsAreUniqueAndReversible: at a million flows every reply
// tuple is distinct and every reply maps back to its local endpoint.
func TestMillionFlowsAreUniqueAndReversible(t *testing.T) {
	if testing.Short() {
		t.Skip("a million flows take a few seconds; skipped in -short")
	}
	const n = 1 << 20
	r := testRules()
	r.ClusterEgress = r.ClusterEgress[:2]
	e := newTestEngine(t, Config{MaxFlows: n}, r)
	tp := newTCPPacket(ip("10.0.0.1"), ip("242.2.0.9"), 1, 443, syn)
	type mapping struct {
		g  [16]byte
		gp uint16
	}
	seen := make(map[[2]mapping]int32, n)
	maps := make([]mapping, n)
	// 4096 pods, all on source port 40000, each to 256 remote services:
	// all but two flows per remote collide on the preserved port.
	rem := func(i int) [16]byte { return [16]byte{242, 2, 1, byte(i >> 12)} }
	for i := range n {
		b, p := tp.set(pod(i&0xfff), rem(i), 40000, 443, syn)
		if !e.Egress(0, b, p) {
			t.Fatalf("flow %d dropped: %v", i, e.Stats().Drops)
		}
		m := mapping{p.Src, p.SrcPort}
		reply := [2]mapping{m, {p.Dst, p.DstPort}}
		if j, dup := seen[reply]; dup {
			t.Fatalf("flows %d and %d share the reply tuple %v:%d", j, i, addrOf(m.g, false), m.gp)
		}
		seen[reply], maps[i] = int32(i), m
	}
	for i := range n {
		b, p := tp.set(rem(i), maps[i].g, 443, maps[i].gp, ack)
		if !e.Ingress(0, b, p) || p.Dst != pod(i&0xfff) || p.DstPort != 40000 {
			t.Fatalf("reply to flow %d reached %v:%d", i, addrOf(p.Dst, false), p.DstPort)
		}
	}
}

// TestConcurrentIngressAndEgress runs Ingress on several goroutines beside
// Egress, with flows created, refreshed, expired and their slots reused all
// along, and checks every translation the lock-free lookups give; run it
// with -race.
func TestConcurrentIngressAndEgress(t *testing.T) {
	e := newTestEngine(t, Config{MaxFlows: 5000}, testRules())
	remote := a16("242.2.0.9")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			tp := newTCPPacket(ip("242.2.0.9"), ip("242.1.0.200"), 1, 80, syn)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				b, p := tp.set(remote, a16("242.1.0.200"), uint16(w*10000+i%5000), 80, syn)
				if e.Ingress(0, b, p) && (p.Dst != a16("10.96.0.10") || p.DstPort != 80) {
					t.Errorf("service flow translated to %v:%d", addrOf(p.Dst, false), p.DstPort)
					return
				}
				port := uint16(1024 + i%3000)
				b, p = tp.set(remote, a16("242.1.0.3"), 443, port, ack)
				if e.Ingress(0, b, p) && p.Dst != a16("242.1.0.3") && (p.Dst[0] != 10 || p.Dst[1] != 0 || p.DstPort != port) {
					t.Errorf("reply to 242.1.0.3:%d translated to %v:%d", port, addrOf(p.Dst, false), p.DstPort)
					return
				}
			}
		})
	}
	tp := newTCPPacket(ip("10.0.0.7"), ip("242.2.0.9"), 1, 443, syn)
	for i := range 200000 {
		b, p := tp.set(pod(i%300), remote, uint16(1024+i%3000), 443, syn)
		e.Egress(0, b, p)
		b, p = tp.set(a16("10.96.0.10"), remote, 80, uint16(i%5000), syn|ack)
		e.Egress(0, b, p)
		if i%10000 == 0 {
			e.clock.Advance(100e9)
			e.Flows()
		}
	}
	close(stop)
	wg.Wait()
	if s := e.Stats(); s.Flows > 5000 {
		t.Errorf("%d flows over the maximum", s.Flows)
	}
}

func TestEstablishedTranslationAllocatesNothing(t *testing.T) {
	e := newTestEngine(t, Config{}, testRules())
	out := pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: ack}.build()
	in := pkt{src: "242.2.0.9", dst: "242.1.0.3", proto: tcp, sport: 443, dport: 40000, flags: ack}.build()
	b, _ := e.egress(t, out)
	errMsg := icmpError("242.2.0.1", "242.1.0.3", packet.ICMPv4TimeExceeded, 0, 0, b, 0)
	var p packet.Parsed
	buf := make([]byte, 1500)
	for _, tt := range []struct {
		name string
		b    []byte
		fn   func(int, []byte, *packet.Parsed) bool
	}{
		{"egress", out, e.Egress},
		{"ingress", in, e.Ingress},
		{"ICMP error", errMsg, e.Ingress},
	} {
		allocs := testing.AllocsPerRun(1000, func() {
			n := copy(buf, tt.b)
			p.Decode(buf[:n])
			if !tt.fn(0, buf[:n], &p) {
				t.Fatal("dropped")
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per packet, want 0", tt.name, allocs)
		}
	}
}

// TestIndexSurvivesChurn links and unlinks flows at random in a small table,
// where probe runs are long and deletions shift entries, and checks after
// every step that each live key is found, locked and lock-free, and each
// removed one is not.
func TestIndexSurvivesChurn(t *testing.T) {
	const maxFlows = 16
	tb, err := newTable(maxFlows, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.unmap()
	rng := rand.New(rand.NewPCG(3, 4))
	live := map[uint32]bool{}
	var gone []key
	for step := range 20000 {
		if len(live) < maxFlows && (len(live) == 0 || rng.IntN(2) == 0) {
			c := flow{
				local: pod(rng.IntN(8)), lport: uint16(rng.IntN(8)),
				remote: [16]byte{242, 2, 0, byte(rng.IntN(4))}, rport: 443,
				global: [16]byte{242, 1, 0, 1}, gport: uint16(rng.IntN(8)), proto: tcp,
			}
			ek, ik := c.key(dirEgress), c.key(dirIngress)
			if i, _ := tb.find(&ek); i != 0 {
				continue
			}
			if i, _ := tb.find(&ik); i != 0 {
				continue
			}
			i := tb.alloc()
			f := tb.flow(i)
			f.local, f.global, f.remote = c.local, c.global, c.remote
			f.lport, f.gport, f.rport, f.proto = c.lport, c.gport, c.rport, c.proto
			tb.link(i, uint32(StateSynSent))
			live[i] = true
		} else {
			for i := range live {
				f := tb.flow(i)
				gone = append(gone[:0], f.key(dirEgress), f.key(dirIngress))
				tb.unlink(i)
				delete(live, i)
				break
			}
		}
		entries := 0
		for s := range tb.index {
			if tb.index[s].Load() != 0 {
				entries++
			}
		}
		if entries != 2*len(live) {
			t.Fatalf("step %d: %d index entries for %d flows", step, entries, len(live))
		}
		for i := range live {
			for dir := uint32(0); dir < 2; dir++ {
				k := tb.flow(i).key(dir)
				var v view
				if gi, gd := tb.find(&k); gi != i || gd != dir {
					t.Fatalf("step %d: find(flow %d, dir %d) = %d, %d", step, i, dir, gi, gd)
				}
				if !tb.lookup(&k, &v) || v.idx != i || v.dir != dir {
					t.Fatalf("step %d: lookup missed flow %d, dir %d", step, i, dir)
				}
			}
		}
		for _, k := range gone {
			if i, _ := tb.find(&k); i != 0 && !live[i] {
				t.Fatalf("step %d: a removed key still finds flow %d", step, i)
			}
		}
	}
}
