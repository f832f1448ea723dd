package ike

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// maxInvalidKE and maxCookies bound the INVALID_KE_PAYLOAD and COOKIE
// answers an initiator follows, so that a confused or hostile responder
// cannot keep it looping.
const (
	maxInvalidKE = 2
	maxCookies   = 2
)

// initiate starts a new IKE SA with p: IKE_SA_INIT with the first group of
// the first IKE proposal.
func (e *Engine) initiate(p *peer) {
	sa := e.newSA(p, true, 0)
	sa.state = saInitSent
	sa.ni = newNonce()
	if err := e.sendInit(sa, e.cfg.ike[0].algs[transDH][0].id); err != nil {
		e.fail(p, err.Error())
	}
}

// sendInit sends IKE_SA_INIT with a key exchange in group, reusing the
// key already made for a retry with a cookie (RFC 7296 §2.6).
func (e *Engine) sendInit(sa *ikeSA, group uint16) error {
	if sa.dh == nil || sa.suite.dh != group {
		k, err := newDH(group)
		if err != nil {
			return err
		}
		sa.dh, sa.suite.dh = k, group
	}
	var ps []payload
	if sa.cookie != nil {
		ps = append(ps, &notifyPayload{typ: notifyCookie, data: sa.cookie})
	}
	ps = append(ps,
		&saPayload{proposals: proposals(e.cfg.ike, nil)},
		&kePayload{group: group, data: sa.dh.public()},
		&noncePayload{data: sa.ni})
	ps = append(ps, natDetection(sa.spiI, 0, sa.remote)...)
	m := &message{spiI: sa.spiI, exchange: exchIKESAInit, flags: flagInitiator, payloads: ps}
	sa.initMsgI = m.encode()
	sa.nextID = 1
	e.transmit(sa, &request{exchange: exchIKESAInit, msg: sa.initMsgI})
	return nil
}

// natDetection returns the NAT_DETECTION notifies (RFC 7296 §2.23). The
// source hash is of nothing real, so that the peer believes this side is
// behind a NAT and encapsulates ESP in UDP, the only way the data plane
// receives it; strongSwan's "encap = yes" does the same.
func natDetection(spiI, spiR uint64, dst netip.AddrPort) []payload {
	h := sha1.New()
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], spiI)
	binary.BigEndian.PutUint64(b[8:], spiR)
	h.Write(b[:])
	h.Write(dst.Addr().AsSlice())
	h.Write(binary.BigEndian.AppendUint16(nil, dst.Port()))
	return []payload{
		&notifyPayload{typ: notifyNATDetectionSource, data: randomBytes(sha1.Size)},
		&notifyPayload{typ: notifyNATDetectionDest, data: h.Sum(nil)},
	}
}

// initResponse handles the answer to our IKE_SA_INIT.
// A COOKIE request (RFC 7296 §2.6) is answered by sending IKE_SA_INIT
// again with the same nonce, SPI and key exchange and the cookie as the
// first payload.
func (e *Engine) initResponse(sa *ikeSA, from netip.AddrPort, m *message, b []byte) DropReason {
	p := sa.p
	if n := notify(m.payloads, notifyCookie); n != nil && len(n.data) > 0 && len(n.data) <= 64 {
		if sa.cookies >= maxCookies {
			e.fail(p, "IKE_SA_INIT: the peer keeps asking for a cookie")
			return accepted
		}
		sa.cookies++
		sa.req = nil
		sa.cookie = n.data
		if err := e.sendInit(sa, sa.suite.dh); err != nil {
			e.fail(p, err.Error())
		}
		return accepted
	}
	if n := notify(m.payloads, notifyInvalidKEPayload); n != nil {
		e.invalidKE(sa, n)
		return accepted
	}
	if n := errorNotify(m.payloads); n != nil {
		e.fail(p, "IKE_SA_INIT refused: "+notifyName(n.typ)+hint(n.typ))
		return accepted
	}
	sap, ok1 := first[*saPayload](m.payloads)
	ke, ok2 := first[*kePayload](m.payloads)
	nonce, ok3 := first[*noncePayload](m.payloads)
	if !ok1 || !ok2 || !ok3 || m.spiR == 0 {
		return DropMalformed
	}
	if len(sap.proposals) != 1 || !single(sap.proposals[0]) {
		e.fail(p, "IKE_SA_INIT: the peer answered with more than one proposal or transform")
		return accepted
	}
	sel, ok := choose(sap.proposals, e.cfg.ike, sa.suite.dh)
	if !ok || ke.group != sa.suite.dh {
		e.fail(p, "IKE_SA_INIT: the peer chose a proposal that was not offered")
		return accepted
	}
	shared, err := sa.dh.shared(ke.data)
	if err != nil {
		e.fail(p, "IKE_SA_INIT: "+err.Error())
		return accepted
	}
	sa.req, sa.dh = nil, nil
	sa.spiR, sa.nr, sa.suite = m.spiR, nonce.data, sel.ikeSuite()
	sa.initMsgR = clone(b)
	sa.remote = from
	sa.lastRecv = e.now
	if err := sa.setKeys(deriveIKEKeys(sa.suite, skeyseed(nil, shared, sa.ni, sa.nr), sa.ni, sa.nr, sa.spiI, sa.spiR)); err != nil {
		e.fail(p, "IKE_SA_INIT: "+err.Error())
		return accepted
	}
	e.sendAuth(sa)
	return accepted
}

