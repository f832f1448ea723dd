package ike

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// inboxSize is how many received messages wait for Run; more are dropped,
// as a socket drops what its owner does not read.
const inboxSize = 256

// statsInterval is how often the data plane's counters of each CHILD_SA are
// read to rekey before a byte or sequence number limit.
const statsInterval = 10 * time.Second

// Sequence numbers at which a CHILD_SA is rekeyed: 2^28 packets before the
// 32-bit (RFC 4303 §3.3.3) or 64-bit (ESN) space runs out.
const (
	seqRekey32 = 1<<32 - 1<<28
	seqRekey64 = 1<<64 - 1<<28
)

// Engine runs IKEv2 with a set of peers.
type Engine struct {
	cfg   settings
	dp    DataPlane
	out   Sender
	drops DropCounter // dp, if it counts drops; else nil
	mover Mover       // dp, if its endpoints move; else nil
	log   *slog.Logger
	inbox chan inbound
	wake  chan struct{} // Run recomputes its timers after SetPeer and RemovePeer
	// addrs maps each peer's address to its number, for Receive, which
	// runs beside Run; it is replaced, never modified, under mu.
	addrs atomic.Pointer[map[netip.Addr]int]

	// mu guards the state below: Run holds it while it handles an event,
	// SetPeer and RemovePeer while they change a peer.
	mu      sync.Mutex
	now     time.Time         // of the event being handled
	running bool              // between start and shutdown
	peers   []*peer           // by peer number; nil where there is none
	sas     map[uint64]*ikeSA // by our SPI
	spis    map[uint32]bool   // inbound CHILD_SA SPIs in use
	cookie  cookieJar

	statusMu sync.Mutex
	status   []PeerStatus
}

type inbound struct {
	from netip.AddrPort
	msg  []byte
}

// peer is the state kept for one configured remote gateway.
type peer struct {
	idx  int
	cfg  peerSettings
	name string // "peer 192.0.2.1:4500", the prefix of its errors
	// ike is the established IKE SA that new exchanges use; nil if none.
	ike       *ikeSA
	lastErr   string
	loggedErr time.Time // when lastErr was last logged
	failures  int       // in a row, for the restart backoff
	restartAt time.Time // when to initiate again; zero if not planned
	statsAt   time.Time // next reading of the CHILD_SAs' counters
	// tsAt is when to check that a CHILD_SA carries the configured
	// selectors, and replace it if not; zero if not planned. tsTries
	// counts the checks in a row that found it did not, for the backoff.
	tsAt    time.Time
	tsTries int
}

func newPeer(i int, ps peerSettings) *peer {
	return &peer{idx: i, cfg: ps, name: fmt.Sprintf("peer %v", ps.endpoint)}
}

// NewEngine returns an engine for cfg that keys dp and sends through out.
// log may be nil to discard log lines.
func NewEngine(cfg Config, dp DataPlane, out Sender, log *slog.Logger) (*Engine, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		cfg:   s,
		dp:    dp,
		out:   out,
		log:   log,
		inbox: make(chan inbound, inboxSize),
		wake:  make(chan struct{}, 1),
		sas:   map[uint64]*ikeSA{},
		spis:  map[uint32]bool{},
	}
	e.drops, _ = dp.(DropCounter)
	e.mover, _ = dp.(Mover)
	for i, ps := range s.peers {
		e.peers = append(e.peers, newPeer(i, ps))
	}
	e.publishAddrs()
	e.publish()
	return e, nil
}

// Receive takes one IKE message (without the non-ESP marker) that arrived
// from from. msg is copied; it may be reused when Receive returns. Messages
// that Run has not caught up with beyond a small queue are dropped, and
// counted.
func (e *Engine) Receive(from netip.AddrPort, msg []byte) {
	from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	if len(msg) > maxMessage {
		e.droppedAt(e.numberAt(from.Addr()), DropOversize)
		return
	}
	select {
	case e.inbox <- inbound{from: from, msg: clone(msg)}:
	default:
		e.droppedAt(e.numberAt(from.Addr()), DropQueueFull)
	}
}

