package wireguard

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
)

var (
	cidrC = netip.MustParsePrefix("10.3.0.0/16")
	hostC = netip.MustParseAddr("10.3.0.9")
)

// node is one gateway of a test topology.
type node struct {
	tr  *Transport
	key Key
	c   *collector
}

func newNode(t *testing.T, key Key, peers ...Peer) *node {
	t.Helper()
	n := &node{key: key, c: newCollector()}
	var err error
	if n.tr, err = New(Config{PrivateKey: key, Peers: peers}, n.c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.tr.Close() })
	return n
}

func newKey(t *testing.T) Key {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// passive is the peer entry by which a gateway knows key's holder without
// an endpoint, so that it learns it from the holder's handshake.
func passive(key Key, cidr netip.Prefix) Peer {
	return Peer{PublicKey: key.Public(), AllowedIPs: []netip.Prefix{cidr}}
}

// reach is the peer entry by which a gateway reaches n at 127.0.0.1.
func (n *node) reach(cidr netip.Prefix) Peer {
	return Peer{
		PublicKey:  n.key.Public(),
		Endpoint:   netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), n.tr.Port()),
		AllowedIPs: []netip.Prefix{cidr},
	}
}

// from counts the packets n has received from inner source src.
func (n *node) from(src netip.Addr) int {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	k := 0
	for _, p := range n.c.pkts {
		if len(p) >= 20 && netip.AddrFrom4([4]byte(p[12:16])) == src {
			k++
		}
	}
	return k
}

// waitFrom waits until n has received at least k packets from src.
func (n *node) waitFrom(t *testing.T, src netip.Addr, k int) {
	t.Helper()
	deadline := time.After(settle)
	for n.from(src) < k {
		select {
		case <-n.c.arrived:
		case <-deadline:
			t.Fatalf("%d packets from %v arrived within %v, want %d", n.from(src), src, settle, k)
		}
	}
}

// exchange sends a few packets from a to its peer i, b, and back, and
// waits for both directions to arrive.
func exchange(t *testing.T, a *node, i int, srcA netip.Addr, b *node, srcB netip.Addr) {
	t.Helper()
	const n = 4
	haveB, haveA := b.from(srcA), a.from(srcB)
	sendToPeer(t, a.tr, i, srcA, srcB, n, 300, 1)
	b.waitFrom(t, srcA, haveB+n)
	sendPackets(t, b.tr, srcB, srcA, n, 300, 2)
	a.waitFrom(t, srcB, haveA+n)
}

// handshake is the time of the latest handshake tr reports with peer i.
func handshake(t *testing.T, tr *Transport, i int) time.Time {
	t.Helper()
	st, err := tr.Peers()
	if err != nil {
		t.Fatal(err)
	}
	if i >= len(st) {
		t.Fatalf("Peers() has %d entries, want peer %d", len(st), i)
	}
	return st[i].LastHandshake
}

// checkSession fails t if tr's handshake with peer i is not still at was.
func checkSession(t *testing.T, tr *Transport, i int, was time.Time, what string) {
	t.Helper()
	if now := handshake(t, tr, i); !now.Equal(was) {
		t.Errorf("%s: the handshake with peer %d moved from %v to %v; its session was not kept", what, i, was, now)
	}
}

// waitForDrop waits until tr has counted at least n drops of reason for peer.
func waitForDrop(t *testing.T, tr *Transport, peer int, reason string, n uint64) {
	t.Helper()
	deadline := time.Now().Add(settle)
	for dropCount(tr.Drops(), peer, reason) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d %s drops for peer %d within %v, want %d; all: %v", dropCount(tr.Drops(), peer, reason), reason, peer, settle, n, tr.Drops())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pump sends to tr's peer i until the returned stop is called.
func pump(t *testing.T, tr *Transport, i int, src, dst netip.Addr) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		bufs := newBatch(8)
		for {
			select {
			case <-done:
				return
			default:
			}
			for j := range bufs {
				bufs[j] = ipv4UDP(bufs[j][:cap(bufs[j])], transport.Headroom, src, dst, 200, uint32(j))
			}
			if err := tr.Send(i, bufs, transport.Headroom); err != nil {
				t.Errorf("Send to peer %d during the change: %v", i, err)
				return
			}
		}
	})
	return sync.OnceFunc(func() {
		close(done)
		wg.Wait()
	})
}