// invalidKE retries IKE_SA_INIT with the group the responder asks for, if
// one of the IKE proposals has it.
func (e *Engine) invalidKE(sa *ikeSA, n *notifyPayload) {
	p := sa.p
	if len(n.data) != 2 {
		e.fail(p, "IKE_SA_INIT refused: INVALID_KE_PAYLOAD without a group")
		return
	}
	group := binary.BigEndian.Uint16(n.data)
	if sa.invalidKE >= maxInvalidKE || !e.offersGroup(group) || group == sa.suite.dh {
		e.fail(p, fmt.Sprintf("IKE_SA_INIT refused: INVALID_KE_PAYLOAD asking for %s, which IKEProposals do not offer; add it", dhName(group)))
		return
	}
	sa.invalidKE++
	sa.req = nil
	e.log.Info("ike: peer asks for another Diffie-Hellman group", "peer", p.name, "group", dhName(group))
	if err := e.sendInit(sa, group); err != nil {
		e.fail(p, err.Error())
	}
}

func (e *Engine) offersGroup(g uint16) bool {
	for _, o := range e.cfg.ike {
		for _, a := range o.algs[transDH] {
			if a.id == g {
				return true
			}
		}
	}
	return false
}

// initRequest answers an IKE_SA_INIT request: with a cookie request when
// too many SAs are half open, INVALID_KE_PAYLOAD or NO_PROPOSAL_CHOSEN when
// the offer does not fit, otherwise with our half of the exchange. Nothing
// costly (no Diffie-Hellman, no state) is spent on a request before its
// cookie, when one is required, checks (RFC 7296 §2.6).
func (e *Engine) initRequest(from netip.AddrPort, m *message, b []byte) DropReason {
	p := e.peerByAddr(from.Addr())
	if p == nil {
		return DropUnknownPeer
	}
	if m.spiR != 0 || m.id != 0 || m.spiI == 0 {
		return DropMalformed
	}
	for _, sa := range e.sas {
		if sa.p == p && !sa.initiator && sa.spiI == m.spiI && sa.remote == from {
			if sa.state == saHalfOpen && bytes.Equal(sa.initMsgI, b) {
				e.send(from, sa.initMsgR)
			}
			return DropRetransmit
		}
	}
	sap, ok1 := first[*saPayload](m.payloads)
	ke, ok2 := first[*kePayload](m.payloads)
	nonce, ok3 := first[*noncePayload](m.payloads)
	if !ok1 || !ok2 || !ok3 {
		e.sendNotify(from, m, notifyInvalidSyntax, nil)
		return DropMalformed
	}
	halfOpen := e.halfOpen()
	if halfOpen >= e.cfg.cookieThreshold {
		n, ok := m.payloads[0].(*notifyPayload)
		if !ok || n.typ != notifyCookie {
			e.sendNotify(from, m, notifyCookie, e.cookie.make(e.now, nonce.data, from, m.spiI))
			return DropCookieRequired
		}
		if !e.cookie.valid(e.now, n.data, nonce.data, from, m.spiI) {
			e.sendNotify(from, m, notifyCookie, e.cookie.make(e.now, nonce.data, from, m.spiI))
			return DropInvalidCookie
		}
	}
	if halfOpen >= e.cfg.halfOpenLimit {
		return DropHalfOpenLimit
	}
	if !e.resolveSimultaneous(p, nonce.data) {
		return DropSimultaneous
	}
	sel, ok := choose(sap.proposals, e.cfg.ike, ke.group)
	if !ok {
		if other, ok := choose(sap.proposals, e.cfg.ike, 0); ok {
			// Not logged: anyone can send this from a peer's address;
			// the initiator logs the group it is asked for.
			g := other.algs[transDH].id
			e.sendNotify(from, m, notifyInvalidKEPayload, binary.BigEndian.AppendUint16(nil, g))
			return DropNoProposal
		}
		e.report(p, "IKE_SA_INIT: NO_PROPOSAL_CHOSEN sent: the peer's IKE proposals match none of IKEProposals ("+e.ikeNames()+")")
		e.sendNotify(from, m, notifyNoProposalChosen, nil)
		return DropNoProposal
	}
	k, err := newDH(ke.group)
	if err != nil {
		return DropBadKE
	}
	shared, err := k.shared(ke.data)
	if err != nil {
		return DropBadKE
	}
	sa := e.newSA(p, false, m.spiI)
	sa.state, sa.remote = saHalfOpen, from
	sa.suite, sa.ni, sa.nr = sel.ikeSuite(), nonce.data, newNonce()
	resp := &message{spiI: sa.spiI, spiR: sa.spiR, exchange: exchIKESAInit, flags: flagResponse}
	resp.payloads = append([]payload{
		&saPayload{proposals: []proposal{sel.proposal(nil)}},
		&kePayload{group: ke.group, data: k.public()},
		&noncePayload{data: sa.nr},
	}, natDetection(sa.spiI, sa.spiR, from)...)
	sa.initMsgI, sa.initMsgR = clone(b), resp.encode()
	sa.peerID = 1
	if err := sa.setKeys(deriveIKEKeys(sa.suite, skeyseed(nil, shared, sa.ni, sa.nr), sa.ni, sa.nr, sa.spiI, sa.spiR)); err != nil {
		e.removeSA(sa)
		return DropNoProposal
	}
	e.send(from, sa.initMsgR)
	return accepted
}

