package natengine

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snorkel-net/snorkel/packet"
)

// LocalPeer is the Peer of a clusterset backend in the local cluster.
const LocalPeer = -1

// ClustersetRules are the clusterset IPs (VIPs) a Clusterset serves.
type ClustersetRules struct {
	// SNAT is the source a connection to a local backend leaves with, so
	// that the backend's replies come back through the gateway.
	SNAT     netip.Addr
	Services []VIPService
}

// VIPService is one VIP, its ports and its backends.
type VIPService struct {
	VIP      netip.Addr
	Ports    []VIPPort
	Backends []VIPBackend
}

// VIPPort is a port a VIP serves; Proto is the IP protocol number.
type VIPPort struct {
	Proto uint8
	Port  uint16
}

// VIPBackend is one cluster's address for a VIP's service: Peer is
// LocalPeer or the remote's slot, which ClustersetConfig.Up is asked about.
type VIPBackend struct {
	Peer int
	Addr netip.Addr
}

// ClustersetConfig configures a Clusterset. Zero fields take the defaults.
type ClustersetConfig struct {
	// MaxFlows bounds the connections tracked; default 1<<18.
	MaxFlows int
	// Timeouts are the idle timeouts, as the Globalnet engine's.
	Timeouts Timeouts
	// Now is the clock; default a coarse clock (see Config.Now).
	Now func() time.Time
	// Rand draws SNAT ports and round-robin starts; default math/rand/v2.
	Rand func() uint32
	// Up reports whether the connection to remote peer is up: a new
	// connection goes to a remote backend only if it is. Default: all up.
	Up func(peer int) bool
}

// DefaultClustersetMaxFlows is ClustersetConfig.MaxFlows' default.
const DefaultClustersetMaxFlows = 1 << 18

// VIPVerdict is what the gateway does with a packet after Clusterset.Egress.
type VIPVerdict uint8

const (
	// VIPDrop: the packet was refused (and counted); discard it.
	VIPDrop VIPVerdict = iota
	// VIPRoute: the packet now goes to a remote backend; route it by its
	// new destination like any other.
	VIPRoute
	// VIPLocal: the packet now goes to a local backend, or is a reply
	// translated back for a local client; write it back to the device.
	VIPLocal
)

// VIPDropReason says why a Clusterset refused a packet; String is a metric
// label.
type VIPDropReason uint8

// Clusterset drop reasons, added at the end.
const (
	// VIPDropPortNotServed: a new connection to a VIP port (or protocol)
	// no service of the VIP lists.
	VIPDropPortNotServed VIPDropReason = iota
	// VIPDropNoBackend: the VIP has no local backend and no remote backend
	// whose connection is up.
	VIPDropNoBackend
	// VIPDropNoFlow: a packet that matches no connection and may not start
	// one: a TCP RST, an echo reply, an ICMP error about no connection (or
	// whose quote does not decode), anything to the SNAT address that is
	// not a reply.
	VIPDropNoFlow
	// VIPDropFragment: a non-first fragment, which carries no ports to
	// match a connection by.
	VIPDropFragment
	// VIPDropUnsupported: a protocol without ports the data plane reads
	// (SCTP among them).
	VIPDropUnsupported
	// VIPDropPortsExhausted: no free SNAT port for a connection to a local
	// backend.
	VIPDropPortsExhausted
	// VIPDropTableFull: MaxFlows connections are tracked.
	VIPDropTableFull
	// VIPDropUnknownVIP: a packet to an address of the range that is
	// neither a VIP nor the SNAT address.
	VIPDropUnknownVIP

	numVIPDropReasons
)

// NumVIPDropReasons is the number of VIPDropReason values.
const NumVIPDropReasons = int(numVIPDropReasons)

var vipDropNames = [NumVIPDropReasons]string{
	VIPDropPortNotServed:  "port_not_served",
	VIPDropNoBackend:      "no_backend",
	VIPDropNoFlow:         "no_flow",
	VIPDropFragment:       "fragment",
	VIPDropUnsupported:    "unsupported_protocol",
	VIPDropPortsExhausted: "ports_exhausted",
	VIPDropTableFull:      "table_full",
	VIPDropUnknownVIP:     "unknown_vip",
}