func TestSetPeerAddsPeerWithoutNewHandshakeForOthers(t *testing.T) {
	tests := []struct {
		name     string
		existing bool // A has B as peer 0, with a session and traffic flowing
	}{
		{"to a transport with no peers", false},
		{"beside a peer with a session", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keyA := newKey(t)
			var a, b *node
			var hsA, hsB time.Time
			if tt.existing {
				b = newNode(t, newKey(t), passive(keyA, cidrA))
				a = newNode(t, keyA, b.reach(cidrB))
				exchange(t, a, 0, hostA, b, hostB)
				hsA, hsB = handshake(t, a.tr, 0), handshake(t, b.tr, 0)
			} else {
				a = newNode(t, keyA)
				if err := a.tr.Send(0, newBatch(1), transport.Headroom); err == nil {
					t.Error("Send to peer 0 of a transport with no peers succeeded")
				}
			}

			c := newNode(t, newKey(t), passive(keyA, cidrA))
			// A sparse number: the gateway numbers peers, the transport
			// does not pack them.
			const added = 3
			stop := func() {}
			if tt.existing {
				stop = pump(t, a.tr, 0, hostA, hostB)
			}
			if err := a.tr.SetPeer(added, c.reach(cidrC)); err != nil {
				t.Fatalf("SetPeer: %v", err)
			}
			if tt.existing {
				have := b.from(hostA)
				b.waitFrom(t, hostA, have+1)
			}
			stop()
			exchange(t, a, added, hostA, c, hostC)
			if handshake(t, a.tr, added).IsZero() {
				t.Error("no handshake reported with the added peer")
			}
			if err := a.tr.Send(added-1, newBatch(1), transport.Headroom); err == nil {
				t.Errorf("Send to the unset peer number %d succeeded", added-1)
			}
			if tt.existing {
				exchange(t, a, 0, hostA, b, hostB)
				checkSession(t, a.tr, 0, hsA, "A after adding a peer")
				checkSession(t, b.tr, 0, hsB, "B after A added a peer")
			}
			if ds := a.tr.Drops(); len(ds) != 0 {
				t.Errorf("A dropped %v", ds)
			}
		})
	}
}

func TestRemovePeerStopsOnlyThatPeer(t *testing.T) {
	keyA := newKey(t)
	b := newNode(t, newKey(t), passive(keyA, cidrA))
	c := newNode(t, newKey(t), passive(keyA, cidrA))
	a := newNode(t, keyA, b.reach(cidrB), c.reach(cidrC))
	exchange(t, a, 0, hostA, b, hostB)
	exchange(t, a, 1, hostA, c, hostC)
	hsC := handshake(t, a.tr, 1)

	if err := a.tr.RemovePeer(0); err != nil {
		t.Fatalf("RemovePeer: %v", err)
	}
	if err := a.tr.Send(0, newBatch(1), transport.Headroom); err == nil {
		t.Error("Send to the removed peer succeeded")
	}
	if err := a.tr.RemovePeer(0); err == nil {
		t.Error("removing the removed peer again succeeded")
	}
	st, err := a.tr.Peers()
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || !st[0].PublicKey.IsZero() || st[1].PublicKey != c.key.Public() {
		t.Errorf("Peers() after removing peer 0 = %+v, want a hole at 0 and C at 1", st)
	}

	// B still has its session and sends on it; A must drop and count it.
	fromB := a.from(hostB)
	const n = 5
	sendPackets(t, b.tr, hostB, hostA, n, 300, 50)
	waitForDrop(t, a.tr, transport.PeerAny, ReasonUnknownIndex, n)
	if got := a.from(hostB); got != fromB {
		t.Errorf("A delivered %d packets from the removed peer", got-fromB)
	}
	for _, d := range a.tr.Drops() {
		if d.Peer == 0 {
			t.Errorf("a drop is counted for the removed peer number: %v", d)
		}
	}

	exchange(t, a, 1, hostA, c, hostC)
	checkSession(t, a.tr, 1, hsC, "A after removing another peer")
}

// relay forwards datagrams between whoever sends to it and the address it
// was made for, so that a test can move a remote gateway's address by
// closing one relay and switching to another.
type relay struct {
	front, back *net.UDPConn
	client      atomic.Pointer[netip.AddrPort]
	wg          sync.WaitGroup
}

func newRelay(t *testing.T, to netip.AddrPort) *relay {
	t.Helper()
	r := &relay{}
	var err error
	if r.front, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
		t.Fatal(err)
	}
	if r.back, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(to)); err != nil {
		t.Fatal(err)
	}
	r.wg.Go(func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := r.front.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			r.client.Store(&from)
			r.back.Write(buf[:n])
		}
	})
	r.wg.Go(func() {
		buf := make([]byte, 65535)
		for {
			n, err := r.back.Read(buf)
			if err != nil {
				return
			}
			if c := r.client.Load(); c != nil {
				r.front.WriteToUDPAddrPort(buf[:n], *c)
			}
		}
	})
	t.Cleanup(r.close)
	return r
}

