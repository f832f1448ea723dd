package esp

import (
	"encoding/binary"
	"net/netip"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/udp"
)

// rxScratch is the per-call memory of receive, pooled because the IPv4 and
// IPv6 receive loops may run it at the same time.
type rxScratch struct {
	group *udp.Grouper
	open  scratch
}

func newRxScratch() *rxScratch { return &rxScratch{group: udp.NewGrouper()} }

// receive is the udp.Handler: it tells keepalives, IKE messages and ESP
// apart (RFC 3948 §2), opens ESP in place, within each datagram, and hands
// the inner packets to the Deliverer at transport.Headroom, grouped by
// peer, each group in arrival order.
func (t *Transport) receive(bufs [][]byte, sizes []int, srcs []netip.AddrPort) {
	rx := t.rxPool.Get().(*rxScratch)
	sas := *t.inbound.Load()
	now := t.now.Load()
	for i, b := range bufs {
		if sizes[i] == 0 {
			continue
		}
		end := rxOffset + sizes[i]
		d := b[rxOffset:end]
		switch {
		case len(d) == 1 && d[0] == keepaliveByte:
			t.dropsAt(srcs[i]).add(dropKeepalive, 1)
			continue
		case len(d) >= markerLen && binary.BigEndian.Uint32(d) == 0:
			t.handleIKE(srcs[i], d[markerLen:len(d):len(d)])
			continue
		case len(d) < espHeaderLen:
			t.unknown.add(dropTruncated, 1)
			continue
		}
		sa := sas[binary.BigEndian.Uint32(d)]
		if sa == nil {
			t.unknown.add(dropUnknownSPI, 1)
			continue
		}
		n, next, r := sa.open(b[:end], rxOffset, &rx.open)
		if r != accepted {
			sa.owner.drops.add(r, 1)
			continue
		}
		at := rxOffset + sa.headerLen()
		if !innerIP(b[at:at+n], next) {
			sa.owner.drops.add(dropNotIP, 1)
			continue
		}
		sa.received(n, now)
		if sa.pending.Load() != nil {
			t.promote(sa)
		}
		if p := sa.owner; srcs[i] != *p.endpoint.Load() {
			t.follow(sa.peer, p, srcs[i])
		}
		// Every suite's inner packet lies at or after transport.Headroom;
		// reslicing puts it exactly there.
		bufs[i] = b[at-transport.Headroom : at+n]
		rx.group.Add(i, sa.peer)
	}
	rx.group.Deliver(t.deliver, bufs, transport.Headroom)
	t.rxPool.Put(rx)
}

// follow moves p's endpoint to src, where a packet that opened under one
// of its SAs came from: a NAT rebound the peer's port or address, and what
// is sent to the old one is lost (RFC 7296 §2.23, "the last valid
// authenticated packet"). The anti-replay window has already refused a
// copy of an old packet, so a replay cannot move the peer back. The IKE
// engine is told, so that its messages follow too.
func (t *Transport) follow(peer int, p *peer, src netip.AddrPort) {
	ep := netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	p.endpoint.Store(&ep)
	p.moved.Add(1)
	if h := t.onMove.Load(); h != nil && *h != nil {
		(*h)(peer, ep)
	}
}

// dropsAt is the drop row of the peer whose endpoint is src, or the
// unknown peer's. It scans the peers, which is fine for the rare datagrams
// that need it.
func (t *Transport) dropsAt(src netip.AddrPort) *dropRow {
	for _, p := range *t.peers.Load() {
		if p != nil && *p.endpoint.Load() == src {
			return &p.drops
		}
	}
	return &t.unknown
}
