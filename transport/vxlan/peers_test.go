package vxlan

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/internal/transporttest"
	"github.com/snorkel-net/snorkel/transport/udp/udptest"
)

// vtep plays a remote VXLAN endpoint by hand from a socket of its own on a
// loopback address, so that one transport can have several peers told apart
// by address, and a peer can move.
type vtep struct {
	conn *net.UDPConn
	addr netip.AddrPort
	mac  mac
}

func newVTEP(t *testing.T, addr string, m mac) *vtep {
	t.Helper()
	ip := netip.MustParseAddr(addr)
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &vtep{conn: c, addr: netip.AddrPortFrom(ip, uint16(c.LocalAddr().(*net.UDPAddr).Port)), mac: m}
}

// peer is v as a peer of a transport, its MAC left to be learned.
func (v *vtep) peer() Peer { return Peer{Endpoint: v.addr} }

// send sends pkt to tr in a frame from v.
func (v *vtep) send(t *testing.T, tr *Transport, pkt []byte) {
	t.Helper()
	f := refFrame(tr.cfg.vni, tr.cfg.mac, v.mac, etherTypeIPv4, pkt)
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), tr.conn.Port())
	if _, err := v.conn.WriteToUDPAddrPort(f, to); err != nil {
		t.Fatal(err)
	}
}

// recv waits for the next datagram sent to v and returns its inner
// destination MAC and IP packet.
func (v *vtep) recv(t *testing.T) (mac, []byte) {
	t.Helper()
	v.conn.SetReadDeadline(time.Now().Add(settle))
	buf := make([]byte, 65535)
	n, err := v.conn.Read(buf)
	if err != nil {
		t.Fatalf("%v received nothing: %v", v.addr, err)
	}
	if n < headerLen {
		t.Fatalf("%v received %d bytes, less than the VXLAN and Ethernet headers", v.addr, n)
	}
	return mac(buf[vxlanLen : vxlanLen+6]), buf[headerLen:n]
}

// exchange checks that packets cross both ways between tr's peer i and v:
// v's packet is delivered under number i, and Send to i reaches v addressed
// to wantDst.
func exchange(t *testing.T, tr *Transport, rec *recorder, i int, v *vtep, wantDst mac, seed byte) {
	t.Helper()
	pkt := ipv4(ip4A, ip4B, 17, pattern(100, seed))
	rec.mu.Lock()
	n := len(rec.pkts)
	rec.mu.Unlock()
	v.send(t, tr, pkt)
	rec.wait(t, n+1)
	rec.mu.Lock()
	got, peer := rec.pkts[n], rec.peers[n]
	rec.mu.Unlock()
	if !bytes.Equal(got, pkt) || peer != i {
		t.Fatalf("from %v: delivered %d bytes under peer %d, want the %d sent under peer %d", v.addr, len(got), peer, len(pkt), i)
	}
	if err := tr.Send(i, [][]byte{withHeadroom(pkt)}, transport.Headroom); err != nil {
		t.Fatalf("Send to peer %d: %v", i, err)
	}
	dst, inner := v.recv(t)
	if dst != wantDst || !bytes.Equal(inner, pkt) {
		t.Fatalf("to %v: got a frame for %v with %d bytes, want one for %v with the %d sent", v.addr, dst, len(inner), wantDst, len(pkt))
	}
}

