package natengine

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snorkel-net/snorkel/packet"
)

// Config configures an Engine. Zero fields take the defaults.
type Config struct {
	// MaxFlows bounds the connection-tracking table; default 1<<20.
	MaxFlows int
	// MaxFlowsPerSource bounds the flows one source may hold: a local
	// address for the flows it starts, a remote cluster for the flows it
	// starts through ingress rules (shares.go). Default MaxFlows/8, at
	// least 1. A source at its bound has its new flows refused
	// (DropSourceLimit), so the bound is generous: it only has to leave
	// the rest of the table to everyone else.
	MaxFlowsPerSource int
	// Timeouts are the idle timeouts; zero fields take the defaults.
	Timeouts Timeouts
	// MaxFragments bounds the first-fragment mappings kept for the
	// fragments that follow; default 4096.
	MaxFragments int
	// MaxFragmentsPerSource bounds the mappings one source may hold;
	// default MaxFragments/16, at least 1. A source at its bound gives up
	// its own oldest mapping for a new one, so a small bound costs a busy
	// source only tolerance for late fragments.
	MaxFragmentsPerSource int
	// Now is the clock, read on every packet; the engine keeps time in
	// whole seconds. The default is a coarse clock that one background
	// goroutine advances every 100 ms, read with an atomic load.
	Now func() time.Time
	// Rand supplies randomness for port search and the table's hash seed;
	// default math/rand/v2.
	Rand func() uint32
}

// Defaults for Config.
const (
	DefaultMaxFlows     = 1 << 20
	DefaultMaxFragments = 4096
)

// maxFlowsLimit keeps flow indexes and bucket counts within 32 bits.
const maxFlowsLimit = 1 << 30

const (
	// reapBudget bounds the expired flows one packet removes, so that a
	// second in which many flows expire does not stall one packet.
	reapBudget = 64
	// evictRing is how many recent unreplied flows are remembered as
	// eviction candidates.
	evictRing = 1 << 16
)

// Engine is the Globalnet NAT engine. It satisfies the gateway's
// Translator. Create it with New.
type Engine struct {
	rules atomic.Pointer[snapshot]
	t     table
	frags *fragments
	to    timeouts
	now   func() time.Time // nil: the default coarse clock
	epoch time.Time        // second 0, for an injected clock
	base  uint64           // second 0 in ns, for the default clock
	rand  func() uint32
	stats counters
	// journal, when set, receives every flow created, changed and removed
	// (journal.go).
	journal atomic.Pointer[Journal]
	live    atomic.Int64
	// reaped is the last second the wheel was fully processed for; a
	// packet that sees a later second tries to advance it.
	reaped atomic.Uint32

	// mu serialises every change to the table's structure: creating,
	// expiring, evicting and retiring flows, the wheel, the eviction ring
	// and the UDP mappings.
	mu        sync.Mutex
	wheel     *wheel
	evict     *ring
	binds     *bindings
	share     *shares
	perSource uint32 // Config.MaxFlowsPerSource
}

