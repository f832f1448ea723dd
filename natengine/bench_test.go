package natengine

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"

	"github.com/snorkel-net/snorkel/packet"
)

// BenchmarkEstablished measures the translation of a packet of an
// established flow, one direction per sub-benchmark. Each iteration restores
// the packet and its Parsed by copying (a few ns of the result).
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
// flow, into a table of MaxFlows size refilled from empty each time it is
// full. The timed work includes the page faults of a fresh table. At a
// million the table outgrows the CPU caches and setup is memory-bound.
func BenchmarkNewFlows(b *testing.B) {
	for _, size := range []int{1 << 16, 1 << 20} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			fresh := func() *Engine {
				e, err := New(Config{MaxFlows: size})
				if err != nil || e.SetRules(testRules()) != nil {
					b.Fatal(err)
				}
				return e
			}
			e := fresh()
			tp := newTCPPacket(ip("10.0.0.1"), ip("242.2.0.9"), 1, 443, syn)
			orig, pk := make([][]byte, size), make([][]byte, size)
			origP, ps := make([]packet.Parsed, size), make([]packet.Parsed, size)
			for i := range size {
				bb, q := tp.set(pod(i>>4), [16]byte{242, 2, 0, byte(i >> 16)}, uint16(30000+i&15), 443, syn)
				orig[i], pk[i], origP[i] = bytes.Clone(bb), bytes.Clone(bb), *q
			}
			copy(ps, origP)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if i == size {
					b.StopTimer()
					e, i = fresh(), 0
					for j := range pk {
						copy(pk[j], orig[j])
					}
					copy(ps, origP)
					b.StartTimer()
				}
				if !e.Egress(0, pk[i], &ps[i]) {
					b.Fatalf("flow %d dropped: %v", i, e.Stats().Drops)
				}
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "flows/s")
		})
	}
}

// BenchmarkMemoryPerFlow fills a table of a million flows and reports the
// heap it takes per flow, the engine's fixed structures included.
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
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/flow")
		runtime.KeepAlive(e)
	}
}
