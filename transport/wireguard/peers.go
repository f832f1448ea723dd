package wireguard

import (
	"fmt"
	"slices"
	"strings"

	"github.com/snorkel-net/snorkel/transport"
	"golang.zx2c4.com/wireguard/device"
)

// maxPeers bounds peer numbers, which index a slice: numbers may be sparse,
// but not so sparse that one SetPeer allocates a huge table.
const maxPeers = 1 << 16

// peer is one remote gateway as configured, with the device's peer for it.
type peer struct {
	cfg Peer
	dev *device.Peer
}

// clonePeer copies p's slices and pointers, so that a caller may reuse its
// Peer after passing it.
func clonePeer(p Peer) Peer {
	p.AllowedIPs = slices.Clone(p.AllowedIPs)
	if p.PresharedKey != nil {
		k := *p.PresharedKey
		p.PresharedKey = &k
	}
	return p
}

// peerAt is peer number i of tab, or nil if there is none.
func peerAt(tab []*peer, i int) *peer {
	if i < 0 || i >= len(tab) {
		return nil
	}
	return tab[i]
}

// SetPeer adds peer i, or changes the peer already at i, while the
// transport runs. Other peers are untouched: their sessions, endpoints and
// drop counters stay as they are. Numbers may be sparse, below 65536.
//
// A peer with the same public key as before is updated in place and keeps
// its session and drop counters, whatever else changes; a zero Endpoint
// then keeps the endpoint the device has. A different public key is a
// different remote gateway: the old one's session ends, its messages are
// no longer accepted, and the new one starts from no session and zero drop
// counters.
//
// p is checked as New checks Config.Peers[i], against the other peers; an
// invalid p changes nothing.
func (t *Transport) SetPeer(i int, p Peer) error {
	if i < 0 || i >= maxPeers {
		return fmt.Errorf("wireguard: SetPeer: peer number %d is outside [0, %d)", i, maxPeers)
	}
	p = clonePeer(p)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return transport.ErrClosed
	}
	old := *t.peers.Load()
	set := newPeerSet(t.self)
	for j, q := range old {
		if q != nil && j != i {
			if err := set.add(j, &q.cfg); err != nil {
				return fmt.Errorf("wireguard: SetPeer: %w", err)
			}
		}
	}
	if err := set.add(i, &p); err != nil {
		return fmt.Errorf("wireguard: SetPeer: %w", err)
	}

	cur := peerAt(old, i)
	replaced := cur != nil && cur.cfg.PublicKey != p.PublicKey
	var b strings.Builder
	if replaced {
		b.WriteString("public_key=" + cur.cfg.PublicKey.hex() + "\nremove=true\n")
	}
	writePeerUAPI(&b, &p)
	if err := t.dev.IpcSet(b.String()); err != nil {
		return fmt.Errorf("wireguard: SetPeer: configure Peers[%d] on the device: %w", i, err)
	}
	dp := t.dev.LookupPeer(device.NoisePublicKey(p.PublicKey))
	if dp == nil {
		return fmt.Errorf("wireguard: SetPeer: Peers[%d] was not created on the device", i)
	}
	if cur == nil || replaced {
		t.drops.reset(i, true)
	}
	tab := make([]*peer, max(len(old), i+1))
	copy(tab, old)
	tab[i] = &peer{cfg: p, dev: dp}
	t.install(tab)
	if replaced {
		t.filter.indices.forget(cur.cfg.PublicKey)
	}
	return nil
}

// RemovePeer forgets peer i: the device drops its session and routes
// nothing more to it, Send to i fails, and its messages are dropped and
// counted as from an unknown sender. A later SetPeer(i, ...) starts from no
// session and zero drop counters.
func (t *Transport) RemovePeer(i int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return transport.ErrClosed
	}
	old := *t.peers.Load()
	cur := peerAt(old, i)
	if cur == nil {
		return fmt.Errorf("wireguard: RemovePeer: no peer %d", i)
	}
	if err := t.dev.IpcSet("public_key=" + cur.cfg.PublicKey.hex() + "\nremove=true\n"); err != nil {
		return fmt.Errorf("wireguard: RemovePeer: remove Peers[%d] from the device: %w", i, err)
	}
	tab := slices.Clone(old)
	tab[i] = nil
	t.install(tab)
	t.filter.indices.forget(cur.cfg.PublicKey)
	t.drops.reset(i, false)
	return nil
}

// install makes tab the peer table and brings what follows the peers in
// step: the overhead, the log sink's and the filter's view of the peers.
// The caller holds mu, or is New before the transport is shared.
func (t *Transport) install(tab []*peer) {
	for len(tab) > 0 && tab[len(tab)-1] == nil {
		tab = tab[:len(tab)-1]
	}
	t.peers.Store(&tab)
	overhead := overheadIPv4
	devPeers := make(map[*device.Peer]int, len(tab))
	keys := make([]Key, 0, len(tab))
	for i, p := range tab {
		if p == nil {
			continue
		}
		if a := p.cfg.Endpoint.Addr(); a.Is6() && !a.Is4In6() {
			overhead = overheadIPv6
		}
		devPeers[p.dev] = i
		keys = append(keys, p.cfg.PublicKey)
	}
	t.overhead.Store(int32(overhead))
	t.sink.peers.Store(&devPeers)
	t.filter.setRecipients(keys)
	t.readEndpoints()
}