// New returns an engine that translates nothing until SetRules gives it
// rules.
func New(cfg Config) (*Engine, error) {
	if cfg.MaxFlows == 0 {
		cfg.MaxFlows = DefaultMaxFlows
	}
	if cfg.MaxFlows < 1 || cfg.MaxFlows > maxFlowsLimit {
		return nil, fmt.Errorf("natengine: Config.MaxFlows %d is out of range; use 1 to %d, or 0 for %d", cfg.MaxFlows, maxFlowsLimit, DefaultMaxFlows)
	}
	if cfg.MaxFragments == 0 {
		cfg.MaxFragments = DefaultMaxFragments
	}
	if cfg.MaxFragments < 1 || cfg.MaxFragments > maxFlowsLimit {
		return nil, fmt.Errorf("natengine: Config.MaxFragments %d is out of range; use 1 to %d, or 0 for %d", cfg.MaxFragments, maxFlowsLimit, DefaultMaxFragments)
	}
	if cfg.MaxFlowsPerSource == 0 {
		cfg.MaxFlowsPerSource = max(cfg.MaxFlows/8, 1)
	}
	if cfg.MaxFlowsPerSource < 1 || cfg.MaxFlowsPerSource > cfg.MaxFlows {
		return nil, fmt.Errorf("natengine: Config.MaxFlowsPerSource %d is out of range; use 1 to MaxFlows (%d), or 0 for MaxFlows/8", cfg.MaxFlowsPerSource, cfg.MaxFlows)
	}
	if cfg.MaxFragmentsPerSource == 0 {
		cfg.MaxFragmentsPerSource = max(cfg.MaxFragments/16, 1)
	}
	if cfg.MaxFragmentsPerSource < 1 || cfg.MaxFragmentsPerSource > cfg.MaxFragments {
		return nil, fmt.Errorf("natengine: Config.MaxFragmentsPerSource %d is out of range; use 1 to MaxFragments (%d), or 0 for MaxFragments/16", cfg.MaxFragmentsPerSource, cfg.MaxFragments)
	}
	to, err := cfg.Timeouts.withDefaults().compile()
	if err != nil {
		return nil, err
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Uint32
	}
	e := &Engine{
		frags:     newFragments(cfg.MaxFragments, cfg.MaxFragmentsPerSource),
		to:        to,
		now:       cfg.Now,
		rand:      cfg.Rand,
		evict:     newRing(min(cfg.MaxFlows, evictRing)),
		binds:     newBindings(),
		share:     newShares(),
		perSource: uint32(cfg.MaxFlowsPerSource),
	}
	// Second 0 of the engine's clock is a second before New, so that a
	// flow's timestamps are never zero and a clock read just before New
	// does not wrap.
	if e.now != nil {
		e.epoch = e.now().Add(-time.Second)
	} else {
		e.base = uint64(coarseSince() - time.Second)
	}
	if e.t, err = newTable(cfg.MaxFlows, uint64(cfg.Rand())<<32|uint64(cfg.Rand())); err != nil {
		return nil, err
	}
	runtime.AddCleanup(e, func(unmap func()) { unmap() }, e.t.unmap)
	now := e.clock()
	e.wheel = newWheel(to.longest(), now)
	e.reaped.Store(now)
	return e, nil
}

// clock returns the engine's time in seconds. An engine on the default
// clock started it in New, so a packet reads it with one atomic load.
func (e *Engine) clock() uint32 {
	if e.now != nil {
		return e.injectedClock()
	}
	// The default clock only advances: the difference, modulo 2^64, is the
	// time since second 0.
	return uint32((coarse.since.Load() - e.base) / uint64(time.Second))
}

// injectedClock is clock for an engine given Config.Now.
func (e *Engine) injectedClock() uint32 {
	d := e.now().Sub(e.epoch)
	if d < 0 {
		return 0
	}
	return uint32(d / time.Second)
}

// SetRules validates r and makes it the rules every packet sees from then on,
// swapping the snapshot atomically. Flows whose translation the new rules
// still give are kept; the others are removed (Stats.Retired). An error
// names the field at fault, and leaves the old rules in place.
func (e *Engine) SetRules(r Rules) error {
	s, err := compile(r)
	if err != nil {
		return err
	}
	e.rules.Store(s)
	e.retire()
	return nil
}

// retireChunk is how many slots SetRules examines per hold of Engine.mu,
// so that new flows are not held up for a whole table scan.
const retireChunk = 4096

// retire removes the flows the current rules no longer give. A flow created
// concurrently takes Engine.mu and reloads the rules first, so it is created
// under the new rules or examined here.
func (e *Engine) retire() {
	for start := uint32(1); ; start += retireChunk {
		e.mu.Lock()
		s := e.rules.Load()
		end := min(start+retireChunk, e.t.used+1)
		for i := start; i < end; i++ {
			f := e.t.flow(i)
			if f.linked() && !s.holds(f) {
				e.remove(i)
				e.stats.retired.Add(1)
			}
		}
		done := end > e.t.used
		e.mu.Unlock()
		if done {
			return
		}
	}
}

// holds reports whether the rules still give flow f its translation.
func (s *snapshot) holds(f *flow) bool {
	if (f.kind&kindV6 != 0) != s.v6 || !s.isLocal(&f.local) || !s.isRemote(&f.remote) || !s.global.contains(&f.global) {
		return false
	}
	if f.kind&kindInbound != 0 {
		i, ok := s.byGlob[f.global]
		return ok && s.ingress[i].local == f.local
	}
	return s.egressAllowed(&f.local, &f.global)
}

