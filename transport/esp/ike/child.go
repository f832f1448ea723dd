package ike

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

type childState int

const (
	childInstalled childState = iota
	childRekeying             // our rekey of it is under way
	childRekeyed              // replaced; its Delete is under way or awaited
	childDeleting             // we sent its Delete
)

// childSA is a CHILD_SA installed in the data plane.
type childSA struct {
	ChildSA
	ike       *ikeSA // the IKE SA it is managed by
	state     childState
	installed time.Time
	rekeyAt   time.Time // zero while a rekey is queued or running
}

// rekeyRetry is how long a CHILD_SA or IKE SA rekey that the peer turned
// down waits before it is tried again.
const rekeyRetry = 10 * time.Second

// install hands c to the data plane and to the IKE SA in use with its peer,
// which is sa unless sa was rekeyed while the exchange ran.
func (e *Engine) install(sa *ikeSA, c *childSA) error {
	if err := e.dp.InstallChild(c.ChildSA); err != nil {
		return fmt.Errorf("the data plane refused it: %w", err)
	}
	owner := sa
	if sa.p.ike != nil {
		owner = sa.p.ike
	}
	c.ike, c.installed, c.rekeyAt = owner, e.now, e.jittered(e.cfg.childRekey)
	owner.children = append(owner.children, c)
	e.log.Info("ike: CHILD_SA installed", "peer", sa.p.name, "in_spi", fmt.Sprintf("%08x", c.InSPI),
		"out_spi", fmt.Sprintf("%08x", c.OutSPI), "transform", c.Transform.String(),
		"local_ts", fmt.Sprint(c.LocalTS), "remote_ts", fmt.Sprint(c.RemoteTS))
	return nil
}

// removeChild removes c from the data plane and from its IKE SA.
func (e *Engine) removeChild(c *childSA) {
	c.ike.children = slices.DeleteFunc(c.ike.children, func(x *childSA) bool { return x == c })
	e.dp.DeleteChild(c.Peer, c.InSPI)
	e.freeSPI(c.InSPI)
	e.log.Info("ike: CHILD_SA deleted", "peer", c.ike.p.name, "in_spi", fmt.Sprintf("%08x", c.InSPI), "out_spi", fmt.Sprintf("%08x", c.OutSPI))
}

func (e *Engine) freeSPI(s uint32) { delete(e.spis, s) }

// childByOut finds the CHILD_SA of p whose outbound SPI the 4 bytes spi
// are: the SPI by which the peer names it.
func (e *Engine) childByOut(p *peer, spi []byte) *childSA {
	if len(spi) != 4 {
		return nil
	}
	out := binary.BigEndian.Uint32(spi)
	for _, sa := range e.sas {
		if sa.p != p {
			continue
		}
		for _, c := range sa.children {
			if c.OutSPI == out {
				return c
			}
		}
	}
	return nil
}

// acceptChild negotiates, as responder, the CHILD_SA that the payloads ps
// of a request propose, with the exchange's nonces. It returns the SA, TSi
// and TSr payloads of the answer, or an error notify type and the reason.
func (e *Engine) acceptChild(sa *ikeSA, ps []payload, ni, nr []byte) ([]payload, uint16, string) {
	p := sa.p
	sap, ok := first[*saPayload](ps)
	tsi, tsr := tsOf(ps, false), tsOf(ps, true)
	if !ok || tsi == nil || tsr == nil {
		return nil, notifyInvalidSyntax, "the request lacks its SA or TS payloads"
	}
	if _, pfs := first[*kePayload](ps); pfs {
		return nil, notifyNoProposalChosen, "the peer asks for PFS, which CHILD_SAs here are keyed without; remove the DH group from its ESP proposals"
	}
	sel, ok := choose(sap.proposals, e.cfg.esp, 0)
	if !ok || len(sel.spi) != 4 {
		return nil, notifyNoProposalChosen, "NO_PROPOSAL_CHOSEN sent: the peer's ESP proposals match none of ESPProposals"
	}
	remote, local := narrow(tsi.selectors, p.cfg.remoteTS), narrow(tsr.selectors, p.cfg.localTS)
	if len(remote) == 0 || len(local) == 0 {
		return nil, notifyTSUnacceptable, "TS_UNACCEPTABLE sent: the peer's traffic selectors lie outside LocalTS and RemoteTS, or name single protocols or ports"
	}
	t := sel.childTransform()
	in, out := childKeys(t, sa.keys.d, ni, nr)
	c := &childSA{ChildSA: ChildSA{
		Peer: p.idx, InSPI: e.newChildSPI(), OutSPI: binary.BigEndian.Uint32(sel.spi),
		Transform: t, In: in, Out: out, LocalTS: local, RemoteTS: remote,
		Deferred: true,
	}}
	if err := e.install(sa, c); err != nil {
		e.freeSPI(c.InSPI)
		return nil, notifyNoProposalChosen, err.Error()
	}
	return []payload{
		&saPayload{proposals: []proposal{sel.proposal(spiBytes(c.InSPI))}},
		&tsPayload{selectors: selectors(remote)},
		&tsPayload{responder: true, selectors: selectors(local)},
	}, 0, ""
}

