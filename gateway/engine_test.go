package gateway

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"testing"

	"golang.zx2c4.com/wireguard/tun"

	"github.com/snorkel-net/snorkel/packet"
	"github.com/snorkel-net/snorkel/transport"
)

// nullTransport records what the gateway sends and sends nothing.
type nullTransport struct {
	mu    sync.Mutex
	sent  [][]byte // copies of the packets, for assertions
	peers []int    // the peer of each packet in sent
	keep  bool
	count int
	// changes are the peer changes, as "set SLOT=CLUSTER" and
	// "remove SLOT".
	changes []string
	// overhead, when set, replaces the 60 bytes Overhead reports, as ESP's
	// shrinks once it negotiated its suite.
	overhead int
}

func (n *nullTransport) Send(peer int, bufs [][]byte, offset int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.count += len(bufs)
	if n.keep {
		for _, b := range bufs {
			n.sent = append(n.sent, append([]byte(nil), b[offset:]...))
			n.peers = append(n.peers, peer)
		}
	}
	return nil
}
func (n *nullTransport) Overhead() int {
	if n.overhead != 0 {
		return n.overhead
	}
	return 60
}
func (n *nullTransport) BatchSize() int { return 128 }
func (n *nullTransport) Close() error   { return nil }

// setPeer and removePeer record the peer changes the gateway makes.
func (n *nullTransport) setPeer(s *spec, i, slot int, _ keys) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.changes = append(n.changes, fmt.Sprintf("set %d=%s", slot, s.remotes[i].id))
	return nil
}

func (n *nullTransport) removePeer(slot int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.changes = append(n.changes, fmt.Sprintf("remove %d", slot))
	return nil
}

// replayDevice is a tun.Device whose Read returns the same batch `reads`
// times and then reports the device closed; Write keeps a count.
type replayDevice struct {
	batch   [][]byte
	reads   int
	written int
	wrote   [][]byte
	keep    bool
}

func (d *replayDevice) File() *os.File { return nil }
func (d *replayDevice) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if d.reads == 0 {
		return 0, os.ErrClosed
	}
	d.reads--
	for i, p := range d.batch {
		sizes[i] = copy(bufs[i][offset:], p)
	}
	return len(d.batch), nil
}
func (d *replayDevice) Write(bufs [][]byte, offset int) (int, error) {
	d.written += len(bufs)
	if d.keep {
		for _, b := range bufs {
			d.wrote = append(d.wrote, append([]byte(nil), b[offset:]...))
		}
	}
	return len(bufs), nil
}
func (d *replayDevice) MTU() (int, error)        { return 1440, nil }
func (d *replayDevice) Name() (string, error)    { return "replay", nil }
func (d *replayDevice) Events() <-chan tun.Event { return nil }
func (d *replayDevice) Close() error             { return nil }
func (d *replayDevice) BatchSize() int           { return 128 }

// ipv4TCP builds an IPv4/TCP packet of the given total length with valid
// checksums; syn adds an MSS option of 1460.
func ipv4TCP(src, dst netip.Addr, length int, syn bool) []byte {
	b := make([]byte, length)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(length))
	b[6] = 0x40 // DF
	b[8] = 64
	b[9] = 6
	copy(b[12:16], src.AsSlice())
	copy(b[16:20], dst.AsSlice())
	binary.BigEndian.PutUint16(b[10:], ^packet.Checksum(b[:20], 0))
	tcp := b[20:]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 80)
	if syn {
		tcp[12] = 6 << 4 // 24-byte header: MSS option
		tcp[13] = packet.TCPFlagSYN
		tcp[20], tcp[21] = 2, 4
		binary.BigEndian.PutUint16(tcp[22:], 1460)
	} else {
		tcp[12] = 5 << 4
		tcp[13] = packet.TCPFlagACK
	}
	binary.BigEndian.PutUint16(tcp[16:], ^packet.Checksum(tcp, packet.PseudoHeaderChecksum(6, src.AsSlice(), dst.AsSlice(), len(tcp))))
	return b
}

// attachDevice gives g dev as its device without running the read loop, so
// that tests can drive Deliver directly.
func attachDevice(g *Gateway, dev tun.Device) { g.dev.Store(&dev) }