func (r *relay) addr() netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(r.front.LocalAddr().(*net.UDPAddr).Port))
}

func (r *relay) close() {
	r.front.Close()
	r.back.Close()
	r.wg.Wait()
}

func TestSetPeerKeepsSessionWhenOnlySettingsChange(t *testing.T) {
	psk := newKey(t)
	tests := []struct {
		name string
		move bool // the remote's address changes: the first relay closes
		edit func(p *Peer)
		// dst is where A sends after the change.
		dst netip.Addr
	}{
		{"endpoint moves", true, func(*Peer) {}, hostB},
		{"AllowedIPs grow", false, func(p *Peer) {
			p.AllowedIPs = append(p.AllowedIPs, netip.MustParsePrefix("10.20.0.0/16"))
		}, netip.MustParseAddr("10.20.0.1")},
		{"keepalive set", false, func(p *Peer) { p.PersistentKeepalive = 25 }, hostB},
		{"preshared key set", false, func(p *Peer) { p.PresharedKey = &psk }, hostB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keyA := newKey(t)
			b := newNode(t, newKey(t), passive(keyA, cidrA))
			first := newRelay(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), b.tr.Port()))
			peerB := b.reach(cidrB)
			peerB.Endpoint = first.addr()
			a := newNode(t, keyA, peerB)
			exchange(t, a, 0, hostA, b, hostB)
			hsA, hsB := handshake(t, a.tr, 0), handshake(t, b.tr, 0)

			if tt.move {
				second := newRelay(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), b.tr.Port()))
				first.close()
				peerB.Endpoint = second.addr()
			}
			tt.edit(&peerB)
			if err := a.tr.SetPeer(0, peerB); err != nil {
				t.Fatalf("SetPeer: %v", err)
			}
			have := b.from(hostA)
			sendToPeer(t, a.tr, 0, hostA, tt.dst, 4, 300, 10)
			b.waitFrom(t, hostA, have+4)
			have = a.from(hostB)
			sendPackets(t, b.tr, hostB, hostA, 4, 300, 20)
			a.waitFrom(t, hostB, have+4)
			checkSession(t, a.tr, 0, hsA, "A")
			checkSession(t, b.tr, 0, hsB, "B")
			if st, _ := a.tr.Peers(); st[0].Endpoint != peerB.Endpoint {
				t.Errorf("A's endpoint for B is %v, want %v", st[0].Endpoint, peerB.Endpoint)
			}
		})
	}
}

func TestSetPeerWithNewKeyReplacesTheRemote(t *testing.T) {
	keyA := newKey(t)
	b := newNode(t, newKey(t), passive(keyA, cidrA))
	a := newNode(t, keyA, b.reach(cidrB))
	exchange(t, a, 0, hostA, b, hostB)

	// Another gateway takes over the remote cluster under its own key.
	b2 := newNode(t, newKey(t), passive(keyA, cidrA))
	if err := a.tr.SetPeer(0, b2.reach(cidrB)); err != nil {
		t.Fatalf("SetPeer: %v", err)
	}

	fromB := a.from(hostB)
	const n = 5
	sendPackets(t, b.tr, hostB, hostA, n, 300, 50)
	waitForDrop(t, a.tr, transport.PeerAny, ReasonUnknownIndex, n)
	if got := a.from(hostB); got != fromB {
		t.Errorf("A delivered %d packets from the replaced key", got-fromB)
	}

	exchange(t, a, 0, hostA, b2, hostB)
	st, err := a.tr.Peers()
	if err != nil {
		t.Fatal(err)
	}
	if st[0].PublicKey != b2.key.Public() || st[0].LastHandshake.IsZero() {
		t.Errorf("A's peer 0 = %+v, want the new key with a handshake", st[0])
	}
	if b.from(hostA) != 4 {
		t.Errorf("the replaced gateway received %d packets, want only the 4 from before the change", b.from(hostA))
	}
	for _, d := range a.tr.Drops() {
		if d.Peer == 0 {
			t.Errorf("the new peer 0 starts with a drop of the old one: %v", d)
		}
	}
}