// String returns the snake_case name of r, or "unknown".
func (r VIPDropReason) String() string {
	if int(r) < len(vipDropNames) {
		return vipDropNames[r]
	}
	return "unknown"
}

// ClustersetStats are a Clusterset's counters since NewClusterset.
type ClustersetStats struct {
	Flows       int    // live connections
	LocalFlows  uint64 // connections created to a local backend
	RemoteFlows uint64 // connections created to a remote backend
	Translated  uint64 // packets rewritten, both directions
	Expired     uint64
	Retired     uint64 // connections ended because their VIP or backend went
	Drops       [NumVIPDropReasons]uint64
}

// csShards is the number of lock shards of the connection table.
const csShards = 64

// Clusterset translates connections to clusterset IPs: it gives each new
// connection to a VIP one backend and rewrites its packets both ways for
// the connection's life. See the package documentation.
type Clusterset struct {
	rules  atomic.Pointer[csRules]
	shards [csShards]csShard
	to     timeouts
	now    func() time.Time
	epoch  time.Time
	base   time.Duration
	rand   func() uint32
	up     func(peer int) bool
	max    int

	// mu serialises creating and removing connections, and guards flows
	// and cursor.
	mu     sync.Mutex
	flows  []*csFlow
	cursor int
	swept  atomic.Uint32 // the last second a sweep ran for

	live                                atomic.Int64
	local, remote, xlated, exp, retired atomic.Uint64
	drops                               [NumVIPDropReasons]atomic.Uint64
}

type csShard struct {
	mu sync.RWMutex
	m  map[key]*csFlow
	_  [64 - 32]byte // keep neighbouring locks off one cache line
}

// csFlow is one connection. Its keys and translation are fixed at creation;
// seen and state change with atomics.
type csFlow struct {
	fwd, rev key // client → VIP; backend → client (remote) or SNAT (local)
	vip      [16]byte
	client   [16]byte
	backend  [16]byte
	snat     [16]byte
	cport    uint16 // the client's port (echo identifier)
	sport    uint16 // the SNAT port; cport when the backend is remote
	peer     int
	echo     bool
	idx      int // position in Clusterset.flows; under mu
	seen     atomic.Uint32
	state    atomic.Uint32
}

// csRules is a compiled ClustersetRules.
type csRules struct {
	snat     [16]byte
	snatOK   bool
	vips     map[[16]byte]*csService
	backends map[[16]byte]struct{} // every backend address: who may reply
}

type csService struct {
	ports    []VIPPort
	local    [16]byte
	hasLocal bool
	remotes  []csRemote
	rr       atomic.Uint32
}

type csRemote struct {
	peer int
	addr [16]byte
}

// NewClusterset returns a Clusterset that serves nothing until SetRules.
func NewClusterset(cfg ClustersetConfig) (*Clusterset, error) {
	if cfg.MaxFlows == 0 {
		cfg.MaxFlows = DefaultClustersetMaxFlows
	}
	if cfg.MaxFlows < 1 || cfg.MaxFlows > maxFlowsLimit {
		return nil, fmt.Errorf("natengine: ClustersetConfig.MaxFlows %d is out of range; use 1 to %d, or 0 for %d", cfg.MaxFlows, maxFlowsLimit, DefaultClustersetMaxFlows)
	}
	to, err := cfg.Timeouts.withDefaults().compile()
	if err != nil {
		return nil, err
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Uint32
	}
	if cfg.Up == nil {
		cfg.Up = func(int) bool { return true }
	}
	c := &Clusterset{to: to, now: cfg.Now, rand: cfg.Rand, up: cfg.Up, max: cfg.MaxFlows}
	for i := range c.shards {
		c.shards[i].m = map[key]*csFlow{}
	}
	if c.now != nil {
		c.epoch = c.now().Add(-time.Second)
	} else {
		c.base = coarseSince() - time.Second
	}
	c.swept.Store(c.clock())
	return c, nil
}

func (c *Clusterset) clock() uint32 {
	var d time.Duration
	if c.now == nil {
		d = coarseSince() - c.base
	} else {
		d = c.now().Sub(c.epoch)
	}
	if d < 0 {
		return 0
	}
	return uint32(d / time.Second)
}