func newLoopbackTransport(t *testing.T, peers []Peer, d transport.Deliverer) *Transport {
	t.Helper()
	tr, err := New(Config{Port: udptest.FreePorts(t, 1)[0], VNI: 4242, Peers: peers}, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

var (
	macC = mac{0x02, 0xcc, 0, 0, 0, 3}
	macD = mac{0x02, 0xdd, 0, 0, 0, 4}
)

func TestSetPeerAddsPeerWithoutDisturbingOthers(t *testing.T) {
	tests := []struct {
		name     string
		existing int // peers 0..existing-1 before the new one
	}{
		{"to a transport with no peers", 0},
		{"beside peers with traffic flowing", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t)
			var olds []*vtep
			var peers []Peer
			for j := range tt.existing {
				v := newVTEP(t, netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + j)}).String(), mac{0x02, 0x10, 0, 0, 0, byte(j)})
				olds, peers = append(olds, v), append(peers, v.peer())
			}
			tr := newLoopbackTransport(t, peers, rec)
			want := map[transport.Drop]uint64{}
			for j, v := range olds {
				exchange(t, tr, rec, j, v, v.mac, byte(j))
				// Something for the peer's drop counter to keep.
				v.conn.WriteToUDPAddrPort(refFrame(4243, tr.cfg.mac, v.mac, etherTypeIPv4, ipv4(ip4A, ip4B, 17, nil)), netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), tr.conn.Port()))
				want[transport.Drop{Peer: j, Reason: "bad_vni"}] = 1
			}
			transporttest.WaitForDrops(t, tr, uint64(len(olds)), settle)

			// A sparse number: peers are numbered by the gateway, not packed.
			const added = 5
			nv := newVTEP(t, "127.0.0.9", macC)
			if err := tr.SetPeer(added, nv.peer()); err != nil {
				t.Fatalf("SetPeer: %v", err)
			}
			if m, _ := tr.PeerMAC(added); m != broadcast {
				t.Errorf("new peer's MAC is %v before it sent anything, want broadcast", mac(m))
			}
			for _, d := range transporttest.DropsDiff(tr.Drops(), want) {
				t.Errorf("after SetPeer: %s", d)
			}
			for j, v := range olds {
				if m, _ := tr.PeerMAC(j); m != v.mac {
					t.Errorf("peer %d's learned MAC is %v after another peer was added, want %v", j, mac(m), v.mac)
				}
				exchange(t, tr, rec, j, v, v.mac, byte(10+j))
			}
			exchange(t, tr, rec, added, nv, macC, 20)
			if err := tr.Send(added-1, [][]byte{withHeadroom(ipv4(ip4A, ip4B, 17, nil))}, transport.Headroom); err == nil {
				t.Errorf("Send to the unset peer number %d succeeded", added-1)
			}
		})
	}
}

func TestRemovePeerForgetsOnlyThatPeer(t *testing.T) {
	rec := newRecorder(t)
	gone, kept := newVTEP(t, "127.0.0.2", macC), newVTEP(t, "127.0.0.3", macD)
	tr := newLoopbackTransport(t, []Peer{gone.peer(), kept.peer()}, rec)
	exchange(t, tr, rec, 0, gone, macC, 1)
	exchange(t, tr, rec, 1, kept, macD, 2)
	gone.conn.WriteToUDPAddrPort([]byte{flagI}, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), tr.conn.Port()))
	transporttest.WaitForDrops(t, tr, 1, settle)

	if err := tr.RemovePeer(0); err != nil {
		t.Fatalf("RemovePeer: %v", err)
	}
	pkt := [][]byte{withHeadroom(ipv4(ip4A, ip4B, 17, nil))}
	if err := tr.Send(0, pkt, transport.Headroom); err == nil {
		t.Error("Send to the removed peer succeeded")
	}
	if _, err := tr.PeerMAC(0); err == nil {
		t.Error("PeerMAC of the removed peer succeeded")
	}
	if err := tr.RemovePeer(0); err == nil {
		t.Error("removing the removed peer again succeeded")
	}

	rec.mu.Lock()
	delivered := len(rec.pkts)
	rec.mu.Unlock()
	gone.send(t, tr, ipv4(ip4A, ip4B, 17, pattern(10, 3)))
	transporttest.WaitForDrops(t, tr, 1, settle)
	want := map[transport.Drop]uint64{{Peer: transport.PeerAny, Reason: "unknown_peer"}: 1}
	for _, d := range transporttest.DropsDiff(tr.Drops(), want) {
		t.Errorf("after the removed peer sent: %s", d)
	}
	rec.mu.Lock()
	if len(rec.pkts) != delivered {
		t.Errorf("the removed peer's packet was delivered, under peer %d", rec.peers[len(rec.peers)-1])
	}
	rec.mu.Unlock()
	exchange(t, tr, rec, 1, kept, macD, 4)

	// The number comes back clean: no learned MAC, no old drops.
	if err := tr.SetPeer(0, gone.peer()); err != nil {
		t.Fatalf("SetPeer on the removed number: %v", err)
	}
	if m, _ := tr.PeerMAC(0); m != broadcast {
		t.Errorf("peer 0's MAC after removal and SetPeer is %v, want broadcast until one is learned", mac(m))
	}
	for _, d := range transporttest.DropsDiff(tr.Drops(), want) {
		t.Errorf("after SetPeer on the removed number: %s", d)
	}
	if err := tr.Send(0, pkt, transport.Headroom); err != nil {
		t.Fatalf("Send to the peer set again: %v", err)
	}
	if dst, _ := gone.recv(t); dst != broadcast {
		t.Errorf("first frame to the peer set again is for %v, want broadcast", dst)
	}
}