// deliverBuf places packet p where a transport hands it to Deliver: after
// transport.Headroom, in a buffer with a transport's capacity.
func deliverBuf(p []byte) []byte {
	b := make([]byte, transport.Headroom+len(p), transport.BufSize)
	copy(b[transport.Headroom:], p)
	return b
}

func testGateway(t testing.TB) (*Gateway, *nullTransport) {
	t.Helper()
	c := validConfig()
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(s, Options{})
	tr := &nullTransport{}
	g.attach(tr, "")
	return g, tr
}

var (
	c1Pod = netip.MustParseAddr("10.8.1.2")
	c2Pod = netip.MustParseAddr("10.9.1.2")
)

// TestClampFollowsTheTUNMTU: once the transport's overhead shrinks (ESP
// after IKE chose AES-GCM over the AES-CBC it assumed), the MSS clamp
// stays within the TUN device's MTU, which was set at attach; a larger
// one would let pods send segments the node cannot route into the device.
func TestClampFollowsTheTUNMTU(t *testing.T) {
	g, tr := testGateway(t)
	tr.keep = true
	tr.overhead = 40
	g.setPathMTU()
	if g.MTU() != 1440 || g.pathMTU.Load() != 1440 {
		t.Fatalf("TUN MTU %d, path MTU %d; want both 1440", g.MTU(), g.pathMTU.Load())
	}
	dev := &replayDevice{reads: 1, batch: [][]byte{ipv4TCP(c1Pod, c2Pod, 64, true)}}
	if err := g.readLoop(dev); err != nil {
		t.Fatal(err)
	}
	var p packet.Parsed
	p.Decode(tr.sent[0])
	if mss, ok := packet.MSS(tr.sent[0], &p); !ok || mss != 1400 {
		t.Errorf("SYN left with MSS %d (ok %v), want the TUN MTU's 1440-40 = 1400", mss, ok)
	}
}

func TestEgressRoutesClampsAndCounts(t *testing.T) {
	g, tr := testGateway(t)
	tr.keep = true
	dev := &replayDevice{reads: 1, batch: [][]byte{
		ipv4TCP(c1Pod, c2Pod, 1400, false),
		ipv4TCP(c1Pod, c2Pod, 64, true),
		ipv4TCP(c1Pod, netip.MustParseAddr("192.0.2.1"), 100, false), // no remote owns it
		ipv4TCP(c1Pod, c2Pod, 1500, false),                           // above the 1440 path MTU, DF set
		{0x45, 0, 0},                                                 // malformed
	}}
	dev.keep = true
	if err := g.readLoop(dev); err != nil {
		t.Fatal(err)
	}
	if len(tr.sent) != 2 {
		t.Fatalf("sent %d packets to c2, want 2", len(tr.sent))
	}
	var p packet.Parsed
	p.Decode(tr.sent[1])
	if mss, ok := packet.MSS(tr.sent[1], &p); !ok || mss != 1400 {
		t.Errorf("SYN left with MSS %d (ok %v), want 1440-40 = 1400", mss, ok)
	}
	st := g.Stats()
	if st.Remotes[0].TxPackets != 2 || st.Remotes[0].TxBytes != 1464 {
		t.Errorf("tx counters %d packets %d bytes, want 2 and 1464", st.Remotes[0].TxPackets, st.Remotes[0].TxBytes)
	}
	if st.Unattributed["no_route"] != 1 || st.Unattributed["malformed"] != 1 || st.Remotes[0].Drops["too_big"] != 1 {
		t.Errorf("drops %v / %v, want one no_route, one malformed, one too_big", st.Unattributed, st.Remotes[0].Drops)
	}
	if len(dev.wrote) != 1 {
		t.Fatalf("wrote %d ICMP errors back, want 1", len(dev.wrote))
	}
	var ip packet.Parsed
	if ip.Decode(dev.wrote[0]) != packet.DropNone || ip.Proto != 1 || ip.ICMPType != 3 || ip.ICMPCode != 4 || ip.DstAddr() != c1Pod {
		t.Errorf("ICMP answer %+v, want type 3 code 4 to %s", ip, c1Pod)
	}
}