// SetRules makes r the rules new connections see and ends the connections
// whose VIP, port or backend r no longer lists, or whose SNAT address
// changed. An error leaves the old rules in place.
func (c *Clusterset) SetRules(r ClustersetRules) error {
	s, err := compileClusterset(r)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rules.Store(s)
	for i := len(c.flows) - 1; i >= 0; i-- {
		if f := c.flows[i]; !s.holds(f) {
			c.remove(f)
			c.retired.Add(1)
		}
	}
	return nil
}

func compileClusterset(r ClustersetRules) (*csRules, error) {
	s := &csRules{vips: map[[16]byte]*csService{}, backends: map[[16]byte]struct{}{}}
	if r.SNAT.IsValid() {
		s.snat, s.snatOK = addr16(r.SNAT.Unmap()), true
	}
	for i, v := range r.Services {
		if !v.VIP.IsValid() {
			return nil, fmt.Errorf("natengine: Services[%d].VIP is not set; give the service's clusterset IP", i)
		}
		k := addr16(v.VIP.Unmap())
		if _, dup := s.vips[k]; dup || (s.snatOK && k == s.snat) {
			return nil, fmt.Errorf("natengine: Services[%d].VIP %s is listed twice, or is the SNAT address; give every service its own VIP", i, v.VIP)
		}
		svc := &csService{ports: slices.Clone(v.Ports)}
		for j, b := range v.Backends {
			if !b.Addr.IsValid() || b.Addr.Is4() != v.VIP.Is4() {
				return nil, fmt.Errorf("natengine: Services[%d].Backends[%d].Addr %v is not an address of the VIP's family", i, j, b.Addr)
			}
			a := addr16(b.Addr.Unmap())
			s.backends[a] = struct{}{}
			if b.Peer == LocalPeer {
				svc.local, svc.hasLocal = a, true
				continue
			}
			svc.remotes = append(svc.remotes, csRemote{b.Peer, a})
		}
		s.vips[k] = svc
	}
	return s, nil
}

// holds reports whether the rules still give f its backend.
func (s *csRules) holds(f *csFlow) bool {
	svc := s.vips[f.vip]
	if svc == nil || (!f.echo && !svc.serves(f.fwd.proto, f.fwd.bp)) {
		return false
	}
	if f.peer == LocalPeer {
		return svc.hasLocal && svc.local == f.backend && s.snatOK && s.snat == f.snat
	}
	for _, r := range svc.remotes {
		if r.peer == f.peer && r.addr == f.backend {
			return true
		}
	}
	return false
}

func (svc *csService) serves(proto uint8, port uint16) bool {
	for _, p := range svc.ports {
		if p.Proto == proto && p.Port == port {
			return true
		}
	}
	return false
}

// Egress translates packet b, read from the device towards a VIP or the
// SNAT address, decoded into p; it rewrites b and p in place. A packet to a
// VIP is the client's: a new connection gets a backend, and the destination
// becomes the backend's address (and, for a local backend, the source the
// SNAT address and a port of its own). A packet to the SNAT address is a
// local backend's reply, sent back to its client from the VIP.
func (c *Clusterset) Egress(b []byte, p *packet.Parsed) VIPVerdict {
	s := c.rules.Load()
	if s == nil {
		return c.drop(VIPDropUnknownVIP)
	}
	now := c.clock()
	c.maybeSweep(now)
	if p.FragOffset != 0 {
		return c.drop(VIPDropFragment)
	}
	if isICMPError(p) {
		return c.egressError(s, b, p, now)
	}
	var k key
	k.of(p)
	if s.snatOK && p.Dst == s.snat {
		if !c.reverse(&k, b, p, now) {
			return c.drop(VIPDropNoFlow)
		}
		return VIPLocal
	}
	f, fwd := c.lookup(&k, now)
	if f != nil && !fwd {
		// A packet from a backend to a VIP with the tuple of a reply
		// belongs to no connection of ours.
		f = nil
	}
	if f == nil {
		var r VIPDropReason
		if f, r = c.create(s, &k, p, now); f == nil {
			return c.drop(r)
		}
	} else {
		c.touch(f, now, false, p.TCPFlags)
	}
	packet.SetDstAddr(b, p, f.backend)
	c.xlated.Add(1)
	if f.peer != LocalPeer {
		return VIPRoute
	}
	packet.SetSrc(b, p, f.snat, f.sport)
	return VIPLocal
}