func TestSetPeerFollowsTheRemoteWhenItMoves(t *testing.T) {
	tests := []struct {
		name string
		from string
		to   string
	}{
		{"to another address", "127.0.0.2", "127.0.0.3"},
		{"to another port", "127.0.0.2", "127.0.0.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t)
			before, other := newVTEP(t, tt.from, macC), newVTEP(t, "127.0.0.4", macD)
			tr := newLoopbackTransport(t, []Peer{before.peer(), other.peer()}, rec)
			exchange(t, tr, rec, 0, before, macC, 1)
			exchange(t, tr, rec, 1, other, macD, 2)

			// The same remote gateway, with the same MAC, at its new address.
			after := newVTEP(t, tt.to, macC)
			before.conn.Close()
			if err := tr.SetPeer(0, after.peer()); err != nil {
				t.Fatalf("SetPeer: %v", err)
			}
			if m, _ := tr.PeerMAC(0); m != macC {
				t.Errorf("peer 0's MAC after the move is %v, want the learned %v kept", mac(m), macC)
			}
			pkt := ipv4(ip4A, ip4B, 17, pattern(60, 5))
			if err := tr.Send(0, [][]byte{withHeadroom(pkt)}, transport.Headroom); err != nil {
				t.Fatalf("Send after the move: %v", err)
			}
			if dst, got := after.recv(t); dst != macC || !bytes.Equal(got, pkt) {
				t.Fatalf("the new address got %d bytes for %v, want the packet for %v", len(got), dst, macC)
			}
			exchange(t, tr, rec, 0, after, macC, 6)
			exchange(t, tr, rec, 1, other, macD, 7)
			if d := tr.Drops(); len(d) != 0 {
				t.Errorf("drops: %v", d)
			}
		})
	}
}

func TestSetPeerRefusesInvalidPeerAndChangesNothing(t *testing.T) {
	rec := newRecorder(t)
	v0, v1 := newVTEP(t, "127.0.0.2", macC), newVTEP(t, "127.0.0.3", macD)
	tr := newLoopbackTransport(t, []Peer{v0.peer(), v1.peer()}, rec)
	tests := []struct {
		name string
		i    int
		p    Peer
		want string // in the error
	}{
		{"address of another peer", 1, Peer{Endpoint: netip.AddrPortFrom(v0.addr.Addr(), 4789)}, "Peers[1].Endpoint"},
		{"new peer on another peer's address", 2, Peer{Endpoint: v1.addr}, "Peers[2].Endpoint"},
		{"unspecified address", 0, Peer{Endpoint: netip.MustParseAddrPort("0.0.0.0:4789")}, "Peers[0].Endpoint"},
		{"no address", 2, Peer{}, "Peers[2].Endpoint"},
		{"broadcast MAC", 0, Peer{Endpoint: v0.addr, MAC: net.HardwareAddr(broadcast[:])}, "Peers[0].MAC"},
		{"negative number", -1, Peer{Endpoint: netip.MustParseAddrPort("192.0.2.1:4789")}, "-1"},
		{"number past the bound", maxPeers, Peer{Endpoint: netip.MustParseAddrPort("192.0.2.1:4789")}, "65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := tr.peers.Load()
			err := tr.SetPeer(tt.i, tt.p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("SetPeer(%d) = %v, want an error naming %s", tt.i, err, tt.want)
			}
			if tr.peers.Load() != table {
				t.Error("a refused SetPeer replaced the peer table")
			}
		})
	}
	exchange(t, tr, rec, 0, v0, macC, 1)
	exchange(t, tr, rec, 1, v1, macD, 2)
}