// initiatedChild takes the CHILD_SA of the answer ps to our request, which
// offered inbound SPI inSPI, and installs it. On error inSPI is still
// reserved.
func (e *Engine) initiatedChild(sa *ikeSA, ps []payload, inSPI uint32, ni, nr []byte) error {
	p := sa.p
	sap, ok := first[*saPayload](ps)
	tsi, tsr := tsOf(ps, false), tsOf(ps, true)
	if !ok || tsi == nil || tsr == nil {
		return fmt.Errorf("the answer lacks its SA or TS payloads")
	}
	sel, ok := choose(sap.proposals, e.cfg.esp, 0)
	if len(sap.proposals) != 1 || !single(sap.proposals[0]) || !ok || len(sel.spi) != 4 {
		return fmt.Errorf("the peer chose ESP transforms that were not offered")
	}
	local, ok1 := within(tsi.selectors, p.cfg.localTS)
	remote, ok2 := within(tsr.selectors, p.cfg.remoteTS)
	if !ok1 || !ok2 {
		return fmt.Errorf("the peer narrowed the traffic selectors beyond LocalTS and RemoteTS or to single protocols or ports")
	}
	t := sel.childTransform()
	out, in := childKeys(t, sa.keys.d, ni, nr)
	c := &childSA{ChildSA: ChildSA{
		Peer: p.idx, InSPI: inSPI, OutSPI: binary.BigEndian.Uint32(sel.spi),
		Transform: t, In: in, Out: out, LocalTS: local, RemoteTS: remote,
	}}
	return e.install(sa, c)
}

// createChildRequest answers CREATE_CHILD_SA: an IKE SA rekey, a CHILD_SA
// rekey (REKEY_SA), or a new CHILD_SA.
func (e *Engine) createChildRequest(sa *ikeSA, m *message) []payload {
	p := sa.p
	if sa != p.ike {
		return []payload{&notifyPayload{typ: notifyTemporaryFailure}}
	}
	sap, ok1 := first[*saPayload](m.payloads)
	nonce, ok2 := first[*noncePayload](m.payloads)
	if !ok1 || !ok2 {
		return []payload{&notifyPayload{typ: notifyInvalidSyntax}}
	}
	if sap.proposals[0].protocol == protoIKE {
		return e.rekeyIKERequest(sa, m.payloads, sap, nonce.data)
	}
	var old *childSA
	if n := notify(m.payloads, notifyRekeySA); n != nil {
		if old = e.childByOut(p, n.spi); old == nil {
			return []payload{&notifyPayload{protocol: protoESP, spi: n.spi, typ: notifyChildSANotFound}}
		}
		if old.state != childInstalled && old.state != childRekeying {
			return []payload{&notifyPayload{typ: notifyTemporaryFailure}}
		}
	}
	nr := newNonce()
	resp, errType, reason := e.acceptChild(sa, m.payloads, nonce.data, nr)
	if errType != 0 {
		e.report(p, "CREATE_CHILD_SA: "+reason)
		return []payload{&notifyPayload{typ: errType}}
	}
	if old != nil {
		if r := old.ike.req; r != nil && r.rekeyChild == old {
			r.collision = minNonce(nonce.data, nr)
		} else {
			old.state = childRekeyed // the peer deletes it next
		}
	}
	return slices.Insert(resp, 1, payload(&noncePayload{data: nr}))
}

