package gateway

import (
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/tun"

	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/packet"
)

// syncGateway is a Globalnet gateway with its NAT engine and the null
// transport; with sync on it serves its flows to a follower over loopback.
func syncGateway(b *testing.B, on bool) (*Gateway, *Follower) {
	b.Helper()
	c := globalnetConfig()
	s, err := c.build()
	if err != nil {
		b.Fatal(err)
	}
	if on {
		s.Spec.Sync = &SyncSpec{Listen: freeTCPAddr(b), Key: syncKey}
		var errs errList
		s.Spec.Sync.check(&errs, true)
	}
	g := newGateway(s, Options{Logger: quiet})
	if err := g.startNAT(); err != nil {
		b.Fatal(err)
	}
	g.attach(&nullTransport{}, "")
	if err := g.startSync(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	if !on {
		return g, nil
	}
	f := follow(b, g.sync, syncKey)
	waitFor(b, "the follower connects", func() bool { return f.Status().Connected })
	return g, f
}

// floodDevice is a tun.Device whose every read is a batch of UDP packets of
// new flows (a new source port each, a new pod every 10000), until reads
// runs out.
type floodDevice struct {
	reads, batch int
	next         uint32
}

func (d *floodDevice) File() *os.File { return nil }
func (d *floodDevice) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if d.reads == 0 {
		return 0, os.ErrClosed
	}
	d.reads--
	dst := netip.MustParseAddr("242.2.0.9")
	for i := range d.batch {
		n := d.next
		d.next++
		src := netip.AddrFrom4([4]byte{10, 8, byte(n / 10000 >> 8), byte(n / 10000)})
		sizes[i] = copy(bufs[i][offset:], udp4(src, dst, uint16(1024+n%10000), 53))
	}
	return d.batch, nil
}
func (d *floodDevice) Write(bufs [][]byte, offset int) (int, error) { return len(bufs), nil }
func (d *floodDevice) MTU() (int, error)                            { return 1440, nil }
func (d *floodDevice) Name() (string, error)                        { return "flood", nil }
func (d *floodDevice) Events() <-chan tun.Event                     { return nil }
func (d *floodDevice) Close() error                                 { return nil }
func (d *floodDevice) BatchSize() int                               { return 128 }

// BenchmarkGlobalnetSync measures the gateway's Globalnet forwarding with
// the connection-tracking sync off and on (a follower connected over
// loopback): packets of one established flow, and packets that each start
// a flow (the sync's worst case: a record per packet).
func BenchmarkGlobalnetSync(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name+"/established", func(b *testing.B) {
			g, _ := syncGateway(b, on)
			batch := make([][]byte, 64)
			for i := range batch {
				batch[i] = ipv4TCP(c1Pod, netip.MustParseAddr("242.2.0.9"), 1400, false)
			}
			dev := &replayDevice{batch: batch, reads: b.N}
			b.SetBytes(int64(len(batch) * 1400))
			b.ReportAllocs()
			b.ResetTimer()
			if err := g.readLoop(dev); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "pkt/s")
		})
		b.Run(name+"/new_flows", func(b *testing.B) {
			g, _ := syncGateway(b, on)
			dev := &floodDevice{reads: b.N, batch: 64}
			b.ReportAllocs()
			b.ResetTimer()
			if err := g.readLoop(dev); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N*dev.batch)/b.Elapsed().Seconds(), "flows/s")
		})
	}
}

// BenchmarkSyncLag measures the replication lag, from a flow's creation on
// the active engine to its record reaching the follower over loopback,
// while new flows arrive at a fixed rate (paced sub-benchmarks) or as fast
// as one goroutine makes them (flood, which the send rate cap and the
// journal's bound then shape). It reports the median and 99th percentile
// of the lags of the frames received.
func BenchmarkSyncLag(b *testing.B) {
	for _, tt := range []struct {
		name string
		rate int // flows per second; 0 unpaced
	}{{"10k_flows_per_s", 10_000}, {"50k_flows_per_s", 50_000}, {"flood", 0}} {
		b.Run(tt.name, func(b *testing.B) {
			e, err := natengine.New(natengine.Config{})
			if err != nil {
				b.Fatal(err)
			}
			if err := e.SetRules(natengine.Rules{
				Local:         []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
				Global:        netip.MustParsePrefix("242.1.0.0/16"),
				Remotes:       []netip.Prefix{netip.MustParsePrefix("242.2.0.0/16")},
				ClusterEgress: []netip.Addr{netip.MustParseAddr("242.1.0.1")},
			}); err != nil {
				b.Fatal(err)
			}
			srv, _ := serveSync(b, e, nil)
			f := follow(b, srv, syncKey)
			var mu sync.Mutex
			var lags []time.Duration
			f.mu.Lock()
			f.onLag = func(d time.Duration) {
				mu.Lock()
				lags = append(lags, d)
				mu.Unlock()
			}
			f.mu.Unlock()
			waitFor(b, "the follower connects", func() bool { return f.Status().Connected })

			dst := netip.MustParseAddr("242.2.0.9")
			var p packet.Parsed
			start := time.Now()
			b.ResetTimer()
			for i := range b.N {
				if tt.rate > 0 {
					if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(tt.rate))); d > 0 {
						time.Sleep(d)
					}
				}
				// A pod per 10000 flows, a source port per flow.
				buf := udp4(netip.AddrFrom4([4]byte{10, 0, byte(i / 10000 >> 8), byte(i / 10000)}), dst, uint16(1024+i%10000), 53)
				p.Decode(buf)
				if !e.Egress(0, buf, &p) {
					b.Fatalf("flow %d dropped: %+v", i, e.Stats().Drops)
				}
			}
			b.StopTimer()
			waitFor(b, "the replica catches up", func() bool { return f.Status().Replica == e.Stats().Flows })
			mu.Lock()
			defer mu.Unlock()
			if len(lags) == 0 {
				b.Fatal("no lag measured")
			}
			slices.Sort(lags)
			b.ReportMetric(float64(lags[len(lags)/2].Microseconds()), "p50-lag-µs")
			b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds()), "p99-lag-µs")
			b.ReportMetric(float64(srv.c.overflows.Load()), "overflows")
		})
	}
}
