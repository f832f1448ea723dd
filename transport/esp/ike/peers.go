package ike

import (
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// maxPeers bounds peer numbers, which index a table: a mistaken number
// must not allocate gigabytes.
const maxPeers = 1 << 16

// SetPeer adds peer i, or changes it, and may be called from any goroutine
// before, while or after Run runs. Other peers and their SAs are not
// touched. A new peer starts as the peers of Config do: with no SA, set up
// at once if it initiates. For an existing peer:
//
//   - a new RemoteID or Initiate deletes its IKE SA, telling the peer, and
//     sets it up again;
//   - a new Endpoint alone keeps the SAs: messages go to the new address and
//     IKE_SA_INIT is accepted from it, and a liveness check goes out at once,
//     so that a remote that lost its state there is found dead and the SA is
//     set up again after the retransmissions (RFC 7296 §2.4);
//   - new LocalTS or RemoteTS make a new CHILD_SA with the new selectors on
//     the IKE SA (CREATE_CHILD_SA, RFC 7296 §1.3.1); the old one is deleted
//     once the new one is installed. Until the peer has the same change it
//     refuses the selectors or narrows them to the old ones; the old
//     CHILD_SA then carries the traffic on, and the change is tried again,
//     waiting RetransmitTimeout doubled for each try, at most 64 times. As
//     responder the engine takes what lies within the configured selectors.
//
// An invalid peer changes nothing; the error names the field as
// NewEngine's do.
func (e *Engine) SetPeer(i int, pc PeerConfig) error {
	ps, err := pc.validate(i)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.setPeer(i, ps, time.Now()); err != nil {
		return err
	}
	e.wakeRun()
	return nil
}

// RemovePeer forgets peer i: its IKE SAs are deleted, with a Delete sent
// and not waited for, and its CHILD_SAs removed from the data plane. It may
// be called from any goroutine.
func (e *Engine) RemovePeer(i int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.removePeer(i, time.Now()); err != nil {
		return err
	}
	e.wakeRun()
	return nil
}

// wakeRun makes Run recompute when its timers are due.
func (e *Engine) wakeRun() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Engine) setPeer(i int, ps peerSettings, now time.Time) error {
	if i < 0 || i >= maxPeers {
		return fmt.Errorf("ike: Peers[%d]: peer numbers run from 0 to %d", i, maxPeers-1)
	}
	for j, q := range e.peers {
		if q != nil && j != i && q.cfg.endpoint.Addr() == ps.endpoint.Addr() {
			return fmt.Errorf("ike: Peers[%d].Endpoint %v: address already used by Peers[%d]; peers are told apart by address", i, ps.endpoint, j)
		}
	}
	e.now = now
	defer e.publish()
	defer e.publishAddrs()
	p := e.peer(i)
	if p == nil {
		if i >= len(e.peers) {
			e.peers = append(e.peers, make([]*peer, i+1-len(e.peers))...)
		}
		p = newPeer(i, ps)
		e.peers[i] = p
		if e.running && ps.initiate {
			e.initiate(p)
		}
		return nil
	}
	old := p.cfg
	p.cfg, p.name = ps, newPeer(i, ps).name
	switch {
	case !sameID(old.remoteID, ps.remoteID) || old.initiate != ps.initiate:
		e.log.Info("ike: peer's identity or role changed; setting the IKE SA up again", "peer", p.name)
		e.forget(p)
		if e.running && ps.initiate {
			e.initiate(p)
		}
		return nil
	case old.endpoint != ps.endpoint:
		e.moved(p)
	}
	if !slices.Equal(old.localTS, ps.localTS) || !slices.Equal(old.remoteTS, ps.remoteTS) {
		p.tsAt, p.tsTries = e.now, 0
	}
	return nil
}

func (e *Engine) removePeer(i int, now time.Time) error {
	p := e.peer(i)
	if p == nil {
		return fmt.Errorf("ike: remove peer %d: no such peer", i)
	}
	e.now = now
	e.forget(p)
	e.peers[i] = nil
	for len(e.peers) > 0 && e.peers[len(e.peers)-1] == nil {
		e.peers = e.peers[:len(e.peers)-1]
	}
	e.publishAddrs()
	e.publish()
	return nil
}

// peer is peer number i, or nil.
func (e *Engine) peer(i int) *peer {
	if i < 0 || i >= len(e.peers) {
		return nil
	}
	return e.peers[i]
}

func sameID(a, b *identity) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.equal(*b)
}

// forget deletes every SA of p at once and stops its timers.
func (e *Engine) forget(p *peer) {
	for _, sa := range e.sas {
		if sa.p == p {
			e.dropSA(sa)
		}
	}
	p.failures, p.restartAt, p.tsAt, p.tsTries = 0, time.Time{}, time.Time{}, 0
}