// Run initiates to the peers configured to, handles received messages and
// runs the timers until ctx is done; then it deletes the IKE SAs, telling
// the peers, and the CHILD_SAs from the data plane. Run must be called
// once.
func (e *Engine) Run(ctx context.Context) error {
	e.locked(e.start)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var next time.Time
		e.locked(func(now time.Time) { next = e.tick(now) })
		t.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			e.locked(e.shutdown)
			return nil
		case in := <-e.inbox:
			e.locked(func(now time.Time) { e.handle(in.from, in.msg, now) })
		case <-e.wake:
		case <-t.C:
		}
	}
}

// locked runs f at the current time with mu held.
func (e *Engine) locked(f func(now time.Time)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(time.Now())
}

// start initiates to every peer configured to.
func (e *Engine) start(now time.Time) {
	e.now = now
	e.running = true
	for _, p := range e.peers {
		if p != nil && p.cfg.initiate {
			e.initiate(p)
		}
	}
	e.publish()
}

// shutdown deletes every IKE SA, sending one Delete without waiting for the
// answer, and removes every CHILD_SA from the data plane.
func (e *Engine) shutdown(now time.Time) {
	e.now = now
	e.running = false
	for _, sa := range e.sas {
		e.dropSA(sa)
	}
	e.publish()
}

// dropSA deletes sa at once: one Delete goes to the peer, if sa has keys
// it knows, without waiting for the answer (RFC 7296 §1.4.1 lets a peer
// that gets no answer give the SA up), and sa and its CHILD_SAs are
// removed.
func (e *Engine) dropSA(sa *ikeSA) {
	if sa.out != nil && sa.state != saHalfOpen {
		e.send(sa.remote, sa.seal(exchInformational, sa.nextID, false, []payload{&deletePayload{protocol: protoIKE}}))
	}
	e.removeSA(sa)
}

// handle processes one received message; what it discards is counted.
func (e *Engine) handle(from netip.AddrPort, b []byte, now time.Time) {
	e.now = now
	defer e.publish()
	if r := e.receive(from, b); r != accepted {
		p := e.peerByAddr(from.Addr())
		if sa := e.sas[localSPIOf(b)]; sa != nil {
			p = sa.p
		}
		e.dropped(p, r)
	}
}

// accepted is the outcome of a message that set up or advanced state.
const accepted = NumDropReasons

// receive handles one message and says why it was discarded, or accepted.
func (e *Engine) receive(from netip.AddrPort, b []byte) DropReason {
	switch {
	case len(b) < headerLen:
		return DropTruncated
	case b[17]>>4 != 2:
		return DropBadVersion
	}
	m, err := parseMessage(b)
	if err != nil {
		if typ, ok := unsupportedCritical(err); ok && m.exchange == exchIKESAInit && !m.isResponse() && e.peerByAddr(from.Addr()) != nil {
			e.sendNotify(from, m, notifyUnsupportedCriticalPayload, []byte{typ})
			return DropUnsupportedCritical
		}
		return DropMalformed
	}
	if m.exchange == exchIKESAInit && !m.isResponse() {
		return e.initRequest(from, m, b)
	}
	sa := e.sas[localSPIOf(b)]
	if sa == nil {
		return DropUnknownIKESPI
	}
	if m.exchange == exchIKESAInit {
		if sa.state != saInitSent || m.id != 0 || sa.req == nil {
			return DropUnexpectedID
		}
		return e.initResponse(sa, from, m, b)
	}
	if sa.in == nil || m.remoteSPI() != sa.remoteSPI() || m.fromInitiator() == sa.initiator {
		return DropSAMismatch
	}
	if err := openSK(b, m, sa.in); err != nil {
		if typ, ok := unsupportedCritical(err); ok && !m.isResponse() && m.id == sa.peerID {
			e.respond(sa, from, m, []payload{&notifyPayload{typ: notifyUnsupportedCriticalPayload, data: []byte{typ}}})
			return DropUnsupportedCritical
		}
		if errors.Is(err, errIntegrity) {
			return DropIntegrity
		}
		return DropMalformed
	}
	sa.lastRecv = e.now
	if from != sa.remote {
		e.follow(sa.p, from)
	}
	if m.isResponse() {
		return e.response(sa, m)
	}
	return e.request(sa, from, m)
}

