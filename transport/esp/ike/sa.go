package ike

import (
	"net/netip"
	"slices"
	"strconv"
	"time"
)

type saState int

const (
	saInitSent    saState = iota // we sent IKE_SA_INIT
	saAuthSent                   // we sent IKE_AUTH
	saHalfOpen                   // we answered IKE_SA_INIT and wait for IKE_AUTH
	saEstablished                // authenticated
	saRekeyed                    // replaced by a rekey; waiting for its Delete
	saDeleting                   // we sent its Delete
)

// ikeSA is one IKE SA, from the first IKE_SA_INIT to its deletion.
type ikeSA struct {
	p          *peer
	spiI, spiR uint64
	initiator  bool // we are its original initiator
	state      saState
	remote     netip.AddrPort
	suite      ikeSuite
	keys       ikeKeys
	in, out    skCipher // peer to us, us to peer; nil before keys exist

	// IKE_SA_INIT and IKE_AUTH.
	ni, nr             []byte
	dh                 dhKey
	initMsgI, initMsgR []byte // the IKE_SA_INIT request and response as sent
	cookie             []byte
	invalidKE, cookies int    // INVALID_KE_PAYLOAD and COOKIE answers taken
	firstChild         uint32 // inbound SPI offered in IKE_AUTH

	// Message IDs (RFC 7296 §2.2), with a window of one each way.
	nextID   uint32   // of our next request
	peerID   uint32   // expected of the peer's next request
	lastResp []byte   // our answer to the peer's request peerID-1
	req      *request // our request awaiting its answer
	queue    []task   // our requests waiting for the window

	children []*childSA

	created, established time.Time
	rekeyAt              time.Time // zero while a rekey is queued or running
	lastRecv             time.Time // of the last message that authenticated
	replaced             time.Time // when it was rekeyed
}

// task starts one exchange on sa, or sends nothing when what it was queued
// for no longer needs doing.
type task func(sa *ikeSA)

// request is a request of ours that waits for its answer.
type request struct {
	id       uint32
	exchange uint8
	msg      []byte
	due      time.Time // of the next retransmission
	sent     int
	onReply  func(resp []payload)

	// Rekey collisions (RFC 7296 §2.8.1): the nonce we sent, what the
	// request rekeys, and the lower nonce of a rekey of the same SA that
	// the peer started while this one was under way.
	ni         []byte
	rekeyChild *childSA
	rekeyIKE   bool
	collision  []byte
}

func (sa *ikeSA) localSPI() uint64 {
	if sa.initiator {
		return sa.spiI
	}
	return sa.spiR
}

func (sa *ikeSA) remoteSPI() uint64 {
	if sa.initiator {
		return sa.spiR
	}
	return sa.spiI
}

// setKeys derives the ciphers of sa from its keys.
func (sa *ikeSA) setKeys(k ikeKeys) error {
	sa.keys = k
	ei, ai, er, ar := k.ei, k.ai, k.er, k.ar
	if !sa.initiator {
		ei, ai, er, ar = er, ar, ei, ai
	}
	out, err := newSKCipher(sa.suite, ei, ai)
	if err != nil {
		return err
	}
	in, err := newSKCipher(sa.suite, er, ar)
	if err != nil {
		return err
	}
	sa.out, sa.in = out, in
	return nil
}

// seal encodes an encrypted message of sa.
func (sa *ikeSA) seal(exchange uint8, id uint32, response bool, ps []payload) []byte {
	m := &message{spiI: sa.spiI, spiR: sa.spiR, exchange: exchange, id: id}
	if sa.initiator {
		m.flags |= flagInitiator
	}
	if response {
		m.flags |= flagResponse
	}
	return sealMessage(m, ps, sa.out)
}

// newSA registers a new IKE SA with p under a fresh local SPI.
func (e *Engine) newSA(p *peer, initiator bool, spiI uint64) *ikeSA {
	sa := &ikeSA{p: p, initiator: initiator, spiI: spiI, remote: p.cfg.endpoint, created: e.now, lastRecv: e.now}
	if initiator {
		sa.spiI = e.newIKESPI()
	} else {
		sa.spiR = e.newIKESPI()
	}
	e.sas[sa.localSPI()] = sa
	return sa
}

// sendRequest sends a request of sa and waits for the answer, which
// onReply of r gets.
func (e *Engine) sendRequest(sa *ikeSA, exchange uint8, ps []payload, r *request) {
	r.id, r.exchange = sa.nextID, exchange
	sa.nextID++
	r.msg = sa.seal(exchange, r.id, false, ps)
	e.transmit(sa, r)
}

// transmit sends r for the first time.
func (e *Engine) transmit(sa *ikeSA, r *request) {
	r.sent, r.due = 1, e.now.Add(e.cfg.retransmitTimeout)
	sa.req = r
	e.send(sa.remote, r.msg)
}

// enqueue adds t to sa's requests and starts it if the window is free.
func (e *Engine) enqueue(sa *ikeSA, t task) {
	sa.queue = append(sa.queue, t)
	e.next(sa)
}

// next starts queued requests of sa until one is under way.
func (e *Engine) next(sa *ikeSA) {
	for sa.req == nil && len(sa.queue) > 0 && (sa.state == saEstablished || sa.state == saRekeyed) {
		t := sa.queue[0]
		sa.queue = slices.Delete(sa.queue, 0, 1)
		t(sa)
	}
}

// response hands the answer m to the request of sa awaiting it.
func (e *Engine) response(sa *ikeSA, m *message) DropReason {
	r := sa.req
	if r == nil || r.id != m.id || r.exchange != m.exchange {
		return DropUnexpectedID
	}
	sa.req = nil
	r.onReply(m.payloads)
	if e.sas[sa.localSPI()] == sa {
		e.next(sa)
	}
	return accepted
}