// Egress translates packet b, leaving for remote cluster remote, decoded
// into p; it rewrites b and p in place and returns false to drop b. Packets
// from a local address to the remote's global CIDR are translated; others
// pass untouched.
func (e *Engine) Egress(remote int, b []byte, p *packet.Parsed) bool {
	s := e.rules.Load()
	if s == nil || (p.Version == 6) != s.v6 || remote < 0 || remote >= len(s.remotes) ||
		!s.remotes[remote].contains(&p.Dst) {
		return true
	}
	now := e.clock()
	if e.reaped.Load() != now {
		e.maybeReap(now)
	}
	if p.FragOffset != 0 {
		return e.egressFragment(s, b, p, now)
	}
	if isICMPError(p) {
		return e.egressError(s, b, p)
	}
	var k key
	k.of(p)
	var v view
	var g [16]byte
	var gp uint16
	if e.t.lookup(&k, &v) {
		if reply := v.kind&kindInbound != 0; steady(v.st, v.proto, reply, p.TCPFlags) {
			e.t.flow(v.idx).see(now)
		} else {
			e.touch(&v, now, reply, p.TCPFlags)
		}
		g, gp = v.global, v.gport
	} else {
		if !s.isLocal(&p.Src) {
			return true
		}
		var r DropReason
		if g, gp, r = e.newEgress(&k, p, now); r != dropNone {
			return e.drop(r)
		}
	}
	if p.MoreFragments {
		e.frags.record(p, localSource(&p.Src), g, now, &e.stats)
	}
	packet.SetSrc(b, p, g, gp)
	return true
}

// Ingress translates packet b, arrived from remote cluster remote, decoded
// into p; it rewrites b and p in place and returns false to drop b. Packets
// from the remote's global CIDR to this cluster's global CIDR are
// translated; others pass untouched.
func (e *Engine) Ingress(remote int, b []byte, p *packet.Parsed) bool {
	s := e.rules.Load()
	if s == nil || (p.Version == 6) != s.v6 || !s.global.contains(&p.Dst) || remote < 0 ||
		remote >= len(s.remotes) || !s.remotes[remote].contains(&p.Src) {
		return true
	}
	now := e.clock()
	if e.reaped.Load() != now {
		e.maybeReap(now)
	}
	if p.FragOffset != 0 {
		return e.ingressFragment(s, b, p, now)
	}
	if isICMPError(p) {
		return e.ingressError(b, p)
	}
	var k key
	k.of(p)
	var v view
	var l [16]byte
	var lp uint16
	if e.t.lookup(&k, &v) {
		if reply := v.kind&kindInbound == 0; steady(v.st, v.proto, reply, p.TCPFlags) {
			e.t.flow(v.idx).see(now)
		} else {
			e.touch(&v, now, reply, p.TCPFlags)
		}
		l, lp = v.local, v.lport
	} else {
		var r DropReason
		if l, lp, r = e.newIngress(&k, s.remoteSource(remote), p, now); r != dropNone {
			return e.drop(r)
		}
	}
	if p.MoreFragments {
		e.frags.record(p, s.remoteSource(remote), l, now, &e.stats)
	}
	packet.SetDst(b, p, l, lp)
	return true
}

// dropNone is the DropReason slot of "no drop" in internal results; it is
// never counted.
const dropNone = numDropReasons

// touch records a packet of the flow v was copied from at second now, in
// the reply direction if reply, with TCP flags flags. It changes nothing once
// the flow is gone: the state word carries the sequence number v saw.
//
// The established path asks steady first, and for most packets only has
// the flow see the second.
func (e *Engine) touch(v *view, now uint32, reply bool, flags uint8) {
	f := e.t.flow(v.idx)
	old := uint64(v.seq)<<32 | uint64(v.st)
	for {
		w := old&^0xffffffff | uint64(advance(uint32(old), v.proto, reply, flags))
		if w == old {
			break
		}
		if f.state.CompareAndSwap(old, w) {
			e.noteChange(v, uint32(w), now)
			break
		}
		if old = f.state.Load(); uint32(old>>32) != v.seq {
			return
		}
	}
	f.see(now)
}

// see records second now as the flow's last packet. Most packets of a
// flow arrive in a second already recorded, and a load leaves the cache
// line shared between the goroutines of both directions where a store
// would not.
func (f *flow) see(now uint32) {
	if f.seen.Load() != now {
		f.seen.Store(now)
	}
}

// viewOf is a view of flow i. Under Engine.mu.
func (t *table) viewOf(i, dir uint32) view {
	f := t.flow(i)
	return view{
		mapping: mapping{local: f.local, global: f.global, lport: f.lport, gport: f.gport},
		idx:     i, dir: dir, seq: f.seq(), st: f.st(), proto: f.proto, kind: f.kind,
	}
}

// mayStart reports whether p may create a flow: not a TCP RST (RFC 5382
// keeps state for connections, not for resets), and of ICMP only an echo
// request.
func mayStart(p *packet.Parsed) bool {
	switch p.Proto {
	case protoTCP:
		return p.TCPFlags&packet.TCPFlagRST == 0
	case protoICMPv4:
		return p.Version == 4 && p.ICMPType == packet.ICMPv4EchoRequest
	case protoICMPv6:
		return p.Version == 6 && p.ICMPType == packet.ICMPv6EchoRequest
	}
	return true
}