func TestOverheadFollowsPeers(t *testing.T) {
	tr := newLoopbackTransport(t, nil, &discard{})
	steps := []struct {
		name   string
		change func() error
		want   int
	}{
		{"no peers", func() error { return nil }, overheadIPv4},
		{"an IPv4 peer", func() error { return tr.SetPeer(0, Peer{Endpoint: netip.MustParseAddrPort("192.0.2.1:4789")}) }, overheadIPv4},
		{"and an IPv6 peer", func() error { return tr.SetPeer(1, Peer{Endpoint: netip.MustParseAddrPort("[2001:db8::1]:4789")}) }, overheadIPv6},
		{"the IPv6 peer moved to IPv4", func() error { return tr.SetPeer(1, Peer{Endpoint: netip.MustParseAddrPort("192.0.2.2:4789")}) }, overheadIPv4},
		{"the IPv4 peer moved to IPv6", func() error { return tr.SetPeer(0, Peer{Endpoint: netip.MustParseAddrPort("[2001:db8::2]:4789")}) }, overheadIPv6},
		{"the IPv6 peer removed", func() error { return tr.RemovePeer(0) }, overheadIPv4},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := tr.Overhead(); got != s.want {
			t.Errorf("%s: Overhead() = %d, want %d", s.name, got, s.want)
		}
	}
}

// removedWatch is a Deliverer that flags a packet delivered under peer 1
// while the test holds peer 1 removed.
type removedWatch struct {
	removed   atomic.Bool
	delivered [2]atomic.Int64
	late      atomic.Int64
}

func (w *removedWatch) Deliver(peer int, bufs [][]byte, _ int) {
	if peer == 1 && w.removed.Load() {
		w.late.Add(int64(len(bufs)))
	}
	if peer == 0 || peer == 1 {
		w.delivered[peer].Add(int64(len(bufs)))
	}
}

// TestPeersChangeWhileTrafficFlows changes peers in a loop while both
// remotes send and the transport sends to them; run under -race. Nothing
// may be delivered under a peer number after RemovePeer of it returned.
func TestPeersChangeWhileTrafficFlows(t *testing.T) {
	w := &removedWatch{}
	v0, v1 := newVTEP(t, "127.0.0.2", macC), newVTEP(t, "127.0.0.3", macD)
	tr := newLoopbackTransport(t, []Peer{v0.peer(), v1.peer()}, w)
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), tr.conn.Port())

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, v := range []*vtep{v0, v1} {
		f := refFrame(tr.cfg.vni, tr.cfg.mac, v.mac, etherTypeIPv4, ipv4(ip4A, ip4B, 17, pattern(200, 1)))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v.conn.WriteToUDPAddrPort(f, to)
			}
		})
	}
	wg.Go(func() {
		bufs := make([][]byte, 8)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i := range bufs {
				bufs[i] = withHeadroom(ipv4(ip4A, ip4B, 17, pattern(200, 2)))
			}
			if err := tr.Send(0, bufs, transport.Headroom); err != nil {
				t.Errorf("Send to the peer that stays: %v", err)
				return
			}
			tr.Send(1, bufs, transport.Headroom)
		}
	})

	waitDelivered := func(peer int) {
		t.Helper()
		have := w.delivered[peer].Load()
		for deadline := time.Now().Add(settle); w.delivered[peer].Load() == have; {
			if time.Now().After(deadline) {
				t.Fatalf("nothing delivered under peer %d within %v", peer, settle)
			}
			time.Sleep(time.Millisecond)
		}
	}
	const rounds = 50
	for r := range rounds {
		waitDelivered(1)
		if err := tr.RemovePeer(1); err != nil {
			t.Fatalf("round %d: RemovePeer: %v", r, err)
		}
		w.removed.Store(true)
		staticMAC := Peer{Endpoint: v0.addr}
		if r%2 == 0 {
			staticMAC.MAC = net.HardwareAddr(macC[:])
		}
		if err := tr.SetPeer(0, staticMAC); err != nil {
			t.Fatalf("round %d: SetPeer(0): %v", r, err)
		}
		w.removed.Store(false)
		if err := tr.SetPeer(1, v1.peer()); err != nil {
			t.Fatalf("round %d: SetPeer(1): %v", r, err)
		}
	}
	waitDelivered(0)
	close(stop)
	wg.Wait()
	if n := w.late.Load(); n != 0 {
		t.Errorf("%d packets were delivered under peer 1 after RemovePeer(1) returned", n)
	}
}
