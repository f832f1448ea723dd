package natengine

import "github.com/snorkel-net/snorkel/packet"

// ICMP errors (RFC 792, RFC 4443) are translated through the packet they
// quote, as RFC 5508, REQ-3 and RFC 3022, section 4.3 ask: the quote is a
// packet of a flow seen from the other side, so its reversed tuple finds the
// flow; the quote gets the inverse of that packet's translation and the outer
// header the translation of the error's own direction. Errors never create
// or refresh a flow: anyone on the path can send them.

// isICMPError reports whether p is an ICMP or ICMPv6 error message, which
// quotes the packet that caused it.
func isICMPError(p *packet.Parsed) bool {
	switch {
	case p.Version == 4 && p.Proto == protoICMPv4:
		switch p.ICMPType {
		case packet.ICMPv4Unreachable, packet.ICMPv4SourceQuench, packet.ICMPv4Redirect,
			packet.ICMPv4TimeExceeded, packet.ICMPv4ParamProblem:
			return true
		}
	case p.Version == 6 && p.Proto == protoICMPv6:
		return p.ICMPType < 128 // RFC 4443, section 2.1
	}
	return false
}

// quote decodes the packet quoted by error b (decoded into p) into ip and
// returns its bytes. It refuses an error whose own checksum is wrong, since
// translating recomputes that checksum and would launder the damage, and a
// fragmented error, whose checksum covers bytes it does not hold.
func quote(b []byte, p, ip *packet.Parsed) ([]byte, bool) {
	if p.IsFragment() {
		return nil, false
	}
	inner, ok := packet.ICMPInner(b, p)
	if !ok {
		return nil, false
	}
	m := b[p.IPHeaderLen:p.Length]
	if p.Version == 4 {
		if packet.ICMPv4(m).ComputeChecksum() != packet.ICMPv4(m).Checksum() {
			return nil, false
		}
	} else {
		ph := packet.PseudoHeaderChecksum(protoICMPv6, p.Src[:], p.Dst[:], len(m))
		if packet.ICMPv6(m).ComputeChecksum(ph) != packet.ICMPv6(m).Checksum() {
			return nil, false
		}
	}
	if ip.DecodeInner(inner) != packet.DropNone || ip.Version != p.Version || ip.FragOffset != 0 {
		return nil, false
	}
	return inner, true
}

// quotedFlow decodes the packet an ICMP error b quotes into ip and returns
// the quote and the translation of the flow it belongs to, which must run
// in direction want. The quote runs the opposite way to the error, so its
// reversed tuple is the flow's key.
func (e *Engine) quotedFlow(b []byte, p, ip *packet.Parsed, want uint32) ([]byte, mapping, DropReason) {
	inner, ok := quote(b, p, ip)
	if !ok {
		return nil, mapping{}, DropMalformed
	}
	k := key{a: ip.Dst, ap: ip.DstPort, b: ip.Src, bp: ip.SrcPort, proto: ip.Proto, v6: ip.Version == 6}
	var v view
	if !e.t.lookup(&k, &v) {
		// Errors are rare: make sure of a miss.
		e.mu.Lock()
		i, dir := e.t.find(&k)
		if i != 0 {
			v = e.t.viewOf(i, dir)
		}
		e.mu.Unlock()
		if i == 0 {
			return nil, mapping{}, DropNoFlow
		}
	}
	if v.dir != want {
		return nil, mapping{}, DropNoFlow
	}
	return inner, v.mapping, dropNone
}

// mapping is a flow's translation.
type mapping struct {
	local, global [16]byte
	lport, gport  uint16
}

// egressError translates an error a local host or router sends about a
// packet that came in: the quote runs remote → local, translated, and the
// remote must see it as remote → global, from global.
func (e *Engine) egressError(s *snapshot, b []byte, p *packet.Parsed) bool {
	if !s.isLocal(&p.Src) {
		return true
	}
	var ip packet.Parsed
	inner, f, r := e.quotedFlow(b, p, &ip, dirEgress)
	if r != dropNone {
		return e.drop(r)
	}
	g, gp, lp := f.global, f.gport, f.lport
	packet.SetDstAddr(inner, &ip, g)
	if gp != lp {
		packet.SetDstPort(inner, &ip, gp)
	}
	packet.SetSrcAddr(b, p, g)
	packet.RecomputeL4Checksum(b, p)
	return true
}

// ingressError translates an error a remote host or router sends about a
// packet this cluster sent: the quote runs global → remote and the local
// side must see it as local → remote, sent to local.
func (e *Engine) ingressError(b []byte, p *packet.Parsed) bool {
	var ip packet.Parsed
	inner, f, r := e.quotedFlow(b, p, &ip, dirIngress)
	if r != dropNone {
		return e.drop(r)
	}
	l, g, lp, gp := f.local, f.global, f.lport, f.gport
	if g != p.Dst {
		// An error about one global address must be sent to it, or it
		// could be used to reach another flow's local side.
		return e.drop(DropNoFlow)
	}
	packet.SetSrcAddr(inner, &ip, l)
	if gp != lp {
		packet.SetSrcPort(inner, &ip, lp)
	}
	packet.SetDstAddr(b, p, l)
	packet.RecomputeL4Checksum(b, p)
	return true
}