// request handles the peer's request m on sa: a new one is answered, the
// last one again gets the answer already sent (RFC 7296 §2.1), any other is
// dropped.
func (e *Engine) request(sa *ikeSA, from netip.AddrPort, m *message) DropReason {
	switch {
	case m.id == sa.peerID:
	case m.id+1 == sa.peerID && sa.lastResp != nil:
		e.send(from, sa.lastResp)
		return DropRetransmit
	default:
		return DropUnexpectedID
	}
	var (
		resp  []payload
		after func()
	)
	switch m.exchange {
	case exchIKEAuth:
		resp, after = e.authRequest(sa, m)
	case exchCreateChildSA:
		resp = e.createChildRequest(sa, m)
	case exchInformational:
		resp, after = e.informationalRequest(sa, m)
	default:
		return DropBadExchange
	}
	e.respond(sa, from, m, resp)
	if after != nil {
		after()
	}
	if e.sas[sa.localSPI()] == sa {
		e.next(sa)
	}
	return accepted
}

// respond sends the answer to request m and keeps it for retransmission.
func (e *Engine) respond(sa *ikeSA, to netip.AddrPort, m *message, ps []payload) {
	sa.lastResp = sa.seal(m.exchange, m.id, true, ps)
	sa.peerID = m.id + 1
	e.send(to, sa.lastResp)
}

// saTimers retransmits, gives up on a silent peer, expires half-open and
// replaced SAs, and starts rekeys and liveness checks. It returns when it
// next needs to run for sa.
func (e *Engine) saTimers(sa *ikeSA) time.Time {
	if r := sa.req; r != nil && !e.now.Before(r.due) {
		if r.sent >= e.cfg.retransmitTries {
			e.giveUp(sa, r)
			return time.Time{}
		}
		e.send(sa.remote, r.msg)
		r.sent++
		r.due = e.now.Add(e.cfg.retransmitTimeout << (r.sent - 1))
	}
	next := time.Time{}
	if sa.req != nil {
		next = sa.req.due
	}
	switch sa.state {
	case saHalfOpen:
		if expiry := sa.created.Add(e.giveUpAfter()); e.now.Before(expiry) {
			return earliest(next, expiry)
		}
		e.log.Debug("ike: half-open IKE SA expired", "peer", sa.p.name)
		e.removeSA(sa)
		return time.Time{}
	case saRekeyed:
		if expiry := sa.replaced.Add(e.giveUpAfter()); e.now.Before(expiry) || sa.req != nil {
			return earliest(next, expiry)
		}
		e.removeSA(sa)
		return time.Time{}
	case saEstablished:
		if sa.p.ike != sa {
			return next
		}
		return earliest(next, e.inUseTimers(sa))
	}
	return next
}

// inUseTimers runs the timers of the IKE SA in use with a peer.
func (e *Engine) inUseTimers(sa *ikeSA) time.Time {
	next := time.Time{}
	if !sa.rekeyAt.IsZero() {
		if e.now.Before(sa.rekeyAt) {
			next = sa.rekeyAt
		} else {
			sa.rekeyAt = time.Time{}
			e.enqueue(sa, e.rekeyIKE(0))
		}
	}
	for _, c := range sa.children {
		if c.state != childInstalled || c.rekeyAt.IsZero() {
			continue
		}
		if e.now.Before(c.rekeyAt) {
			next = earliest(next, c.rekeyAt)
			continue
		}
		c.rekeyAt = time.Time{}
		e.enqueue(sa, e.rekeyChild(c))
	}
	if sa.req == nil && len(sa.queue) == 0 {
		live := e.lastHeard(sa).Add(e.cfg.dpd)
		if e.now.Before(live) {
			return earliest(next, live)
		}
		e.enqueue(sa, e.dpd)
	}
	return next
}

// lastHeard is when the peer of sa last showed it is alive: an IKE message
// or an ESP packet on one of its CHILD_SAs.
func (e *Engine) lastHeard(sa *ikeSA) time.Time {
	t := sa.lastRecv
	for _, c := range sa.children {
		if st, ok := e.dp.Stats(sa.p.idx, c.InSPI); ok && st.LastIn != 0 {
			if in := time.Unix(0, st.LastIn); in.After(t) {
				t = in
			}
		}
	}
	return t
}

// giveUpAfter is how long a request is retransmitted before the peer is
// declared dead: the sum of the doubling timeouts.
func (e *Engine) giveUpAfter() time.Duration {
	return e.cfg.retransmitTimeout * (1<<e.cfg.retransmitTries - 1)
}

// giveUp handles a request of sa that was never answered.
func (e *Engine) giveUp(sa *ikeSA, r *request) {
	sa.req = nil
	p := sa.p
	if sa != p.ike && (sa.state == saRekeyed || sa.state == saDeleting || sa.state == saEstablished) {
		e.removeSA(sa) // a replaced or redundant SA: the one in use decides
		return
	}
	e.fail(p, "no answer to "+exchangeName(r.exchange)+" after "+strconv.Itoa(e.cfg.retransmitTries)+
		" transmissions (is the peer up and reachable on UDP port "+strconv.Itoa(int(sa.remote.Port()))+"?)")
}

func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

func exchangeName(x uint8) string {
	switch x {
	case exchIKESAInit:
		return "IKE_SA_INIT"
	case exchIKEAuth:
		return "IKE_AUTH"
	case exchCreateChildSA:
		return "CREATE_CHILD_SA"
	case exchInformational:
		return "INFORMATIONAL"
	}
	return "exchange " + strconv.Itoa(int(x))
}
