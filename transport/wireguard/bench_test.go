package wireguard

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
)

// byteCounter is a Deliverer that only counts, so the benchmark measures the
// transport.
type byteCounter struct {
	pkts, bytes atomic.Uint64
}

func (c *byteCounter) Deliver(peer int, bufs [][]byte, offset int) {
	var n uint64
	for _, b := range bufs {
		n += uint64(len(b) - offset)
	}
	c.pkts.Add(uint64(len(bufs)))
	c.bytes.Add(n)
}

// window is the number of packets the benchmark lets be in flight, as a TCP
// sender's window would. Without it the sender only fills wireguard-go's
// queues (1024 batches deep), and the benchmark measures allocating buffers
// for that backlog and the UDP loss behind it.
const window = 8 * 128

// BenchmarkSendOverLoopback pushes batches of 1400-byte packets from one
// Transport to another over 127.0.0.1 with at most window packets in flight.
// Gb/s counts what the receiver delivered.
func BenchmarkSendOverLoopback(b *testing.B) {
	const size = 1400
	keyA, _ := GenerateKey()
	keyB, _ := GenerateKey()
	rx := &byteCounter{}
	trB, err := New(Config{
		PrivateKey: keyB,
		Peers:      []Peer{{PublicKey: keyA.Public(), AllowedIPs: []netip.Prefix{cidrA}}},
	}, rx)
	if err != nil {
		b.Fatal(err)
	}
	defer trB.Close()
	trA, err := New(Config{
		PrivateKey: keyA,
		Peers: []Peer{{
			PublicKey:  keyB.Public(),
			Endpoint:   netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), trB.Port()),
			AllowedIPs: []netip.Prefix{cidrB},
		}},
	}, &byteCounter{})
	if err != nil {
		b.Fatal(err)
	}
	defer trA.Close()

	bufs := newBatch(trA.BatchSize())
	for i := range bufs {
		bufs[i] = ipv4UDP(bufs[i], transport.Headroom, hostA, hostB, size, uint32(i))
	}
	// Complete the handshake before timing.
	if err := trA.Send(0, bufs[:1], transport.Headroom); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); rx.pkts.Load() == 0; {
		if time.Now().After(deadline) {
			b.Fatal("no handshake within 10s")
		}
		time.Sleep(time.Millisecond)
	}

	b.SetBytes(int64(len(bufs) * size))
	b.ReportAllocs()
	startBytes := rx.bytes.Load()
	startPkts := rx.pkts.Load()
	start := time.Now()
	b.ResetTimer()
	sent := uint64(0)
	for b.Loop() {
		// Wait for the window to open; give up after a while so that a
		// packet lost on the loopback does not stall the benchmark.
		for wait := time.Now(); sent-(rx.pkts.Load()-startPkts) > window && time.Since(wait) < 20*time.Millisecond; {
			time.Sleep(20 * time.Microsecond)
		}
		sent += uint64(len(bufs))
		if err := trA.Send(0, bufs, transport.Headroom); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// Let the packets in flight arrive: wait until delivery stops growing.
	for last := rx.pkts.Load(); ; {
		time.Sleep(20 * time.Millisecond)
		now := rx.pkts.Load()
		if now == last {
			break
		}
		last = now
	}
	elapsed := time.Since(start) - 20*time.Millisecond
	got := rx.bytes.Load() - startBytes
	b.ReportMetric(float64(got)*8/elapsed.Seconds()/1e9, "Gb/s")
	b.ReportMetric(100*(1-float64(rx.pkts.Load()-startPkts)/float64(sent)), "loss%")
}