// follow sends everything for p to to from now on: an authenticated
// message came from there, so a NAT rebound the peer's mapping
// (RFC 7296 §2.23). The data plane's endpoint moves with it.
func (e *Engine) follow(p *peer, to netip.AddrPort) {
	e.sendTo(p, to)
	if e.mover != nil {
		if err := e.mover.SetEndpoint(p.idx, to); err != nil {
			e.log.Debug("ike: move the data plane's endpoint", "peer", p.name, "to", to, "err", err)
		}
	}
}

// Follow sends IKE messages for peer to to from now on, because the data
// plane saw an authenticated ESP packet from there (RFC 7296 §2.23). It
// may be called from any goroutine; a peer that is not configured is
// ignored.
func (e *Engine) Follow(peer int, to netip.AddrPort) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if peer >= 0 && peer < len(e.peers) && e.peers[peer] != nil {
		e.sendTo(e.peers[peer], to)
	}
}

// sendTo makes to the address of every IKE SA of p.
func (e *Engine) sendTo(p *peer, to netip.AddrPort) {
	for _, sa := range e.sas {
		if sa.p == p {
			sa.remote = to
		}
	}
}

// localSPIOf is the SPI this side chose for the IKE SA of the message b,
// which is at least a header long: the responder's if the initiator sent
// it, else the initiator's (RFC 7296 §3.1).
func localSPIOf(b []byte) uint64 {
	if len(b) < headerLen {
		return 0
	}
	if b[19]&flagInitiator != 0 {
		return binary.BigEndian.Uint64(b[8:])
	}
	return binary.BigEndian.Uint64(b)
}

