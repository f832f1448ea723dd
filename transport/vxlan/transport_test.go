package vxlan

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/internal/transporttest"
	"github.com/snorkel-net/snorkel/transport/udp"
	"github.com/snorkel-net/snorkel/transport/udp/udptest"
)

// recorder is a Deliverer that keeps copies of what it is given and checks
// the buffer layout the transport contract promises.
type recorder struct {
	t      *testing.T
	mu     sync.Mutex
	pkts   [][]byte
	peers  []int
	notify chan struct{}
}

func newRecorder(t *testing.T) *recorder {
	return &recorder{t: t, notify: make(chan struct{}, 1)}
}

func (r *recorder) Deliver(peer int, bufs [][]byte, offset int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range bufs {
		if offset != transport.Headroom {
			r.t.Errorf("delivered at offset %d, want transport.Headroom", offset)
		}
		r.pkts = append(r.pkts, bytes.Clone(b[offset:]))
		r.peers = append(r.peers, peer)
	}
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(settle)
	for {
		r.mu.Lock()
		have := len(r.pkts)
		r.mu.Unlock()
		if have >= n {
			return
		}
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("delivered %d of %d packets", have, n)
		}
	}
}

type discard struct{ n int }

func (d *discard) Deliver(_ int, bufs [][]byte, _ int) { d.n += len(bufs) }

func local(port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port)
}

func TestConfigValidation(t *testing.T) {
	peer := []Peer{{Endpoint: netip.MustParseAddrPort("192.0.2.1:4500")}}
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error naming the field
	}{
		{"VNI beyond 24 bits", Config{VNI: 1 << 24, Peers: peer}, "VNI"},
		{"short MAC", Config{MAC: net.HardwareAddr{2, 0, 0}, Peers: peer}, "MAC"},
		{"multicast MAC", Config{MAC: net.HardwareAddr{1, 0, 0, 0, 0, 1}, Peers: peer}, "MAC"},
		{"peer without address", Config{Peers: []Peer{{}}}, "Peers[0].Endpoint"},
		{"two peers on one address", Config{Peers: []Peer{
			{Endpoint: netip.MustParseAddrPort("192.0.2.1:4500")},
			{Endpoint: netip.MustParseAddrPort("192.0.2.1:4501")},
		}}, "Peers[1].Endpoint"},
		{"peer MAC broadcast", Config{Peers: []Peer{{Endpoint: netip.MustParseAddrPort("192.0.2.1:4500"), MAC: net.HardwareAddr(broadcast[:])}}}, "Peers[0].MAC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.cfg.validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("validate() = %v, want an error naming %s", err, tt.want)
			}
		})
	}
	s, err := Config{Peers: []Peer{
		{Endpoint: netip.MustParseAddrPort("[::ffff:192.0.2.1]:0")},
		{Endpoint: netip.MustParseAddrPort("[2001:db8::1]:4789")},
	}}.validate()
	if err != nil {
		t.Fatal(err)
	}
	if s.port != DefaultPort || s.vni != DefaultVNI {
		t.Fatalf("defaults: port %d vni %d", s.port, s.vni)
	}
	if got := s.peers[0].endpoint; got != netip.MustParseAddrPort("192.0.2.1:4500") {
		t.Fatalf("peer 0 endpoint %v: want unmapped, default port", got)
	}
	if _, err := (Config{}).validate(); err != nil {
		t.Fatalf("validate() of a config with no peers = %v; a gateway may have none for a while", err)
	}
}

func TestOverhead(t *testing.T) {
	ports := udptest.FreePorts(t, 2)
	for _, tt := range []struct {
		peer string
		want int
	}{{"127.0.0.1", 50}, {"::1", 70}} {
		tr, err := New(Config{Port: ports[0], Peers: []Peer{{Endpoint: netip.AddrPortFrom(netip.MustParseAddr(tt.peer), ports[1])}}}, &discard{})
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.Overhead(); got != tt.want {
			t.Errorf("Overhead with a peer at %s = %d, want %d", tt.peer, got, tt.want)
		}
		tr.Close()
	}
}