// rekeyChild rekeys c (RFC 7296 §2.8): a new CHILD_SA with the same
// selectors, installed before c is deleted.
func (e *Engine) rekeyChild(c *childSA) task {
	return func(sa *ikeSA) {
		if c.state != childInstalled || c.ike != sa {
			return
		}
		c.state = childRekeying
		inSPI := e.newChildSPI()
		r := &request{ni: newNonce(), rekeyChild: c}
		r.onReply = func(resp []payload) { e.childRekeyed(sa, c, r, inSPI, resp) }
		e.sendRequest(sa, exchCreateChildSA, []payload{
			&notifyPayload{protocol: protoESP, spi: spiBytes(c.InSPI), typ: notifyRekeySA},
			&saPayload{proposals: proposals(e.cfg.esp, spiBytes(inSPI))},
			&noncePayload{data: r.ni},
			&tsPayload{selectors: selectors(c.LocalTS)},
			&tsPayload{responder: true, selectors: selectors(c.RemoteTS)},
		}, r)
	}
}

// childRekeyed takes the answer to our rekey of c. When the peer rekeyed c
// at the same time, the new CHILD_SA made with the lowest of the four
// nonces is redundant and deleted by the side that made it; the other side
// deletes c (RFC 7296 §2.8.1).
func (e *Engine) childRekeyed(sa *ikeSA, c *childSA, r *request, inSPI uint32, ps []payload) {
	p := sa.p
	nonce, ok := first[*noncePayload](ps)
	if n := errorNotify(ps); n != nil || !ok {
		e.freeSPI(inSPI)
		c.state = childInstalled
		if r.collision != nil {
			c.state = childRekeyed
		}
		c.rekeyAt = e.now.Add(rekeyRetry)
		if n != nil && n.typ != notifyTemporaryFailure && n.typ != notifyChildSANotFound {
			e.report(p, "CHILD_SA rekey refused: "+notifyName(n.typ)+hint(n.typ))
		}
		return
	}
	if r.collision != nil && bytes.Compare(minNonce(r.ni, nonce.data), r.collision) < 0 {
		c.state = childRekeyed
		e.enqueueFor(p, e.deleteUninstalled(inSPI))
		return
	}
	if err := e.initiatedChild(sa, ps, inSPI, r.ni, nonce.data); err != nil {
		e.report(p, "CHILD_SA rekey: "+err.Error())
		c.state, c.rekeyAt = childInstalled, e.now.Add(rekeyRetry)
		e.enqueueFor(p, e.deleteUninstalled(inSPI))
		return
	}
	c.state = childRekeyed
	e.enqueueFor(p, e.deleteChild(c))
}

// deleteChild deletes c, telling the peer first (RFC 7296 §1.4.1).
func (e *Engine) deleteChild(c *childSA) task {
	return func(sa *ikeSA) {
		if c.ike != sa || !slices.Contains(sa.children, c) {
			return
		}
		c.state = childDeleting
		e.sendRequest(sa, exchInformational, []payload{espDelete(c.InSPI)}, &request{onReply: func([]payload) {
			if slices.Contains(c.ike.children, c) {
				e.removeChild(c)
			}
		}})
	}
}

// deleteUninstalled deletes at the peer a CHILD_SA that we never
// installed, whose inbound SPI would have been inSPI.
func (e *Engine) deleteUninstalled(inSPI uint32) task {
	return func(sa *ikeSA) {
		e.sendRequest(sa, exchInformational, []payload{espDelete(inSPI)}, &request{onReply: func([]payload) { e.freeSPI(inSPI) }})
	}
}

func espDelete(spi uint32) *deletePayload {
	return &deletePayload{protocol: protoESP, spiSize: 4, spis: [][]byte{spiBytes(spi)}}
}

// enqueueFor queues t on the IKE SA in use with p; without one there is
// nothing left to tell the peer.
func (e *Engine) enqueueFor(p *peer, t task) {
	if p.ike != nil {
		e.enqueue(p.ike, t)
	}
}

func minNonce(a, b []byte) []byte {
	if bytes.Compare(a, b) <= 0 {
		return a
	}
	return b
}