// Ingress translates packet b, arrived from a remote cluster and decoded
// into p, when it is a remote backend's reply to a connection to a VIP: its
// source becomes the VIP. Other packets pass untouched.
func (c *Clusterset) Ingress(b []byte, p *packet.Parsed) {
	s := c.rules.Load()
	if s == nil || p.FragOffset != 0 {
		return
	}
	if isICMPError(p) {
		c.reverseError(b, p, c.clock())
		return
	}
	if _, ok := s.backends[p.Src]; !ok {
		return
	}
	var k key
	k.of(p)
	now := c.clock()
	c.maybeSweep(now)
	c.reverse(&k, b, p, now)
}

// ICMP errors about a connection are translated through the packet they
// quote, as Engine's are (icmp.go): the quote is a packet of the
// connection as its sender saw it, translated, so its reversed tuple finds
// the connection. Errors never create or refresh a connection.

// egressError translates an error read from the device: to the SNAT
// address, a local backend's side complaining about a client's packet; to a
// VIP, the client's side complaining about a reply.
func (c *Clusterset) egressError(s *csRules, b []byte, p *packet.Parsed, now uint32) VIPVerdict {
	if s.snatOK && p.Dst == s.snat {
		if !c.reverseError(b, p, now) {
			return c.drop(VIPDropNoFlow)
		}
		return VIPLocal
	}
	var ip packet.Parsed
	inner, ok := quote(b, p, &ip)
	if !ok {
		return c.drop(VIPDropNoFlow)
	}
	// The quote is a reply as the client saw it: VIP → client.
	k := key{a: ip.Dst, ap: ip.DstPort, b: ip.Src, bp: ip.SrcPort, proto: ip.Proto, v6: ip.Version == 6}
	f, fwd := c.lookup(&k, now)
	if f == nil || !fwd || p.Dst != f.vip {
		return c.drop(VIPDropNoFlow)
	}
	packet.SetSrcAddr(inner, &ip, f.backend)
	if f.peer == LocalPeer {
		packet.SetDst(inner, &ip, f.snat, f.sport)
		if p.Src == f.client {
			packet.SetSrcAddr(b, p, f.snat)
		}
	}
	packet.SetDstAddr(b, p, f.backend)
	packet.RecomputeL4Checksum(b, p)
	c.xlated.Add(1)
	if f.peer == LocalPeer {
		return VIPLocal
	}
	return VIPRoute
}

// reverseError translates an error, from the backend's side to the client
// or the SNAT address, about a client's packet: the client gets it about
// the packet it sent, to the VIP, and from the VIP when the backend sent
// it. It reports whether the error was about a connection.
func (c *Clusterset) reverseError(b []byte, p *packet.Parsed, now uint32) bool {
	var ip packet.Parsed
	inner, ok := quote(b, p, &ip)
	if !ok {
		return false
	}
	k := key{a: ip.Dst, ap: ip.DstPort, b: ip.Src, bp: ip.SrcPort, proto: ip.Proto, v6: ip.Version == 6}
	f, fwd := c.lookup(&k, now)
	// An error must be sent to the connection's own client side, or it
	// could be used to reach another's.
	if f == nil || fwd || p.Dst != f.rev.b {
		return false
	}
	packet.SetSrc(inner, &ip, f.client, f.cport)
	packet.SetDstAddr(inner, &ip, f.vip)
	if p.Src == f.backend {
		packet.SetSrcAddr(b, p, f.vip)
	}
	packet.SetDstAddr(b, p, f.client)
	packet.RecomputeL4Checksum(b, p)
	c.xlated.Add(1)
	return true
}

// reverse rewrites a backend's reply, key k, back to its client and reports
// whether k is a connection's reply.
func (c *Clusterset) reverse(k *key, b []byte, p *packet.Parsed, now uint32) bool {
	f, fwd := c.lookup(k, now)
	if f == nil || fwd {
		return false
	}
	c.touch(f, now, true, p.TCPFlags)
	packet.SetSrcAddr(b, p, f.vip)
	packet.SetDst(b, p, f.client, f.cport)
	c.xlated.Add(1)
	return true
}

