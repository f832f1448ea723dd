package esp

import (
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
)

// maxPeers bounds peer numbers, which index a table: a mistaken number
// must not allocate gigabytes.
const maxPeers = 1 << 16

// peer is the state of one remote gateway. A peer number that is removed
// and set again gets a new peer, so nothing of the old remote carries over.
type peer struct {
	endpoint atomic.Pointer[netip.AddrPort]
	out      atomic.Pointer[outbound] // nil until a CHILD_SA is installed
	moved    atomic.Uint64
	drops    dropRow
}

func newPeer(ep netip.AddrPort) *peer {
	p := &peer{}
	p.endpoint.Store(&ep)
	return p
}

// peerTable is indexed by peer number; a nil entry is no peer. A table is
// never modified once published, only replaced under Transport.mu, so the
// packet paths read it without a lock.
type peerTable []*peer

// peer is peer number i, or nil if there is none.
func (t *Transport) peer(i int) *peer {
	tbl := *t.peers.Load()
	if i < 0 || i >= len(tbl) {
		return nil
	}
	return tbl[i]
}

// SetPeer adds peer i, or changes its endpoint if it exists, while the
// transport runs. A changed endpoint keeps the peer's SAs, as SetEndpoint
// does: the remote gateway moved and keeps its keys. A new peer starts
// clean, with no SAs and no drops counted, even if its number was another
// remote's before RemovePeer. An invalid peer, or an endpoint that is
// another peer's, changes nothing; the error names the field as New's do.
func (t *Transport) SetPeer(i int, p Peer) error {
	if i < 0 || i >= maxPeers {
		return fmt.Errorf("esp: Peers[%d]: peer numbers run from 0 to %d", i, maxPeers-1)
	}
	ep, err := endpoint(p.Endpoint, t.Port())
	if err != nil {
		return fmt.Errorf("esp: Peers[%d].Endpoint %w", i, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	tbl := *t.peers.Load()
	for j, other := range tbl {
		if other != nil && j != i && *other.endpoint.Load() == ep {
			return fmt.Errorf("esp: Peers[%d].Endpoint %v: already the endpoint of Peers[%d]; each peer is one remote gateway", i, ep, j)
		}
	}
	if i < len(tbl) && tbl[i] != nil {
		tbl[i].endpoint.Store(&ep)
		return nil
	}
	next := slices.Clone(tbl)
	if i >= len(next) {
		next = append(next, make(peerTable, i+1-len(next))...)
	}
	next[i] = newPeer(ep)
	t.peers.Store(&next)
	return nil
}

// RemovePeer forgets peer i: its CHILD_SAs are uninstalled, Send to it
// fails, and nothing is delivered as it once the batches being opened, if
// any, are. Its drop counters go with it.
func (t *Transport) RemovePeer(i int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	tbl := *t.peers.Load()
	if i < 0 || i >= len(tbl) || tbl[i] == nil {
		return fmt.Errorf("esp: remove peer %d: no such peer", i)
	}
	for spi, ch := range t.children {
		if ch.peer == i {
			delete(t.children, spi)
		}
	}
	t.publishInbound()
	next := slices.Clone(tbl)
	next[i] = nil
	for len(next) > 0 && next[len(next)-1] == nil {
		next = next[:len(next)-1]
	}
	t.peers.Store(&next)
	return nil
}