// moved sends the SAs of p to its new endpoint and checks at once that the
// peer is alive there, unless a request already does.
func (e *Engine) moved(p *peer) {
	e.sendTo(p, p.cfg.endpoint)
	if sa := p.ike; sa != nil && sa.req == nil && len(sa.queue) == 0 {
		e.enqueue(sa, e.dpd)
	}
}

// changeTS starts replacing the CHILD_SA of p by one with the configured
// selectors, unless one has them already.
func (e *Engine) changeTS(p *peer) {
	switch {
	case e.tsCurrent(p):
		p.tsTries = 0
	case p.ike == nil || p.ike.state != saEstablished:
		e.retryTS(p)
	default:
		e.enqueue(p.ike, e.createForTS)
	}
}

// createForTS proposes a new CHILD_SA with the configured selectors on sa
// (RFC 7296 §1.3.1). Only once it is installed do the CHILD_SAs with other
// selectors go, so that their traffic has an SA throughout. A peer without
// the change refuses the selectors or narrows them to the old ones; then
// nothing changes here and the new CHILD_SA, if the peer made one, is
// deleted.
func (e *Engine) createForTS(sa *ikeSA) {
	p := sa.p
	if sa != p.ike || e.tsCurrent(p) {
		return
	}
	inSPI := e.newChildSPI()
	ni := newNonce()
	e.sendRequest(sa, exchCreateChildSA, []payload{
		&saPayload{proposals: proposals(e.cfg.esp, spiBytes(inSPI))},
		&noncePayload{data: ni},
		&tsPayload{selectors: selectors(p.cfg.localTS)},
		&tsPayload{responder: true, selectors: selectors(p.cfg.remoteTS)},
	}, &request{onReply: func(resp []payload) {
		defer e.tsAnswered(p)
		e.createdForTS(sa, inSPI, ni, resp)
	}})
}

// createdForTS takes the answer to createForTS.
func (e *Engine) createdForTS(sa *ikeSA, inSPI uint32, ni []byte, ps []payload) {
	p := sa.p
	nonce, ok := first[*noncePayload](ps)
	if n := errorNotify(ps); n != nil || !ok {
		e.freeSPI(inSPI)
		if n != nil && n.typ != notifyTSUnacceptable && n.typ != notifyTemporaryFailure {
			e.report(p, "CREATE_CHILD_SA for new traffic selectors refused: "+notifyName(n.typ)+hint(n.typ))
		}
		return
	}
	tsi, tsr := tsOf(ps, false), tsOf(ps, true)
	if tsi == nil || tsr == nil || !sameTS(tsi.selectors, p.cfg.localTS) || !sameTS(tsr.selectors, p.cfg.remoteTS) {
		e.log.Debug("ike: the peer narrowed the new traffic selectors; it has not got the change yet", "peer", p.name)
		e.enqueueFor(p, e.deleteUninstalled(inSPI))
		return
	}
	if err := e.initiatedChild(sa, ps, inSPI, ni, nonce.data); err != nil {
		e.report(p, "CREATE_CHILD_SA for new traffic selectors: "+err.Error())
		e.enqueueFor(p, e.deleteUninstalled(inSPI))
		return
	}
	for _, c := range p.ike.children {
		if c.state == childInstalled && !e.carriesTS(p, c) {
			c.state = childRekeyed
			e.enqueue(p.ike, e.deleteChild(c))
		}
	}
}

// sameTS reports whether the selectors cover exactly the prefixes ps.
func sameTS(sel []selector, ps []netip.Prefix) bool {
	got, ok := within(sel, ps)
	return ok && slices.Equal(got, ps)
}

// tsAnswered follows the peer's answer to a change of selectors: done if a
// CHILD_SA has them now, else tried again, since the peer is expected to
// get the same change soon.
func (e *Engine) tsAnswered(p *peer) {
	if e.tsCurrent(p) {
		p.tsTries = 0
		return
	}
	e.retryTS(p)
}

// retryTS plans the next check of p's selectors, waiting the retransmit
// timeout doubled for each try in a row, at most 64 times.
func (e *Engine) retryTS(p *peer) {
	p.tsAt = e.now.Add(e.cfg.retransmitTimeout << min(p.tsTries, 6))
	p.tsTries++
}

// tsCurrent reports whether a CHILD_SA of the IKE SA in use with p carries
// exactly the configured selectors.
func (e *Engine) tsCurrent(p *peer) bool {
	if p.ike == nil {
		return false
	}
	for _, c := range p.ike.children {
		if (c.state == childInstalled || c.state == childRekeying) && e.carriesTS(p, c) {
			return true
		}
	}
	return false
}

// carriesTS reports whether c has exactly the configured selectors of p.
func (e *Engine) carriesTS(p *peer, c *childSA) bool {
	return slices.Equal(c.LocalTS, p.cfg.localTS) && slices.Equal(c.RemoteTS, p.cfg.remoteTS)
}
