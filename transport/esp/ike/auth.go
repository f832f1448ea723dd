package ike

import (
	"crypto/hmac"
	"fmt"
	"time"
)

// authFailed is the error of a peer that refused our AUTH, the PSK being
// the only credential (RFC 7296 §2.21.2).
const authFailed = "authentication failed: AUTHENTICATION_FAILED (check the PSK on both sides)"

// sendAuth sends IKE_AUTH: our identity and PSK proof with the first
// CHILD_SA for the configured traffic selectors (RFC 7296 §1.2).
func (e *Engine) sendAuth(sa *ikeSA) {
	p := sa.p
	sa.state = saAuthSent
	sa.firstChild = e.newChildSPI()
	id := &idPayload{id: e.cfg.localID}
	ps := []payload{id}
	if p.ike == nil {
		// Anything the peer still holds from us is stale (§2.4).
		ps = append(ps, &notifyPayload{typ: notifyInitialContact})
	}
	if p.cfg.remoteID != nil {
		ps = append(ps, &idPayload{responder: true, id: *p.cfg.remoteID})
	}
	ps = append(ps,
		&authPayload{method: authSharedKeyMIC, data: pskAuth(e.cfg.psk, sa.initMsgI, sa.nr, sa.keys.pi, id)},
		&saPayload{proposals: proposals(e.cfg.esp, spiBytes(sa.firstChild))},
		&tsPayload{selectors: selectors(p.cfg.localTS)},
		&tsPayload{responder: true, selectors: selectors(p.cfg.remoteTS)})
	e.sendRequest(sa, exchIKEAuth, ps, &request{onReply: func(resp []payload) { e.authResponse(sa, resp) }})
}

// authResponse checks the responder's AUTH and takes the first CHILD_SA.
func (e *Engine) authResponse(sa *ikeSA, ps []payload) {
	p := sa.p
	if n := notify(ps, notifyAuthenticationFailed); n != nil {
		e.freeSPI(sa.firstChild)
		e.fail(p, authFailed)
		return
	}
	idr, auth := idOf(ps, true), firstAuth(ps)
	if idr == nil || auth == nil {
		e.freeSPI(sa.firstChild)
		reason := "IKE_AUTH: the peer answered without IDr and AUTH"
		if n := errorNotify(ps); n != nil {
			reason = "IKE_AUTH refused: " + notifyName(n.typ) + hint(n.typ)
		}
		e.fail(p, reason)
		return
	}
	if p.cfg.remoteID != nil && !idr.id.equal(*p.cfg.remoteID) {
		e.freeSPI(sa.firstChild)
		e.refuseAuth(sa, "authentication failed: the peer identifies as "+idr.id.String()+
			", not "+p.cfg.remoteID.String()+" (check Peers[].RemoteID and the peer's own identity)")
		return
	}
	want := pskAuth(e.cfg.psk, sa.initMsgR, sa.ni, sa.keys.pr, idr)
	if auth.method != authSharedKeyMIC || !hmac.Equal(auth.data, want) {
		e.freeSPI(sa.firstChild)
		e.refuseAuth(sa, "authentication failed: the peer's AUTH does not match the PSK (check the PSK on both sides)")
		return
	}
	e.markEstablished(sa, idr.id)
	if n := errorNotify(ps); n != nil {
		e.freeSPI(sa.firstChild)
		e.childFailed(sa, "IKE_AUTH: no CHILD_SA: "+notifyName(n.typ)+hint(n.typ))
		return
	}
	if err := e.initiatedChild(sa, ps, sa.firstChild, sa.ni, sa.nr); err != nil {
		e.childFailed(sa, "IKE_AUTH: no CHILD_SA: "+err.Error())
	}
}

// refuseAuth tells the peer that its AUTH or identity is refused, in an
// INFORMATIONAL sent once (RFC 7296 §2.21.2), and fails the peer.
func (e *Engine) refuseAuth(sa *ikeSA, reason string) {
	e.send(sa.remote, sa.seal(exchInformational, sa.nextID, false, []payload{&notifyPayload{typ: notifyAuthenticationFailed}}))
	e.fail(sa.p, reason)
}

// childFailed handles an IKE SA whose first CHILD_SA could not be made: it
// carries nothing, so it is deleted, and set up again later if this side
// initiates.
func (e *Engine) childFailed(sa *ikeSA, reason string) {
	p := sa.p
	e.report(p, reason)
	e.deleteIKE(sa)
	e.scheduleRestart(p)
}