func isEcho(p *packet.Parsed) bool {
	switch {
	case p.Version == 4 && p.Proto == protoICMPv4:
		return p.ICMPType == packet.ICMPv4EchoRequest || p.ICMPType == packet.ICMPv4EchoReply
	case p.Version == 6 && p.Proto == protoICMPv6:
		return p.ICMPType == packet.ICMPv6EchoRequest || p.ICMPType == packet.ICMPv6EchoReply
	}
	return false
}

// newEgress creates the flow of egress packet p (key k) and returns its
// global address and port.
func (e *Engine) newEgress(k *key, p *packet.Parsed, now uint32) ([16]byte, uint16, DropReason) {
	e.mu.Lock()
	defer e.mu.Unlock()
	// An inbound flow created meanwhile may own this tuple.
	if i, dir := e.t.find(k); i != 0 && dir == dirEgress {
		v := e.t.viewOf(i, dir)
		e.touch(&v, now, v.kind&kindInbound != 0, p.TCPFlags)
		return v.global, v.gport, dropNone
	}
	if !mayStart(p) {
		return [16]byte{}, 0, DropNoFlow
	}
	s := e.rules.Load()
	if !s.isLocal(&k.a) || !s.isRemote(&k.b) {
		// The rules changed since the packet was classified; it no longer
		// belongs to Globalnet, and one packet is not worth a second pass.
		return [16]byte{}, 0, DropNoRule
	}
	g, ok := s.egressAddr(&k.a)
	if !ok {
		return [16]byte{}, 0, DropNoRule
	}
	src := localSource(&k.a)
	if r := e.admit(src, now); r != dropNone {
		return [16]byte{}, 0, r
	}
	c := flow{local: k.a, lport: k.ap, remote: k.b, rport: k.bp, global: g, proto: k.proto}
	e.setKind(&c, p, 0)
	gp, ok := e.allocPort(&c)
	if !ok {
		return [16]byte{}, 0, DropPoolExhausted
	}
	c.gport = gp
	c.owner = e.share.hold(src)
	e.insert(&c, p, now)
	if c.proto == protoUDP {
		e.binds.hold(endpoint{c.local, c.lport}, endpoint{c.global, gp})
	}
	return c.global, gp, dropNone
}

// newIngress creates the inbound flow of ingress packet p (key k), from
// source src, from an ingress rule and returns its local address and port.
func (e *Engine) newIngress(k *key, src source, p *packet.Parsed, now uint32) ([16]byte, uint16, DropReason) {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Another goroutine may have created the flow since the lookup.
	if i, dir := e.t.find(k); i != 0 && dir == dirIngress {
		v := e.t.viewOf(i, dir)
		e.touch(&v, now, v.kind&kindInbound == 0, p.TCPFlags)
		return v.local, v.lport, dropNone
	}
	s := e.rules.Load()
	r, ok := s.byGlob[k.b]
	if !ok {
		return [16]byte{}, 0, DropNoRule
	}
	if !mayStart(p) {
		return [16]byte{}, 0, DropNoFlow
	}
	c := flow{local: s.ingress[r].local, lport: k.bp, remote: k.a, rport: k.ap, global: k.b, gport: k.bp, proto: k.proto}
	e.setKind(&c, p, kindInbound)
	ek := c.key(dirEgress)
	if i, _ := e.t.find(&ek); i != 0 {
		return [16]byte{}, 0, DropConflict
	}
	if r := e.admit(src, now); r != dropNone {
		return [16]byte{}, 0, r
	}
	c.owner = e.share.hold(src)
	e.insert(&c, p, now)
	return c.local, c.lport, dropNone
}

func (e *Engine) setKind(c *flow, p *packet.Parsed, kind uint8) {
	c.kind = kind
	if p.Version == 6 {
		c.kind |= kindV6
	}
	if isEcho(p) {
		c.kind |= kindEcho
		c.rport = 0
	}
}

// insert stores candidate flow c, applies its first packet p and schedules
// it; it returns the flow's index. Under e.mu, with room made.
func (e *Engine) insert(c *flow, p *packet.Parsed, now uint32) uint32 {
	return e.place(c, advance(initialState(c.proto), c.proto, false, p.TCPFlags), now, now)
}