// resolveSimultaneous decides between our IKE_SA_INIT to p, if one is under
// way, and p's to us: the one with the lower initiator nonce is abandoned,
// by both sides alike. It reports whether p's request goes on.
func (e *Engine) resolveSimultaneous(p *peer, theirs []byte) bool {
	for _, sa := range e.sas {
		if sa.p != p || !sa.initiator || (sa.state != saInitSent && sa.state != saAuthSent) {
			continue
		}
		if bytes.Compare(sa.ni, theirs) > 0 {
			e.log.Debug("ike: both sides initiate; keeping ours", "peer", p.name)
			return false
		}
		e.log.Debug("ike: both sides initiate; keeping the peer's", "peer", p.name)
		e.removeSA(sa)
	}
	return true
}

// halfOpen counts the IKE SAs we answered that are not authenticated yet.
func (e *Engine) halfOpen() int {
	n := 0
	for _, sa := range e.sas {
		if sa.state == saHalfOpen {
			n++
		}
	}
	return n
}

func (e *Engine) ikeNames() string {
	names := make([]string, len(e.cfg.ike))
	for i, o := range e.cfg.ike {
		names[i] = o.name
	}
	return strings.Join(names, ", ")
}

// hint says what to check after the peer refused with an error notify.
func hint(typ uint16) string {
	switch typ {
	case notifyNoProposalChosen:
		return " (the peer accepts none of the proposals; compare IKEProposals and ESPProposals with its configuration)"
	case notifyAuthenticationFailed:
		return " (check the PSK on both sides)"
	case notifyTSUnacceptable:
		return " (the peer accepts none of LocalTS and RemoteTS; compare them with its configuration)"
	}
	return ""
}
