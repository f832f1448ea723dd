package vxlan

import (
	"net/netip"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/udp"
)

// rxScratch is the per-call memory of receive, pooled because the IPv4 and
// IPv6 receive loops may run it at the same time.
type rxScratch struct {
	group *udp.Grouper
	one   [1][]byte
}

func newRxScratch() *rxScratch { return &rxScratch{group: udp.NewGrouper()} }

// receive is the udp.Handler: it decapsulates a batch in place, answers ARP,
// and hands the IP packets to the Deliverer grouped by peer, each group in
// arrival order.
func (t *Transport) receive(bufs [][]byte, sizes []int, srcs []netip.AddrPort) {
	s := t.rxPool.Get().(*rxScratch)
	e := t.inUse.enter()
	tab := t.peers.Load()
	// A batch's datagrams come in runs from one peer, so the peer of the
	// last source is kept: the map is hashed once a run, not per datagram.
	// It starts as the zero address, which no peer has (settings rejects
	// it), so that ok starts false, as the map would say.
	var (
		last netip.Addr
		n    int
		ok   bool
	)
	for i, b := range bufs {
		if sizes[i] == 0 {
			// An empty datagram, whose sender the bind does not report.
			t.anyDrops.add(dropShort)
			continue
		}
		if a := srcs[i].Addr(); a != last {
			n, ok = tab.byAddr[a]
			last = a
		}
		if !ok {
			t.anyDrops.add(dropUnknownPeer)
			continue
		}
		p := tab.peers[n]
		frame := b[rxOffset : rxOffset+sizes[i]]
		d := decode(frame, t.cfg.vni)
		switch d.kind {
		case frameDrop:
			p.state.drops.add(d.reason)
			continue
		case frameARP:
			p.learn(d.src)
			p.follow(srcs[i])
			t.replyARP(s, p, frame)
			continue
		}
		p.learn(d.src)
		p.follow(srcs[i])
		bufs[i] = b[:transport.Headroom+d.ipLen]
		s.group.Add(i, n)
	}
	s.group.Deliver(t.deliver, bufs, transport.Headroom)
	t.inUse.exit(e)
	t.rxPool.Put(s)
}

// replyARP answers an ARP request from p in place; the reply goes to the
// peer's configured endpoint, which is where a kernel vxlan device listens,
// not to the source port the request came from, unless p follows its port.
func (t *Transport) replyARP(s *rxScratch, p *peer, frame []byte) {
	reply, r := answerARP(frame, t.cfg.vni, t.cfg.mac)
	if r != accepted {
		p.state.drops.add(r)
		return
	}
	s.one[0] = reply
	if err := t.conn.Send(s.one[:], p.to()); err != nil {
		p.state.drops.add(dropARPReplyFailed)
	}
	s.one[0] = nil
}