// lookup finds the live connection k belongs to, and whether k is its
// client's direction. It allocates nothing.
func (c *Clusterset) lookup(k *key, now uint32) (*csFlow, bool) {
	sh := &c.shards[k.shard()]
	sh.mu.RLock()
	f := sh.m[*k]
	sh.mu.RUnlock()
	if f == nil || c.expired(f, now) {
		return nil, false
	}
	return f, f.fwd == *k
}

func (c *Clusterset) expired(f *csFlow, now uint32) bool {
	seen := f.seen.Load()
	return now > seen && now-seen >= c.to.ofState(f.echo, f.state.Load())
}

func (c *Clusterset) touch(f *csFlow, now uint32, reply bool, flags uint8) {
	for {
		old := f.state.Load()
		st := advance(old, f.fwd.proto, reply, flags)
		if st == old || f.state.CompareAndSwap(old, st) {
			break
		}
	}
	if f.seen.Load() != now {
		f.seen.Store(now)
	}
}

// create makes the connection of client packet p (key k), or returns why
// not.
func (c *Clusterset) create(s *csRules, k *key, p *packet.Parsed, now uint32) (*csFlow, VIPDropReason) {
	svc := s.vips[k.b]
	if svc == nil {
		return nil, VIPDropUnknownVIP
	}
	echo := isEcho(p)
	switch {
	case p.Proto != protoTCP && p.Proto != protoUDP && !echo:
		if p.Proto == protoICMPv4 || p.Proto == protoICMPv6 {
			return nil, VIPDropNoFlow
		}
		return nil, VIPDropUnsupported
	case !mayStart(p):
		return nil, VIPDropNoFlow
	case !echo && !svc.serves(p.Proto, p.DstPort):
		return nil, VIPDropPortNotServed
	}
	f := &csFlow{fwd: *k, vip: k.b, client: k.a, cport: k.ap, sport: k.ap, peer: LocalPeer, echo: echo}
	if svc.hasLocal && s.snatOK {
		f.backend, f.snat = svc.local, s.snat
	} else if !c.pickRemote(svc, f) {
		return nil, VIPDropNoBackend
	}
	f.state.Store(advance(initialState(p.Proto), p.Proto, false, p.TCPFlags))
	f.seen.Store(now)

	c.mu.Lock()
	defer c.mu.Unlock()
	// Another goroutine may have made it meanwhile, or rules changed.
	if cur := c.rules.Load(); cur != s && !cur.holds(f) {
		return nil, VIPDropNoBackend
	}
	if old, _ := c.lookupLocked(k); old != nil {
		if !c.expired(old, now) {
			return old, 0
		}
		c.remove(old)
		c.exp.Add(1)
	}
	if len(c.flows) >= c.max {
		c.sweepLocked(now, len(c.flows))
		if len(c.flows) >= c.max {
			return nil, VIPDropTableFull
		}
	}
	f.rev = key{a: f.backend, ap: k.bp, b: f.client, bp: f.cport, proto: k.proto, v6: k.v6}
	if f.peer == LocalPeer {
		f.rev.b = f.snat
		if !c.allocPort(f) {
			return nil, VIPDropPortsExhausted
		}
	}
	if echo {
		f.rev.ap = f.rev.bp
	}
	c.insert(f)
	if f.peer == LocalPeer {
		c.local.Add(1)
	} else {
		c.remote.Add(1)
	}
	return f, 0
}

// pickRemote gives f a remote backend whose connection is up, taking the
// service's remotes in turn.
func (c *Clusterset) pickRemote(svc *csService, f *csFlow) bool {
	n := len(svc.remotes)
	if n == 0 {
		return false
	}
	start := int(svc.rr.Add(1) % uint32(n))
	for i := range n {
		r := svc.remotes[(start+i)%n]
		if c.up(r.peer) {
			f.peer, f.backend = r.peer, r.addr
			return true
		}
	}
	return false
}