func TestNewOnUsedPortWrapsEADDRINUSE(t *testing.T) {
	c, err := udp.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr, err := New(Config{Port: c.Port(), Peers: []Peer{{Endpoint: local(9)}}}, &discard{})
	if err == nil {
		tr.Close()
		t.Fatal("New on a used port succeeded")
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("New on a used port: %v does not wrap EADDRINUSE", err)
	}
}

func TestSendErrors(t *testing.T) {
	ports := udptest.FreePorts(t, 2)
	tr, err := New(Config{Port: ports[0], Peers: []Peer{{Endpoint: local(ports[1])}}}, &discard{})
	if err != nil {
		t.Fatal(err)
	}
	pkt := [][]byte{withHeadroom(ipv4(ip4A, ip4B, 17, nil))}
	if err := tr.Send(1, pkt, transport.Headroom); err == nil {
		t.Error("Send to peer 1 of 1 succeeded")
	}
	if err := tr.Send(0, pkt, headerLen-1); err == nil {
		t.Error("Send with too little headroom succeeded")
	}
	tr.Close()
	if err := tr.Send(0, pkt, transport.Headroom); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
}

// TestReceiveDropsByReason feeds the receive handler datagrams directly and
// checks each lands in its counter, with the good one delivered.
func TestReceiveDropsByReason(t *testing.T) {
	ports := udptest.FreePorts(t, 2)
	peerAddr := local(ports[1])
	rec := newRecorder(t)
	tr, err := New(Config{Port: ports[0], VNI: 77, Peers: []Peer{{Endpoint: peerAddr}}}, rec)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()

	v4 := ipv4(ip4A, ip4B, 17, pattern(20, 9))
	stranger := netip.MustParseAddrPort("127.0.0.2:4500")
	frames := []struct {
		frame []byte
		src   netip.AddrPort
	}{
		{refFrame(77, tr.cfg.mac, macA, etherTypeIPv4, v4), peerAddr},
		{refFrame(77, tr.cfg.mac, macA, etherTypeIPv4, v4), stranger},
		{refFrame(78, tr.cfg.mac, macA, etherTypeIPv4, v4), peerAddr},
		{refFrame(77, tr.cfg.mac, macA, etherTypeIPv4, v4)[:10], peerAddr},
		{func() []byte { f := refFrame(77, tr.cfg.mac, macA, etherTypeIPv4, v4); f[0] = 0; return f }(), peerAddr},
		{refFrame(77, tr.cfg.mac, macA, 0x88cc, v4), peerAddr},
		{refFrame(77, tr.cfg.mac, macA, etherTypeIPv4, v4[:len(v4)-1]), peerAddr},
		{refFrame(77, broadcast, macA, etherTypeARP, arpPacket(arpReply, macA, ip4A, macB, ip4B)), peerAddr},
	}
	bufs := make([][]byte, len(frames))
	sizes := make([]int, len(frames))
	srcs := make([]netip.AddrPort, len(frames))
	for i, f := range frames {
		bufs[i], sizes[i], srcs[i] = socketBuf(f.frame), len(f.frame), f.src
	}
	tr.receive(bufs, sizes, srcs)

	got := tr.Drops()
	want := []transport.Drop{
		{Peer: transport.PeerAny, Reason: "unknown_peer", Count: 1},
		{Peer: 0, Reason: "short", Count: 1},
		{Peer: 0, Reason: "bad_header", Count: 1},
		{Peer: 0, Reason: "bad_vni", Count: 1},
		{Peer: 0, Reason: "unsupported_ethertype", Count: 1},
		{Peer: 0, Reason: "bad_ip", Count: 1},
		{Peer: 0, Reason: "arp_ignored", Count: 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Drops() =\n%v\nwant\n%v", got, want)
	}
	if len(rec.pkts) != 1 || !bytes.Equal(rec.pkts[0], v4) || rec.peers[0] != 0 {
		t.Fatalf("delivered %d packets (%v), want the one good packet from peer 0", len(rec.pkts), rec.peers)
	}
	if m, _ := tr.PeerMAC(0); m != macA {
		t.Fatalf("learned peer MAC %v, want %v", mac(m), macA)
	}

	// Send counts what is not IP and still sends the rest.
	bad := withHeadroom([]byte{0x10, 0, 0, 0})
	if err := tr.Send(0, [][]byte{bad, withHeadroom(v4)}, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	if d := tr.Drops(); !slices.Contains(d, transport.Drop{Peer: 0, Reason: "tx_not_ip", Count: 1}) {
		t.Fatalf("tx_not_ip not counted: %v", d)
	}
}

// TestReceiveGroupsByPeerInOrder checks that an interleaved batch reaches
// the Deliverer as one call per peer, each in arrival order.
func TestReceiveGroupsByPeerInOrder(t *testing.T) {
	ports := udptest.FreePorts(t, 1)
	peers := []Peer{{Endpoint: local(4000)}, {Endpoint: netip.MustParseAddrPort("127.0.0.2:4000")}}
	calls := &callLog{}
	tr, err := New(Config{Port: ports[0], Peers: peers}, calls)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	order := []int{1, 0, 1, 1, 0}
	var bufs [][]byte
	var sizes []int
	var srcs []netip.AddrPort
	for i, p := range order {
		f := refFrame(DefaultVNI, tr.cfg.mac, macA, etherTypeIPv4, ipv4(ip4A, ip4B, 17, []byte{byte(i)}))
		bufs, sizes, srcs = append(bufs, socketBuf(f)), append(sizes, len(f)), append(srcs, peers[p].Endpoint)
	}
	tr.receive(bufs, sizes, srcs)
	want := []string{"peer 1: 0 2 3", "peer 0: 1 4"}
	if !slices.Equal(calls.calls, want) {
		t.Fatalf("Deliver calls %q, want %q", calls.calls, want)
	}
}

type callLog struct{ calls []string }

func (c *callLog) Deliver(peer int, bufs [][]byte, offset int) {
	s := "peer " + string(rune('0'+peer)) + ":"
	for _, b := range bufs {
		s += " " + string(rune('0'+b[offset+20]))
	}
	c.calls = append(c.calls, s)
}

func TestSendAndReceiveAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("skipping: the race detector makes sync.Pool drop items, so pooled paths allocate")
	}
	ports := udptest.FreePorts(t, 2)
	sink, err := udp.Open(ports[1])
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	d := &discard{}
	tr, err := New(Config{Port: ports[0], Peers: []Peer{{Endpoint: local(ports[1])}}}, d)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()

	pkt := ipv4(ip4A, ip4B, 17, pattern(1000, 7))
	bufs := make([][]byte, 32)
	for i := range bufs {
		bufs[i] = withHeadroom(pkt)
	}
	if n := transporttest.FewestAllocs(100, func() {
		if err := tr.Send(0, bufs, transport.Headroom); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Send: %v allocations per batch, want 0", n)
	}

	frame := refFrame(DefaultVNI, tr.cfg.mac, macA, etherTypeIPv4, pkt)
	arp := refFrame(DefaultVNI, broadcast, macA, etherTypeARP, arpPacket(arpRequest, macA, ip4A, mac{}, ip4B))
	rx := make([][]byte, 33)
	full := make([][]byte, len(rx))
	sizes := make([]int, len(rx))
	srcs := make([]netip.AddrPort, len(rx))
	for i := range rx {
		f := frame
		if i == len(rx)-1 {
			f = arp
		}
		full[i], sizes[i], srcs[i] = socketBuf(f), len(f), local(ports[1])
	}
	if n := transporttest.FewestAllocs(100, func() {
		copy(rx, full)
		copy(rx[len(rx)-1][rxOffset:], arp)
		tr.receive(rx, sizes, srcs)
	}); n != 0 {
		t.Errorf("receive: %v allocations per batch, want 0", n)
	}
	if d.n == 0 {
		t.Fatal("nothing delivered")
	}
}

// TestTwoTransportsExchangeBatches runs two transports on 127.0.0.1 and
// sends batches both ways, checking every delivered byte.
func TestTwoTransportsExchangeBatches(t *testing.T) {
	ports := udptest.FreePorts(t, 2)
	recA, recB := newRecorder(t), newRecorder(t)
	macAHW, macBHW := net.HardwareAddr(macA[:]), net.HardwareAddr(macB[:])
	a, err := New(Config{Port: ports[0], VNI: 4242, MAC: macAHW, Peers: []Peer{{Endpoint: local(ports[1])}}}, recA)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(Config{Port: ports[1], VNI: 4242, MAC: macBHW, Peers: []Peer{{Endpoint: local(ports[0])}}}, recB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	batch := func(n int, v6 bool, seed byte) (bufs, want [][]byte) {
		for i := range n {
			var p []byte
			if v6 {
				p = ipv6(ip6A, ip6B, 17, pattern(1200, seed+byte(i)))
			} else {
				p = ipv4(ip4A, ip4B, 17, pattern(1200, seed+byte(i)))
			}
			bufs, want = append(bufs, withHeadroom(p)), append(want, p)
		}
		return bufs, want
	}
	check := func(t *testing.T, rec *recorder, want [][]byte) {
		t.Helper()
		rec.wait(t, len(want))
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.pkts) != len(want) {
			t.Fatalf("delivered %d packets, want %d", len(rec.pkts), len(want))
		}
		for i := range want {
			if !bytes.Equal(rec.pkts[i], want[i]) || rec.peers[i] != 0 {
				t.Fatalf("packet %d from peer %d differs: got %d bytes, want %d", i, rec.peers[i], len(rec.pkts[i]), len(want[i]))
			}
		}
		rec.pkts, rec.peers = nil, nil
	}

	bufs, want := batch(64, false, 1)
	if err := a.Send(0, bufs, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	check(t, recB, want)
	if m, _ := b.PeerMAC(0); m != macA {
		t.Fatalf("B learned %v for A, want %v", mac(m), macA)
	}

	bufs, want = batch(udp.BatchSize, true, 50)
	if err := b.Send(0, bufs, transport.Headroom); err != nil {
		t.Fatal(err)
	}
	check(t, recA, want)
	if m, _ := a.PeerMAC(0); m != macB {
		t.Fatalf("A learned %v for B, want %v", mac(m), macB)
	}
	if d := append(a.Drops(), b.Drops()...); len(d) != 0 {
		t.Fatalf("drops: %v", d)
	}
}

// TestFollowPortFollowsANATRebinding puts A behind a NAT that B knows by
// the mapping's outside address. When the NAT gives the mapping a new
// port, A's next frame moves B's frames for A there, if B follows A's
// port; a new address is a stranger's until the control plane says so.
func TestFollowPortFollowsANATRebinding(t *testing.T) {
	for _, follow := range []bool{true, false} {
		t.Run(map[bool]string{true: "follow", false: "configured port"}[follow], func(t *testing.T) {
			ports := udptest.FreePorts(t, 2)
			recA, recB := newRecorder(t), newRecorder(t)
			nat := transporttest.NewNAT(t, local(ports[1]))
			a, err := New(Config{Port: ports[0], Name: "a", Peers: []Peer{{Endpoint: nat.Inside()}}}, recA)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := New(Config{Port: ports[1], Name: "b", Peers: []Peer{{Endpoint: nat.Outside(), FollowPort: follow}}}, recB)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			pkt := ipv4(ip4A, ip4B, 17, pattern(100, 1))
			send := func(tr *Transport, rec *recorder) {
				t.Helper()
				if err := tr.Send(0, [][]byte{withHeadroom(pkt)}, transport.Headroom); err != nil {
					t.Fatal(err)
				}
				rec.wait(t, 1)
				rec.mu.Lock()
				rec.pkts, rec.peers = nil, nil
				rec.mu.Unlock()
			}
			configured := nat.Outside()
			send(a, recB)
			send(b, recA)

			nat.Rebind(t, configured.Addr())
			send(a, recB)
			want := configured
			if follow {
				want = nat.Outside()
				send(b, recA)
			}
			if got := b.peers.Load().get(0).to(); got != want {
				t.Fatalf("B sends to %v, want %v", got, want)
			}

			nat.Rebind(t, netip.MustParseAddr("127.0.0.2"))
			if err := a.Send(0, [][]byte{withHeadroom(pkt)}, transport.Headroom); err != nil {
				t.Fatal(err)
			}
			transporttest.WaitForDrops(t, b, 1, settle)
			if got := b.peers.Load().get(0).to(); got != want {
				t.Fatalf("after a frame from a new address B sends to %v, want still %v", got, want)
			}
		})
	}
}