// place stores candidate flow c with state word st, created at second
// created, seen now, and schedules it; it returns the flow's index. Under
// e.mu, with room made.
func (e *Engine) place(c *flow, st, created, now uint32) uint32 {
	i := e.t.alloc()
	f := e.t.flow(i)
	f.local, f.global, f.remote = c.local, c.global, c.remote
	f.lport, f.gport, f.rport = c.lport, c.gport, c.rport
	f.proto, f.kind = c.proto, c.kind
	f.owner = c.owner
	f.created = created
	f.seen.Store(now)
	e.t.link(i, st)
	r := ref{i, f.seq()}
	e.wheel.add(r, e.to.check(f, st, now, now))
	e.evict.push(r)
	e.live.Add(1)
	e.stats.newFlows.Add(1)
	e.note(OpNew, f, st)
	return i
}

// remove deletes live flow i. Under e.mu.
func (e *Engine) remove(i uint32) {
	f := e.t.flow(i)
	e.note(OpRemove, f, f.st())
	if f.proto == protoUDP && f.kind&kindInbound == 0 {
		e.binds.release(endpoint{f.local, f.lport})
	}
	e.share.release(f.owner)
	e.t.unlink(i)
	e.live.Add(-1)
}

// admit decides whether source src may create one more flow, making room
// for it if the table is at MaxFlows. A source at its share is refused
// before anything is evicted, so no flow ever leaves to make room for a
// source over its share. Otherwise the expired flows go first, then the
// oldest remembered flow that never saw a reply (nobody is waiting on it),
// then, by fairShare, a flow of a source that holds more than src. An
// established TCP flow is never evicted. Under e.mu.
func (e *Engine) admit(src source, now uint32) DropReason {
	n := e.share.count(src)
	if n >= e.perSource {
		return DropSourceLimit
	}
	if e.live.Load() < int64(e.t.max) {
		return dropNone
	}
	e.reap(now, -1)
	for e.live.Load() >= int64(e.t.max) {
		r, ok := e.evict.pop()
		if !ok {
			return e.fairShare(n)
		}
		f := e.t.flow(r.idx)
		if f.seq() != r.seq || f.st()&stReplied != 0 {
			continue
		}
		e.remove(r.idx)
		e.stats.evictions[EvictUnreplied].Add(1)
	}
	return dropNone
}

// fairSamples is how many flows fairShare looks at: enough that a table in
// which a tenth of the flows could go yields one with probability
// 1-0.9^16 > 80%, few enough to keep flow setup in a full table short.
const fairSamples = 16

// fairShare evicts, for a source holding n flows, a flow that is not an
// established TCP connection of a source holding at least n+2: the move
// leaves the two no further apart than before, so eviction only ever
// evens the table out and never takes from a lighter source. Among the
// flows sampled at random it takes one of the heaviest source, the least
// recently seen of those. Sampling keeps the cost constant where an exact
// least-recently-used order would cost every packet a list update. Under
// e.mu, with the table full, so every slot sampled is linked.
func (e *Engine) fairShare(n uint32) DropReason {
	var best, bestN, bestSeen uint32
	for range fairSamples {
		i := 1 + e.rand()%e.t.used
		f := e.t.flow(i)
		if !f.linked() || FlowState(f.st()&stateMask) == StateEstablished {
			continue
		}
		c, seen := e.share.recs[f.owner].n, f.seen.Load()
		if c < n+2 || c < bestN || c == bestN && int32(seen-bestSeen) >= 0 {
			continue
		}
		best, bestN, bestSeen = i, c, seen
	}
	if best == 0 {
		return DropTableFull
	}
	e.remove(best)
	e.stats.evictions[EvictFairShare].Add(1)
	return dropNone
}

// maybeReap advances the wheel, for a packet that saw second now begin,
// unless another goroutine is busy with the table's structure: the next
// packet will try again.
func (e *Engine) maybeReap(now uint32) {
	if !e.mu.TryLock() {
		return
	}
	e.reap(now, reapBudget)
	e.mu.Unlock()
}

// reapAll removes every expired flow.
func (e *Engine) reapAll() {
	now := e.clock()
	e.mu.Lock()
	e.reap(now, -1)
	e.mu.Unlock()
}

// reap processes the wheel up to second now, examining at most budget refs
// (no limit when negative). Under e.mu.
func (e *Engine) reap(now uint32, budget int) {
	for ; budget != 0; budget-- {
		r, ok := e.wheel.next(now)
		if !ok {
			e.reaped.Store(now)
			return
		}
		f := e.t.flow(r.idx)
		if f.seq() != r.seq {
			continue
		}
		st, seen := f.st(), f.seen.Load()
		if int32(now-(seen+e.to.of(f, st))) >= 0 {
			e.remove(r.idx)
			e.stats.expired.Add(1)
			continue
		}
		e.wheel.add(r, e.to.check(f, st, seen, now))
	}
}
