package ike

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// rekeyIKE rekeys the IKE SA in use (RFC 7296 §2.18) with a key exchange in
// group, 0 meaning the SA's own group.
func (e *Engine) rekeyIKE(group uint16) task {
	return func(sa *ikeSA) {
		if sa != sa.p.ike || sa.state != saEstablished {
			return
		}
		if group == 0 {
			group = sa.suite.dh
		}
		k, err := newDH(group)
		if err != nil {
			return
		}
		spi := e.newIKESPI()
		r := &request{ni: newNonce(), rekeyIKE: true}
		r.onReply = func(resp []payload) { e.ikeRekeyed(sa, r, spi, group, k, resp) }
		e.sendRequest(sa, exchCreateChildSA, []payload{
			&saPayload{proposals: proposals(e.cfg.ike, binary.BigEndian.AppendUint64(nil, spi))},
			&noncePayload{data: r.ni},
			&kePayload{group: group, data: k.public()},
		}, r)
	}
}

// ikeRekeyed takes the answer to our rekey of old. When the peer rekeyed
// old at the same time, the new IKE SA made with the lowest of the four
// nonces is redundant and deleted by its maker (RFC 7296 §2.8.2).
func (e *Engine) ikeRekeyed(old *ikeSA, r *request, spi uint64, group uint16, k dhKey, ps []payload) {
	p := old.p
	if n := notify(ps, notifyInvalidKEPayload); n != nil && len(n.data) == 2 {
		if g := binary.BigEndian.Uint16(n.data); g != group && e.offersGroup(g) && r.collision == nil {
			e.enqueue(old, e.rekeyIKE(g))
			return
		}
	}
	sa, err := e.rekeyedSA(old, r, spi, group, k, ps)
	if err != nil {
		if old == p.ike {
			old.rekeyAt = e.now.Add(rekeyRetry)
		}
		e.log.Warn("ike: IKE SA rekey failed", "peer", p.name, "err", err)
		return
	}
	if r.collision != nil && bytes.Compare(minNonce(r.ni, sa.nr), r.collision) < 0 {
		e.deleteIKE(sa)
		return
	}
	if p.ike != nil {
		e.replace(p.ike, sa)
	}
	if old.state != saDeleting {
		e.deleteIKE(old)
	}
}

// rekeyedSA makes the new IKE SA from the answer to our rekey of old.
func (e *Engine) rekeyedSA(old *ikeSA, r *request, spi uint64, group uint16, k dhKey, ps []payload) (*ikeSA, error) {
	if n := errorNotify(ps); n != nil {
		return nil, fmt.Errorf("refused: %s", notifyName(n.typ))
	}
	sap, ok1 := first[*saPayload](ps)
	ke, ok2 := first[*kePayload](ps)
	nonce, ok3 := first[*noncePayload](ps)
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("the answer lacks SA, KE or Nonce")
	}
	sel, ok := choose(sap.proposals, e.cfg.ike, group)
	if len(sap.proposals) != 1 || !single(sap.proposals[0]) || !ok || len(sel.spi) != 8 || ke.group != group {
		return nil, fmt.Errorf("the peer chose a proposal that was not offered")
	}
	shared, err := k.shared(ke.data)
	if err != nil {
		return nil, err
	}
	sa := &ikeSA{p: old.p, initiator: true, spiI: spi, spiR: spi64(sel.spi), state: saEstablished,
		remote: old.remote, suite: sel.ikeSuite(), ni: r.ni, nr: nonce.data,
		created: e.now, established: old.established, lastRecv: e.now}
	if err := sa.setKeys(deriveIKEKeys(sa.suite, skeyseed(old.keys.d, shared, sa.ni, sa.nr), sa.ni, sa.nr, sa.spiI, sa.spiR)); err != nil {
		return nil, err
	}
	e.sas[sa.spiI] = sa
	return sa, nil
}

// rekeyIKERequest answers the peer's rekey of sa, the IKE SA in use.
func (e *Engine) rekeyIKERequest(sa *ikeSA, ps []payload, sap *saPayload, ni []byte) []payload {
	p := sa.p
	ke, ok := first[*kePayload](ps)
	if !ok || sa.state != saEstablished {
		return []payload{&notifyPayload{typ: notifyInvalidSyntax}}
	}
	sel, ok := choose(sap.proposals, e.cfg.ike, ke.group)
	if !ok {
		if other, ok := choose(sap.proposals, e.cfg.ike, 0); ok {
			return []payload{&notifyPayload{typ: notifyInvalidKEPayload, data: binary.BigEndian.AppendUint16(nil, other.algs[transDH].id)}}
		}
		return []payload{&notifyPayload{typ: notifyNoProposalChosen}}
	}
	k, err := newDH(ke.group)
	if err != nil || len(sel.spi) != 8 {
		return []payload{&notifyPayload{typ: notifyInvalidSyntax}}
	}
	shared, err := k.shared(ke.data)
	if err != nil {
		return []payload{&notifyPayload{typ: notifyInvalidSyntax}}
	}
	ns := &ikeSA{p: p, spiI: spi64(sel.spi), spiR: e.newIKESPI(), state: saEstablished,
		remote: sa.remote, suite: sel.ikeSuite(), ni: ni, nr: newNonce(),
		created: e.now, established: sa.established, lastRecv: e.now}
	if err := ns.setKeys(deriveIKEKeys(ns.suite, skeyseed(sa.keys.d, shared, ns.ni, ns.nr), ns.ni, ns.nr, ns.spiI, ns.spiR)); err != nil {
		return []payload{&notifyPayload{typ: notifyInvalidSyntax}}
	}
	e.sas[ns.spiR] = ns
	if r := sa.req; r != nil && r.rekeyIKE {
		r.collision = minNonce(ns.ni, ns.nr)
	}
	e.replace(sa, ns)
	return []payload{
		&saPayload{proposals: []proposal{sel.proposal(binary.BigEndian.AppendUint64(nil, ns.spiR))}},
		&noncePayload{data: ns.nr},
		&kePayload{group: ke.group, data: k.public()},
	}
}

// replace makes to the IKE SA in use instead of from: the CHILD_SAs and
// queued requests move over, and from waits for its Delete.
func (e *Engine) replace(from, to *ikeSA) {
	p := from.p
	for _, c := range from.children {
		c.ike = to
	}
	to.children = append(to.children, from.children...)
	from.children = nil
	to.queue = append(to.queue, from.queue...)
	from.queue = nil
	from.state, from.replaced = saRekeyed, e.now
	to.rekeyAt = e.jittered(e.cfg.ikeRekey)
	p.ike = to
	e.log.Info("ike: IKE SA rekeyed", "peer", p.name,
		"old_spi_i", fmt.Sprintf("%016x", from.spiI), "old_spi_r", fmt.Sprintf("%016x", from.spiR),
		"spi_i", fmt.Sprintf("%016x", to.spiI), "spi_r", fmt.Sprintf("%016x", to.spiR))
	e.next(to)
}
