package gateway

import (
	"github.com/snorkel-net/snorkel/packet"
	"github.com/snorkel-net/snorkel/transport"
)

// sendSuper is the read loop's way for a super-packet tp read into
// bufs[0][transport.Headroom:]: routed and translated once, then cut into
// bufs and sent, segs being the scratch for the batch. It reports false,
// with tp untouched, for a super-packet the loop must cut first and take
// packet by packet: one to the clusterset IP range, with no route, whose
// segments exceed the path MTU, or with more segments than bufs holds
// (the rest of the cut would come from later reads).
func (g *Gateway) sendSuper(tp tunPacket, bufs [][]byte, sizes []int, segs [][]byte, p *packet.Parsed) bool {
	const off = transport.Headroom
	if p.Decode(tp.pkt) != packet.DropNone || p.Length != len(tp.pkt) || p.IPHeaderLen != tp.l4 {
		return false
	}
	if cs := g.clusterset.Load(); cs != nil && cs.covers(p.Version, &p.Dst) {
		return false
	}
	rs := g.set.Load()
	r := rs.routes.lookup(p.Version, &p.Dst)
	if r == noRoute {
		return false
	}
	n := packet.Segments(tp.pkt, tp.proto, tp.l4, tp.size)
	hdr, _ := packet.SegmentHeaderLen(tp.pkt, tp.proto, tp.l4)
	if n == 0 || n > len(bufs) || hdr+tp.size > int(g.pathMTU.Load()) {
		return false
	}
	c := rs.bySlot[r].c
	if g.xlate != nil && !g.xlate.Egress(r, tp.pkt, p) {
		c.drops[dropTranslate].Add(uint64(n))
		return true
	}
	n = packet.Segment(tp.pkt, tp.proto, tp.l4, tp.size, bufs, sizes, off)
	if n == 0 {
		g.unattributed().drops[dropMalformed].Add(1)
		return true
	}
	var t tally
	segs = segs[:0]
	for i := range n {
		segs = append(segs, bufs[i][:off+sizes[i]])
		t.packets++
		t.bytes += uint64(sizes[i])
	}
	g.send(c, r, segs, t)
	clear(segs)
	return true
}
