package vxlan

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/udp/udptest"
)

const (
	benchBatch = 64
	benchSize  = 1400
)

func benchBufs() ([][]byte, [][]byte) {
	pkt := ipv4(ip4A, ip4B, 17, pattern(benchSize-20, 3))
	bufs := make([][]byte, benchBatch)
	for i := range bufs {
		bufs[i] = withHeadroom(pkt)
	}
	return bufs, append([][]byte(nil), bufs...)
}

func reportRate(b *testing.B, pkts int) {
	b.ReportMetric(float64(pkts)/b.Elapsed().Seconds(), "pkt/s")
}

// BenchmarkEncapSend is Send of a batch to a socket nobody reads (the
// kernel drops what overflows it): header writes plus sendmmsg, with GSO
// where the kernel offers it.
func BenchmarkEncapSend(b *testing.B) {
	sink, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(local(0)))
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	tr, err := New(Config{Port: udptest.FreePort(b), Peers: []Peer{{Endpoint: sink.LocalAddr().(*net.UDPAddr).AddrPort()}}}, &discard{})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	bufs, orig := benchBufs()
	b.SetBytes(benchBatch * benchSize)
	b.ReportAllocs()
	for b.Loop() {
		copy(bufs, orig)
		if err := tr.Send(0, bufs, transport.Headroom); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N*benchBatch)
}

// BenchmarkDecapDeliver is the receive handler on a batch already read from
// the socket: peer lookup, decapsulation, MAC learning and Deliver.
func BenchmarkDecapDeliver(b *testing.B) {
	tr, err := New(Config{Port: udptest.FreePort(b), Peers: []Peer{{Endpoint: local(4000)}}}, &discard{})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	frame := refFrame(DefaultVNI, tr.cfg.mac, macA, etherTypeIPv4, ipv4(ip4A, ip4B, 17, pattern(benchSize-20, 3)))
	bufs := make([][]byte, benchBatch)
	full := make([][]byte, benchBatch)
	sizes := make([]int, benchBatch)
	srcs := make([]netip.AddrPort, benchBatch)
	for i := range bufs {
		full[i], sizes[i], srcs[i] = socketBuf(frame), len(frame), local(4000)
	}
	b.SetBytes(benchBatch * benchSize)
	b.ReportAllocs()
	for b.Loop() {
		copy(bufs, full)
		tr.receive(bufs, sizes, srcs)
	}
	reportRate(b, b.N*benchBatch)
}

// counter is a Deliverer that counts packets.
type counter struct{ n atomic.Int64 }

func (c *counter) Deliver(_ int, bufs [][]byte, _ int) { c.n.Add(int64(len(bufs))) }

// BenchmarkLoopback sends a batch from one transport to another over
// 127.0.0.1 and waits for it to be delivered: encap, sendmmsg, recvmmsg,
// decap and Deliver. Allocations here include those conn.StdNetBind makes
// per received datagram.
func BenchmarkLoopback(b *testing.B) {
	ports := udptest.FreePorts(b, 2)
	rx := &counter{}
	a, err := New(Config{Port: ports[0], Peers: []Peer{{Endpoint: local(ports[1])}}}, &discard{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	c, err := New(Config{Port: ports[1], Peers: []Peer{{Endpoint: local(ports[0])}}}, rx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	bufs, orig := benchBufs()
	b.SetBytes(benchBatch * benchSize)
	b.ReportAllocs()
	var want int64
	for b.Loop() {
		copy(bufs, orig)
		if err := a.Send(0, bufs, transport.Headroom); err != nil {
			b.Fatal(err)
		}
		want += benchBatch
		for deadline := time.Now().Add(time.Second); rx.n.Load() < want && time.Now().Before(deadline); {
			time.Sleep(10 * time.Microsecond)
		}
		want = rx.n.Load()
	}
	reportRate(b, int(rx.n.Load()))
	b.ReportMetric(float64(int64(b.N)*benchBatch-rx.n.Load()), "lost")
}
