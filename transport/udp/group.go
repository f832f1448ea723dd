package udp

import "github.com/snorkel-net/snorkel/transport"

// Grouper hands the packets of one received batch to a Deliverer grouped by
// sending peer, one Deliver call per peer, each group in arrival order. It
// is the per-call memory of a receive handler; reuse it through a pool.
type Grouper struct {
	peerOf  []int    // peer of bufs[i], for the packets added
	pending []int    // indices of the packets added and not yet delivered
	out     [][]byte // one peer's packets, as given to Deliver
}

// NewGrouper returns a Grouper for batches of up to BatchSize packets.
func NewGrouper() *Grouper {
	return &Grouper{
		peerOf:  make([]int, BatchSize),
		pending: make([]int, 0, BatchSize),
		out:     make([][]byte, 0, BatchSize),
	}
}

// Add records that bufs[i] of the batch is a packet from peer.
func (g *Grouper) Add(i, peer int) {
	g.peerOf[i] = peer
	g.pending = append(g.pending, i)
}

// Deliver gives d the packets added, bufs[i][offset:], peer by peer, and
// forgets them.
func (g *Grouper) Deliver(d transport.Deliverer, bufs [][]byte, offset int) {
	pending := g.pending
	for len(pending) > 0 {
		p := g.peerOf[pending[0]]
		out, rest := g.out[:0], pending[:0]
		for _, i := range pending {
			if g.peerOf[i] == p {
				out = append(out, bufs[i])
			} else {
				rest = append(rest, i)
			}
		}
		pending = rest
		d.Deliver(p, out, offset)
		clear(out)
	}
	g.pending = g.pending[:0]
}