func TestIngressDropsSpoofedAndForeignDestinations(t *testing.T) {
	g, _ := testGateway(t)
	dev := &replayDevice{keep: true}
	attachDevice(g, dev)
	off := transport.Headroom
	g.Deliver(0, [][]byte{
		deliverBuf(ipv4TCP(c2Pod, c1Pod, 200, false)),                             // genuine
		deliverBuf(ipv4TCP(netip.MustParseAddr("10.200.0.1"), c1Pod, 200, false)), // source in no cluster
		deliverBuf(ipv4TCP(c2Pod, netip.MustParseAddr("192.0.2.1"), 200, false)),  // not for this cluster
		deliverBuf(ipv4TCP(netip.MustParseAddr("10.99.0.1"), c1Pod, 200, false)),  // c2's service range: fine
		deliverBuf(ipv4TCP(c1Pod, c2Pod, 200, false)),                             // c1's own source from c2
	}, off)
	if len(dev.wrote) != 2 {
		t.Fatalf("wrote %d packets to the device, want 2", len(dev.wrote))
	}
	st := g.Stats()
	if st.Remotes[0].Drops["spoofed_source"] != 2 || st.Remotes[0].Drops["bad_destination"] != 1 {
		t.Errorf("drops %v, want two spoofed_source and one bad_destination", st.Remotes[0].Drops)
	}
	if st.Remotes[0].RxPackets != 2 || st.Remotes[0].Status != "connected" {
		t.Errorf("rx %d status %q, want 2 and connected", st.Remotes[0].RxPackets, st.Remotes[0].Status)
	}
}

func TestIngressAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	g, _ := testGateway(t)
	attachDevice(g, &replayDevice{})
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, transport.Headroom+1400, transport.BufSize)
		copy(bufs[i][transport.Headroom:], ipv4TCP(c2Pod, c1Pod, 1400, false))
	}
	g.Deliver(0, bufs, transport.Headroom) // warm the scratch pool
	if n := testing.AllocsPerRun(100, func() { g.Deliver(0, bufs, transport.Headroom) }); n != 0 {
		t.Fatalf("Deliver allocates %v times per batch", n)
	}
}

func BenchmarkEgress(b *testing.B) {
	g, _ := testGateway(b)
	batch := make([][]byte, 64)
	for i := range batch {
		batch[i] = ipv4TCP(c1Pod, c2Pod, 1400, false)
	}
	dev := &replayDevice{batch: batch, reads: b.N}
	b.SetBytes(int64(len(batch) * 1400))
	b.ReportAllocs()
	b.ResetTimer()
	if err := g.readLoop(dev); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "pkt/s")
}

func BenchmarkIngress(b *testing.B) {
	g, _ := testGateway(b)
	attachDevice(g, &replayDevice{})
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, transport.Headroom+1400, transport.BufSize)
		copy(bufs[i][transport.Headroom:], ipv4TCP(c2Pod, c1Pod, 1400, false))
	}
	b.SetBytes(int64(len(bufs) * 1400))
	b.ReportAllocs()
	for b.Loop() {
		g.Deliver(0, bufs, transport.Headroom)
	}
	b.ReportMetric(float64(b.N*len(bufs))/b.Elapsed().Seconds(), "pkt/s")
}

// TestEgressDropsSegmentsWhoseChecksumFails: a TCP data segment read with
// its checksum filled in is checked before it is sent, as remotes may join
// it unsummed; one that fails is dropped and counted. A pure ACK is not a
// segment a remote joins, and goes on for its destination to check.
func TestEgressDropsSegmentsWhoseChecksumFails(t *testing.T) {
	g, tr := testGateway(t)
	bad := ipv4TCP(c1Pod, c2Pod, 1400, false)
	bad[len(bad)-1]++
	badACK := ipv4TCP(c1Pod, c2Pod, 40, false)
	badACK[37]++
	dev := &replayDevice{reads: 1, batch: [][]byte{ipv4TCP(c1Pod, c2Pod, 1400, false), bad, badACK}}
	if err := g.readLoop(dev); err != nil {
		t.Fatal(err)
	}
	st := g.Stats()
	if tr.count != 2 || st.Remotes[0].Drops["bad_checksum"] != 1 {
		t.Errorf("sent %d packets, dropped %v; want the good segment and the ACK sent, one bad_checksum", tr.count, st.Remotes[0].Drops)
	}
}