// authRequest answers IKE_AUTH: it checks the initiator's identity and
// AUTH, then negotiates the first CHILD_SA. A refused peer's half-open SA
// is removed once the answer is sent.
func (e *Engine) authRequest(sa *ikeSA, m *message) ([]payload, func()) {
	p := sa.p
	if sa.state != saHalfOpen {
		return []payload{&notifyPayload{typ: notifyInvalidSyntax}}, nil
	}
	idi, auth := idOf(m.payloads, false), firstAuth(m.payloads)
	if idi == nil || auth == nil {
		return e.authRefused(sa, notifyInvalidSyntax, "IKE_AUTH without IDi and AUTH (only PSK authentication is supported)")
	}
	if p.cfg.remoteID != nil && !idi.id.equal(*p.cfg.remoteID) {
		return e.authRefused(sa, notifyAuthenticationFailed, "authentication failed: the peer identifies as "+idi.id.String()+
			", not "+p.cfg.remoteID.String()+" (check Peers[].RemoteID and the peer's own identity)")
	}
	if idr := idOf(m.payloads, true); idr != nil && !idr.id.equal(e.cfg.localID) {
		return e.authRefused(sa, notifyAuthenticationFailed, "authentication failed: the peer expects us to be "+idr.id.String()+
			", LocalID is "+e.cfg.localID.String()+" (align LocalID with the peer's remote identity)")
	}
	want := pskAuth(e.cfg.psk, sa.initMsgI, sa.nr, sa.keys.pi, idi)
	if auth.method != authSharedKeyMIC || !hmac.Equal(auth.data, want) {
		return e.authRefused(sa, notifyAuthenticationFailed, "authentication failed: the peer's AUTH does not match the PSK, AUTHENTICATION_FAILED sent (check the PSK on both sides)")
	}
	if notify(m.payloads, notifyInitialContact) != nil {
		for _, other := range e.sas {
			if other.p == p && other != sa {
				e.removeSA(other)
			}
		}
	}
	id := &idPayload{responder: true, id: e.cfg.localID}
	resp := []payload{id, &authPayload{method: authSharedKeyMIC, data: pskAuth(e.cfg.psk, sa.initMsgR, sa.ni, sa.keys.pr, id)}}
	e.markEstablished(sa, idi.id)
	child, errType, reason := e.acceptChild(sa, m.payloads, sa.ni, sa.nr)
	if errType != 0 {
		e.report(p, "IKE_AUTH: no CHILD_SA: "+reason)
		return append(resp, &notifyPayload{typ: errType}), nil
	}
	return append(resp, child...), nil
}

// authRefused answers IKE_AUTH with the error notify typ and removes sa
// after the answer is sent.
func (e *Engine) authRefused(sa *ikeSA, typ uint16, reason string) ([]payload, func()) {
	p := sa.p
	e.report(p, reason)
	return []payload{&notifyPayload{typ: typ}}, func() {
		e.removeSA(sa)
		e.scheduleRestart(p)
	}
}

// markEstablished makes the authenticated sa the IKE SA in use with its
// peer.
func (e *Engine) markEstablished(sa *ikeSA, remote identity) {
	p := sa.p
	sa.state, sa.established = saEstablished, e.now
	sa.initMsgI, sa.initMsgR = nil, nil // the AUTH payloads are done
	sa.rekeyAt = e.jittered(e.cfg.ikeRekey)
	if old := p.ike; old != nil && old != sa && old.state == saEstablished {
		// The peer set up a new IKE SA beside the old one (strongSwan's
		// reauthentication does): the old one and its CHILD_SAs go.
		e.deleteIKE(old)
	}
	p.ike, p.lastErr, p.failures, p.restartAt = sa, "", 0, time.Time{}
	p.statsAt = e.now.Add(statsInterval)
	role := "responder"
	if sa.initiator {
		role = "initiator"
	}
	e.log.Info("ike: IKE SA established", "peer", p.name, "remote_id", remote.String(), "role", role,
		"spi_i", fmt.Sprintf("%016x", sa.spiI), "spi_r", fmt.Sprintf("%016x", sa.spiR), "suite", sa.suite.String())
}

func firstAuth(ps []payload) *authPayload {
	a, _ := first[*authPayload](ps)
	return a
}