func TestSetPeerRefusesInvalidPeerAndChangesNothing(t *testing.T) {
	keyA, keyB, keyC, keyD := newKey(t), newKey(t), newKey(t), newKey(t)
	a := newNode(t, keyA, passive(keyB, cidrB), passive(keyC, cidrC))
	other := netip.MustParsePrefix("10.9.0.0/16")
	tests := []struct {
		name string
		i    int
		p    Peer
		want string // in the error
	}{
		{"key of another peer", 2, passive(keyB, other), "Peers[2].PublicKey"},
		{"replacing a key with another peer's", 0, passive(keyC, cidrB), "Peers[0].PublicKey"},
		{"our own key", 2, passive(keyA, other), "Peers[2].PublicKey"},
		{"no key", 2, Peer{AllowedIPs: []netip.Prefix{other}}, "Peers[2].PublicKey"},
		{"CIDR of another peer", 1, passive(keyC, netip.MustParsePrefix("10.2.9.0/16")), "Peers[1].AllowedIPs"},
		{"new peer with another's CIDR", 2, passive(keyD, cidrC), "Peers[2].AllowedIPs"},
		{"endpoint without port", 2, Peer{PublicKey: keyD.Public(), Endpoint: netip.MustParseAddrPort("127.0.0.1:0")}, "Peers[2].Endpoint"},
		{"negative keepalive", 0, Peer{PublicKey: keyB.Public(), PersistentKeepalive: -1}, "Peers[0].PersistentKeepalive"},
		{"negative number", -1, passive(keyD, other), "-1"},
		{"number past the bound", maxPeers, passive(keyD, other), "65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := a.tr.peers.Load()
			before := deviceConfig(t, a.tr)
			err := a.tr.SetPeer(tt.i, tt.p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("SetPeer(%d) = %v, want an error naming %s", tt.i, err, tt.want)
			}
			if a.tr.peers.Load() != table {
				t.Error("a refused SetPeer replaced the peer table")
			}
			if after := deviceConfig(t, a.tr); !slices.Equal(after, before) {
				t.Errorf("a refused SetPeer changed the device from\n%s\nto\n%s", before, after)
			}
		})
	}
}

// deviceConfig is the device's UAPI get output cut into the device section
// and one section per peer, sorted, since the device lists its peers in map
// order.
func deviceConfig(t *testing.T, tr *Transport) []string {
	t.Helper()
	text, err := tr.dev.IpcGet()
	if err != nil {
		t.Fatal(err)
	}
	sections := strings.Split(text, "public_key=")
	slices.Sort(sections)
	return sections
}

func TestOverheadFollowsPeers(t *testing.T) {
	a := newNode(t, newKey(t))
	keyB, keyC := newKey(t), newKey(t)
	steps := []struct {
		name   string
		change func() error
		want   int
	}{
		{"no peers", func() error { return nil }, overheadIPv4},
		{"an IPv6 peer", func() error {
			return a.tr.SetPeer(0, Peer{PublicKey: keyB.Public(), Endpoint: netip.MustParseAddrPort("[2001:db8::1]:51820")})
		}, overheadIPv6},
		{"and an IPv4 peer", func() error {
			return a.tr.SetPeer(1, Peer{PublicKey: keyC.Public(), Endpoint: netip.MustParseAddrPort("192.0.2.1:51820")})
		}, overheadIPv6},
		{"the IPv6 peer removed", func() error { return a.tr.RemovePeer(0) }, overheadIPv4},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := a.tr.Overhead(); got != s.want {
			t.Errorf("%s: Overhead() = %d, want %d", s.name, got, s.want)
		}
	}
}

// TestPeersChangeWhileTrafficFlows changes peers in a loop while both sides
// send and status is read; run under -race. Peer 0 is only ever updated
// under its own key, so its session must last through all of it.
func TestPeersChangeWhileTrafficFlows(t *testing.T) {
	keyA, keyC := newKey(t), newKey(t)
	b := newNode(t, newKey(t), passive(keyA, cidrA))
	peerB := b.reach(cidrB)
	a := newNode(t, keyA, peerB)
	exchange(t, a, 0, hostA, b, hostB)
	hsA := handshake(t, a.tr, 0)

	stopAB := pump(t, a.tr, 0, hostA, hostB)
	defer stopAB()
	stopBA := pump(t, b.tr, 0, hostB, hostA)
	defer stopBA()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := a.tr.Peers(); err != nil {
				t.Errorf("Peers: %v", err)
				return
			}
			a.tr.Drops()
			a.tr.Overhead()
		}
	})

	const rounds = 30
	for r := range rounds {
		if err := a.tr.SetPeer(1, passive(keyC, cidrC)); err != nil {
			t.Fatalf("round %d: SetPeer(1): %v", r, err)
		}
		peerB.PersistentKeepalive = r % 2 * 25
		if err := a.tr.SetPeer(0, peerB); err != nil {
			t.Fatalf("round %d: SetPeer(0): %v", r, err)
		}
		if err := a.tr.RemovePeer(1); err != nil {
			t.Fatalf("round %d: RemovePeer(1): %v", r, err)
		}
	}
	have := a.from(hostB)
	a.waitFrom(t, hostB, have+1)
	close(done)
	wg.Wait()
	stopAB()
	stopBA()
	checkSession(t, a.tr, 0, hsA, "A after the changes")
}
