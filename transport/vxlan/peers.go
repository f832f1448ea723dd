package vxlan

import (
	"fmt"
	"net/netip"
	"sync/atomic"

	"github.com/snorkel-net/snorkel/transport"
)

// maxPeers bounds peer numbers, which index a slice: numbers may be sparse,
// but not so sparse that one SetPeer allocates a huge table.
const maxPeers = 1 << 16

type peer struct {
	peerSettings
	// port is the source port of the peer's latest valid frame when
	// followPort is set, 0 until one arrives; a SetPeer starts it anew, so
	// that the configured endpoint wins over what was learned.
	port atomic.Uint32
	// state outlives a SetPeer that only moves the peer: it stays with
	// the peer number until RemovePeer.
	state *peerState
}

// to is where frames for p go.
func (p *peer) to() netip.AddrPort {
	if port := p.port.Load(); port != 0 {
		return netip.AddrPortFrom(p.endpoint.Addr(), uint16(port))
	}
	return p.endpoint
}

// follow records the source port of a valid frame from p, if p follows it.
func (p *peer) follow(src netip.AddrPort) {
	if p.followPort && p.port.Load() != uint32(src.Port()) {
		p.port.Store(uint32(src.Port()))
	}
}

type peerState struct {
	learned atomic.Uint64 // mac.pack() of the last inner source MAC, 0 if none
	drops   dropRow
}

// dstMAC is the inner destination for frames to p: the configured MAC, else
// the learned one, else broadcast, which a kernel vxlan device floods to
// its own stack like any broadcast frame.
func (p *peer) dstMAC() mac {
	if p.staticMAC {
		return p.mac
	}
	if v := p.state.learned.Load(); v != 0 {
		return unpack(v)
	}
	return broadcast
}

// learn records src as p's MAC; the load first keeps the cache line shared
// while the address does not change.
func (p *peer) learn(src mac) {
	if !src.isUnicast() {
		return
	}
	if v := src.pack(); p.state.learned.Load() != v {
		p.state.learned.Store(v)
	}
}

// peerTable is an immutable snapshot of the peers; a change builds a new one.
type peerTable struct {
	peers  []*peer // by peer number; nil where there is none
	byAddr map[netip.Addr]int
	ipv6   bool // some peer is reached over IPv6
}

func newPeerTable(peers []*peer) *peerTable {
	tab := &peerTable{peers: peers, byAddr: make(map[netip.Addr]int, len(peers))}
	for i, p := range peers {
		if p == nil {
			continue
		}
		tab.byAddr[p.endpoint.Addr()] = i
		tab.ipv6 = tab.ipv6 || p.endpoint.Addr().Is6()
	}
	return tab
}

// get is peer i, or nil if there is none.
func (tab *peerTable) get(i int) *peer {
	if i < 0 || i >= len(tab.peers) {
		return nil
	}
	return tab.peers[i]
}

// with is a copy of tab in which peer i is p, or none if p is nil.
func (tab *peerTable) with(i int, p *peer) *peerTable {
	peers := make([]*peer, max(len(tab.peers), i+1))
	copy(peers, tab.peers)
	peers[i] = p
	for len(peers) > 0 && peers[len(peers)-1] == nil {
		peers = peers[:len(peers)-1]
	}
	return newPeerTable(peers)
}

// SetPeer adds peer i, or changes the peer already at i, while the
// transport runs. Other peers keep their learned MACs and drop counters.
// A peer whose endpoint changes is taken to be the same remote gateway at a
// new address, so it keeps its learned MAC and counters too. Numbers may be
// sparse, below 65536. p is checked as New checks Config.Peers[i], and
// also against the other peers' addresses; an invalid p changes nothing.
func (t *Transport) SetPeer(i int, p Peer) error {
	if i < 0 || i >= maxPeers {
		return fmt.Errorf("vxlan: SetPeer: peer number %d is outside [0, %d)", i, maxPeers)
	}
	ps, err := p.settings(i, t.cfg.port)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return transport.ErrClosed
	}
	old := t.peers.Load()
	if j, dup := old.byAddr[ps.endpoint.Addr()]; dup && j != i {
		return sharedAddrError(i, p, j)
	}
	next := &peer{peerSettings: ps, state: &peerState{}}
	if cur := old.get(i); cur != nil {
		next.state = cur.state
	}
	t.peers.Store(old.with(i, next))
	return nil
}

// RemovePeer forgets peer i. Once it returns, Send to i fails, no batch
// is still being sent to it, datagrams from its address are dropped as from
// an unknown sender, and no packet of its is still being delivered. A later
// SetPeer(i, ...) starts with no learned MAC and zero drop counters.
func (t *Transport) RemovePeer(i int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.peers.Load()
	if old.get(i) == nil {
		return fmt.Errorf("vxlan: RemovePeer: no peer %d", i)
	}
	t.peers.Store(old.with(i, nil))
	t.inUse.wait()
	return nil
}