// tick runs the timers that are due at now and returns when the next one is.
func (e *Engine) tick(now time.Time) time.Time {
	e.now = now
	next := now.Add(time.Hour)
	soon := func(t time.Time) {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	for _, sa := range e.sas {
		soon(e.saTimers(sa))
	}
	for _, p := range e.peers {
		if p != nil {
			soon(e.peerTimers(p))
		}
	}
	// The timers may have started requests and failed peers; those are
	// due too.
	for _, sa := range e.sas {
		if sa.req != nil {
			soon(sa.req.due)
		}
	}
	for _, p := range e.peers {
		if p != nil {
			soon(p.restartAt)
			soon(p.tsAt)
		}
	}
	e.publish()
	return next
}

// peerTimers restarts a failed peer, changes the selectors of its CHILD_SA
// and reads the data plane's counters.
func (e *Engine) peerTimers(p *peer) time.Time {
	if !p.restartAt.IsZero() && !e.now.Before(p.restartAt) {
		p.restartAt = time.Time{}
		if !e.connecting(p) && p.ike == nil {
			e.initiate(p)
		}
	}
	if !p.tsAt.IsZero() && !e.now.Before(p.tsAt) {
		p.tsAt = time.Time{}
		e.changeTS(p)
	}
	sa := p.ike
	if sa == nil {
		return earliest(p.restartAt, p.tsAt)
	}
	if e.now.Before(p.statsAt) {
		return earliest(p.statsAt, p.tsAt)
	}
	p.statsAt = e.now.Add(statsInterval)
	next := p.statsAt
	for _, c := range sa.children {
		if st, ok := e.dp.Stats(p.idx, c.InSPI); ok && c.state == childInstalled && !c.rekeyAt.IsZero() && e.worn(c, st) {
			c.rekeyAt, next = e.now, e.now
		}
	}
	return next
}

// worn reports whether c has reached its byte limit or nears the end of its
// sequence numbers.
func (e *Engine) worn(c *childSA, st SAStats) bool {
	limit := uint64(seqRekey32)
	if c.Transform.ESN {
		limit = seqRekey64
	}
	return st.OutSeq >= limit || e.cfg.childBytes != 0 && st.InBytes+st.OutBytes >= e.cfg.childBytes
}

// connecting reports whether an IKE SA with p is being set up.
func (e *Engine) connecting(p *peer) bool {
	for _, sa := range e.sas {
		if sa.p == p && (sa.state == saInitSent || sa.state == saAuthSent || sa.state == saHalfOpen) {
			return true
		}
	}
	return false
}

// fail records that the IKE SA with p is lost or could not be set up:
// every SA of p is removed without telling it, and a peer this side
// initiates to is tried again after a backoff.
func (e *Engine) fail(p *peer, err string) {
	e.report(p, err)
	for _, sa := range e.sas {
		if sa.p == p {
			e.removeSA(sa)
		}
	}
	e.scheduleRestart(p)
}

// errorLogInterval is how often one error of a peer is logged while it
// repeats, as it does on every retry of a misconfigured peer.
const errorLogInterval = time.Minute

// report makes err the last error of p and logs it, unless it is the same
// error logged less than errorLogInterval ago.
func (e *Engine) report(p *peer, err string) {
	err = p.name + ": " + err
	if err == p.lastErr && e.now.Sub(p.loggedErr) < errorLogInterval {
		return
	}
	p.lastErr, p.loggedErr = err, e.now
	e.log.Warn("ike: "+err, "peer", p.idx)
}

// scheduleRestart plans a new IKE SA with p if this side initiates to it,
// waiting the retransmit timeout doubled for each failure in a row, at
// most 64 times.
func (e *Engine) scheduleRestart(p *peer) {
	if !p.cfg.initiate {
		return
	}
	p.restartAt = e.now.Add(e.cfg.retransmitTimeout << min(p.failures, 6))
	p.failures++
}

// removeSA forgets sa and removes its CHILD_SAs from the data plane.
func (e *Engine) removeSA(sa *ikeSA) {
	for len(sa.children) > 0 {
		e.removeChild(sa.children[0])
	}
	delete(e.sas, sa.localSPI())
	if sa.p.ike == sa {
		sa.p.ike = nil
	}
}

// send hands the Sender a copy of msg: the engine keeps its own for
// retransmission, and the socket owner may write the marker in place.
func (e *Engine) send(to netip.AddrPort, msg []byte) {
	if err := e.out.SendIKE(to, clone(msg)); err != nil {
		e.log.Debug("ike: send failed", "to", to, "err", err)
	}
}

// sendNotify answers the unencrypted request m with a lone notify, keeping
// no state (RFC 7296 §2.6, §2.21.1).
func (e *Engine) sendNotify(to netip.AddrPort, m *message, typ uint16, data []byte) {
	r := &message{spiI: m.spiI, exchange: m.exchange, flags: flagResponse, id: m.id,
		payloads: []payload{&notifyPayload{typ: typ, data: data}}}
	e.send(to, r.encode())
}

func (e *Engine) peerByAddr(a netip.Addr) *peer {
	for _, p := range e.peers {
		if p != nil && p.cfg.endpoint.Addr() == a {
			return p
		}
	}
	return nil
}

// numberAt is the number of the peer at address a, or -1; unlike
// peerByAddr it may be called without mu.
func (e *Engine) numberAt(a netip.Addr) int {
	if i, ok := (*e.addrs.Load())[a]; ok {
		return i
	}
	return -1
}

// publishAddrs replaces the map numberAt reads. mu must be held.
func (e *Engine) publishAddrs() {
	m := make(map[netip.Addr]int, len(e.peers))
	for _, p := range e.peers {
		if p != nil {
			m[p.cfg.endpoint.Addr()] = p.idx
		}
	}
	e.addrs.Store(&m)
}

// jittered is d less a random part of the configured jitter.
func (e *Engine) jittered(d time.Duration) time.Time {
	return e.now.Add(d - mrand.N(e.cfg.jitter+1))
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("ike: crypto/rand: %v", err)) // never fails on Linux
	}
	return b
}

// nonceLen is the size of the nonces sent: twice the PRF's key size, as
// RFC 7296 §2.10 asks at least half of.
const nonceLen = 32

func newNonce() []byte { return randomBytes(nonceLen) }

// newIKESPI returns an SPI for a new IKE SA that no other uses here.
func (e *Engine) newIKESPI() uint64 {
	for {
		if s := binary.BigEndian.Uint64(randomBytes(8)); s != 0 && e.sas[s] == nil {
			return s
		}
	}
}

// newChildSPI reserves an inbound ESP SPI: not one of 0-255 (RFC 4303
// §2.1) and not one in use.
func (e *Engine) newChildSPI() uint32 {
	for {
		if s := binary.BigEndian.Uint32(randomBytes(4)); s > 255 && !e.spis[s] {
			e.spis[s] = true
			return s
		}
	}
}

func spiBytes(s uint32) []byte { return binary.BigEndian.AppendUint32(nil, s) }