// allocPort gives local connection f an SNAT port (echo identifier) whose
// reply tuple no connection holds: the client's own when free, else one
// drawn at random from the unprivileged range. Under mu.
func (c *Clusterset) allocPort(f *csFlow) bool {
	try := func(port uint16) bool {
		f.rev.bp = port
		if f.echo {
			f.rev.ap = port
		}
		if old, _ := c.lookupLocked(&f.rev); old != nil {
			return false
		}
		f.sport = port
		return true
	}
	if try(f.cport) {
		return true
	}
	for range portTries {
		if try(uint16(portFirst + c.rand()%portCount)) {
			return true
		}
	}
	return false
}

func (c *Clusterset) lookupLocked(k *key) (*csFlow, bool) {
	sh := &c.shards[k.shard()]
	sh.mu.RLock()
	f := sh.m[*k]
	sh.mu.RUnlock()
	return f, f != nil && f.fwd == *k
}

// insert links f under both keys. Under mu.
func (c *Clusterset) insert(f *csFlow) {
	for _, k := range [2]*key{&f.fwd, &f.rev} {
		sh := &c.shards[k.shard()]
		sh.mu.Lock()
		sh.m[*k] = f
		sh.mu.Unlock()
	}
	f.idx = len(c.flows)
	c.flows = append(c.flows, f)
	c.live.Add(1)
}

// remove unlinks f. Under mu.
func (c *Clusterset) remove(f *csFlow) {
	for _, k := range [2]*key{&f.fwd, &f.rev} {
		sh := &c.shards[k.shard()]
		sh.mu.Lock()
		if sh.m[*k] == f {
			delete(sh.m, *k)
		}
		sh.mu.Unlock()
	}
	last := len(c.flows) - 1
	c.flows[f.idx] = c.flows[last]
	c.flows[f.idx].idx = f.idx
	c.flows[last] = nil
	c.flows = c.flows[:last]
	if c.cursor > last {
		c.cursor = 0
	}
	c.live.Add(-1)
}

// sweepBudget bounds the connections one packet examines for expiry, when
// a new second begins.
const sweepBudget = 256

// maybeSweep examines the next sweepBudget connections for expiry once a
// second, on the first packet that sees it begin.
func (c *Clusterset) maybeSweep(now uint32) {
	last := c.swept.Load()
	if now == last || !c.swept.CompareAndSwap(last, now) {
		return
	}
	c.mu.Lock()
	c.sweepLocked(now, sweepBudget)
	c.mu.Unlock()
}

// sweepLocked examines up to n connections from the cursor on and removes
// the expired ones. Under mu.
func (c *Clusterset) sweepLocked(now uint32, n int) {
	for ; n > 0 && len(c.flows) > 0; n-- {
		if c.cursor >= len(c.flows) {
			c.cursor = 0
		}
		if f := c.flows[c.cursor]; c.expired(f, now) {
			c.remove(f) // the last connection moved into the cursor's place
			c.exp.Add(1)
			continue
		}
		c.cursor++
	}
}

func (c *Clusterset) drop(r VIPDropReason) VIPVerdict {
	c.drops[r].Add(1)
	return VIPDrop
}

// Stats returns the counters, after removing every expired connection.
func (c *Clusterset) Stats() ClustersetStats {
	c.mu.Lock()
	c.sweepLocked(c.clock(), len(c.flows))
	c.mu.Unlock()
	s := ClustersetStats{
		Flows:       int(c.live.Load()),
		LocalFlows:  c.local.Load(),
		RemoteFlows: c.remote.Load(),
		Translated:  c.xlated.Load(),
		Expired:     c.exp.Load(),
		Retired:     c.retired.Load(),
	}
	for i := range s.Drops {
		s.Drops[i] = c.drops[i].Load()
	}
	return s
}

// shard picks a key's lock shard from its ports and the low bytes of its
// addresses, which vary most between connections.
func (k *key) shard() int {
	h := uint32(k.ap)<<16 | uint32(k.bp)
	h ^= binary.LittleEndian.Uint32(k.a[12:]) ^ binary.LittleEndian.Uint32(k.b[12:])
	h ^= binary.LittleEndian.Uint32(k.a[:4]) ^ binary.LittleEndian.Uint32(k.b[:4])
	return int((h * 0x9e3779b1) >> (32 - 6))
}
