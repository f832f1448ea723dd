package natengine

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/snorkel-net/snorkel/packet"
)

// BenchmarkEstablished measures the translation of a packet of an
// established flow, one direction per sub-benchmark: a TCP flow has seen
// a segment each way, so it is in StateEstablished. Each iteration restores
// the packet and its Parsed by copying, and calls through a func value as
// the gateway calls through an interface; BenchmarkEstablishedHarness
// measures that part alone.
func BenchmarkEstablished(b *testing.B) {
	for _, tt := range []struct {
		name    string
		rules   Rules
		out, in pkt
	}{
		{"IPv4_TCP", testRules(),
			pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: ack},
			pkt{src: "242.2.0.9", dst: "242.1.0.3", proto: tcp, sport: 443, dport: 40000, flags: ack}},
		{"IPv4_UDP", testRules(),
			pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: udp, sport: 40000, dport: 53},
			pkt{src: "242.2.0.9", dst: "242.1.0.3", proto: udp, sport: 53, dport: 40000}},
		{"IPv6_TCP", testRules6(),
			pkt{src: "fd00::7", dst: "fd42:2::9", proto: tcp, sport: 40000, dport: 443, flags: ack},
			pkt{src: "fd42:2::9", dst: "fd42:1::1", proto: tcp, sport: 443, dport: 40000, flags: ack}},
	} {
		e := newBenchEngine(b, tt.rules)
		e.egress(b, tt.out.build())
		e.ingress(b, tt.in.build())
		if tt.out.proto == tcp {
			if st := e.Flows()[0].State; st != StateEstablished {
				b.Fatalf("flow is %v, want established", st)
			}
		}
		for _, d := range []struct {
			dir string
			pk  []byte
			fn  func(int, []byte, *packet.Parsed) bool
		}{{"egress", tt.out.build(), e.Egress}, {"ingress", tt.in.build(), e.Ingress}} {
			b.Run(tt.name+"/"+d.dir, func(b *testing.B) {
				var p0, p packet.Parsed
				p0.Decode(d.pk)
				buf := make([]byte, len(d.pk))
				b.ReportAllocs()
				for b.Loop() {
					copy(buf, d.pk)
					p = p0
					if !d.fn(0, buf, &p) {
						b.Fatal("dropped")
					}
				}
			})
		}
	}
}

// BenchmarkEstablishedHarness is BenchmarkEstablished's loop around a
// translation that does nothing: the cost of restoring the packet and its
// Parsed and of the call, included in BenchmarkEstablished's results.
func BenchmarkEstablishedHarness(b *testing.B) {
	pk := pkt{src: "10.0.0.7", dst: "242.2.0.9", proto: tcp, sport: 40000, dport: 443, flags: ack}.build()
	var fn func(int, []byte, *packet.Parsed) bool = translateNothing
	var p0, p packet.Parsed
	p0.Decode(pk)
	buf := make([]byte, len(pk))
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, pk)
		p = p0
		if !fn(0, buf, &p) {
			b.Fatal("dropped")
		}
	}
}

//go:noinline
func translateNothing(int, []byte, *packet.Parsed) bool { return true }

// newBenchEngine is an engine on the default clock, as in production.
func newBenchEngine(b *testing.B, r Rules) *testEngine {
	e, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.SetRules(r); err != nil {
		b.Fatal(err)
	}
	return &testEngine{Engine: e}
}

// BenchmarkNewFlows measures flow setup: every packet is a SYN of a new
// flow. "empty" fills a table of MaxFlows from empty, again each time it is
// full, so its timed work includes the page faults of fresh memory; at a
// million the table outgrows the CPU caches and setup is memory-bound.
// "full" keeps a table of MaxFlows full: each new flow evicts the oldest flow
// that never saw a reply, as in a SYN flood. Each iteration writes the new
// tuple into a copy of a template packet (a few ns of the result).
func BenchmarkNewFlows(b *testing.B) {
	for _, tt := range []struct {
		name string
		size int
		full bool
	}{{"empty/65536", 1 << 16, false}, {"empty/1048576", 1 << 20, false}, {"full/1048576", 1 << 20, true}} {
		b.Run(tt.name, func(b *testing.B) {
			fresh := func() *Engine {
				e, err := New(Config{MaxFlows: tt.size})
				if err != nil || e.SetRules(testRules()) != nil {
					b.Fatal(err)
				}
				return e
			}
			tb, tp := newTCPPacket(ip("10.0.0.1"), ip("242.2.0.9"), 1, 443, syn).set(pod(0), a16("242.2.0.0"), 30000, 443, syn)
			buf := make([]byte, len(tb))
			var p packet.Parsed
			next := func(i int) {
				copy(buf, tb)
				p = *tp
				setTuple(buf, &p, i)
			}
			e, i := fresh(), 0
			if tt.full {
				for ; i < tt.size; i++ {
					next(i)
					if !e.Egress(0, buf, &p) {
						b.Fatalf("flow %d dropped: %v", i, e.Stats().Drops)
					}
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if !tt.full && e.live.Load() == int64(tt.size) {
					b.StopTimer()
					e = fresh()
					b.StartTimer()
				}
				next(i)
				if !e.Egress(0, buf, &p) {
					b.Fatalf("flow %d dropped: %v", i, e.Stats().Drops)
				}
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "flows/s")
		})
	}
}

// setTuple gives packet b (decoded into p) the i-th tuple of a sequence in
// which 2^32 tuples are distinct: source pod i>>4 of 10.0.0.0/16, source
// port 30000 plus the low 4 bits of i, destination 242.2.0.0/16 by i>>16 (a
// new remote every 65536 flows, so that four global IPs have ports enough).
// It leaves the checksums alone: the engine does not check them.
func setTuple(b []byte, p *packet.Parsed, i int) {
	src, dst := pod(i>>4), [16]byte{242, 2, byte(i >> 24), byte(i >> 16)}
	copy(b[12:16], src[:4])
	copy(b[16:20], dst[:4])
	binary.BigEndian.PutUint16(b[20:], uint16(30000+i&15))
	p.Src, p.Dst, p.SrcPort = src, dst, uint16(30000+i&15)
}

// BenchmarkMemoryPerFlow fills a table of a million flows and reports the
// memory it takes per flow, the engine's fixed structures included: the
// heap, and the index, which on Linux is mapped outside it.
func BenchmarkMemoryPerFlow(b *testing.B) {
	const n = 1 << 20
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		e := newTestEngine(b, Config{MaxFlows: n}, testRules())
		tp := newTCPPacket(ip("10.0.0.1"), ip("242.2.0.9"), 1, 443, syn)
		for i := range n {
			b2, p := tp.set(pod(i>>4), [16]byte{242, 2, 0, byte(i >> 16)}, uint16(30000+i&15), 443, syn)
			if !e.Egress(0, b2, p) {
				b.Fatalf("flow %d dropped", i)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		mem := after.HeapAlloc - before.HeapAlloc
		if !indexOnHeap {
			mem += uint64(len(e.t.index)) * 8
		}
		b.ReportMetric(float64(mem)/n, "bytes/flow")
		runtime.KeepAlive(e)
	}
}
