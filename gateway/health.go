package gateway

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snorkel-net/snorkel/packet"
	"github.com/snorkel-net/snorkel/transport"
)

// Health checks: every interval the gateway sends an ICMP echo request of
// its own from tun.address to each remote gateway's healthCheckIP, straight
// into the transport, and the remote gateway answers it in userspace, straight
// back through the transport. Neither packet passes the TUN device, a kernel
// route or Globalnet's translation, so a probe measures the tunnel alone
// whatever the nodes' kernels do. A remote's status follows its probes:
// connecting before the first reply, connected after a reply, error after
// maxPacketLossCount probes in a row went unanswered (Submariner's pinger
// makes the same three states).
//
// Without tun.address the gateway has no address to probe from: it sends no
// probes, answers none, and each remote's status stays traffic-based, as do
// those of remotes without a healthCheckIP. With probing turned off
// (healthCheck.enabled: false) it still answers the remotes' probes.

// Health-check defaults, as Submariner's pinger has them.
const (
	DefaultHealthInterval     = time.Second
	DefaultMaxPacketLossCount = 5
)

// Bounds of HealthCheck's fields.
const (
	minHealthInterval     = 100 * time.Millisecond
	maxHealthInterval     = time.Minute
	maxMaxPacketLossCount = 1000
)

// rttWindow is how many of the latest round-trip times the statistics cover.
// Submariner's pinger keeps up to 1000 and then starts again from two; a
// fixed window gives statistics that follow the tunnel as it is now.
const rttWindow = 64

// maxEchoLen bounds the echo requests a gateway answers: the IPv6 minimum
// MTU, which any tunnel carries. Probes are far smaller.
const maxEchoLen = 1280

// echoRepliesPerRemote, times the remotes with a healthCheckIP, bounds the
// echo requests a gateway answers per second: twice what the fastest
// probing allowed needs, so that a remote cannot make it spend more.
const echoRepliesPerRemote = 2 * int(time.Second/minHealthInterval)

// HealthCheck tunes the health probes. Probing needs tun.address (where
// probes come from) and, per remote, its healthCheckIP (where they go).
type HealthCheck struct {
	// Enabled turns probing on or off; unset, it is on when tun.address
	// is set. Remotes without a healthCheckIP are never probed.
	Enabled *bool `json:"enabled,omitempty"`
	// Interval is the time between probes to each remote, as a Go
	// duration ("1s"); default 1s, from 100ms to 1m.
	Interval string `json:"interval,omitempty"`
	// MaxPacketLossCount is how many probes in a row may go unanswered
	// before the connection is in error; default 5.
	MaxPacketLossCount int `json:"maxPacketLossCount,omitempty"`
}

// healthSpec is the validated health-check configuration.
type healthSpec struct {
	local    netip.Addr   // tun.address; invalid when unset
	remotes  []netip.Addr // each remote's healthCheckIP; invalid where unset
	probe    bool
	interval time.Duration
	maxLoss  int
}

// parseHealth parses the healthCheck section into s.Health.
func (c *Config) parseHealth(errs *errList, s *Spec) {
	hc := c.HealthCheck
	if hc == nil {
		return
	}
	s.Health.Enabled = hc.Enabled
	s.Health.MaxPacketLossCount = hc.MaxPacketLossCount
	if hc.Interval != "" {
		d, err := time.ParseDuration(hc.Interval)
		if err != nil {
			errs.add("healthCheck.interval", "%q is not a duration from %s to %s; write it like 1s or 500ms", hc.Interval, minHealthInterval, maxHealthInterval)
		}
		s.Health.Interval = d
	}
}

// deriveHealth checks the health-check settings and the remotes'
// healthCheckIPs. It runs after the remotes' routed CIDRs are known.
func (s *Spec) deriveHealth(errs *errList, d *spec) {
	h := &s.Health
	hs := &healthSpec{
		local:    d.tunAddr.Addr(),
		remotes:  make([]netip.Addr, len(s.Remotes)),
		interval: h.Interval,
		maxLoss:  h.MaxPacketLossCount,
	}
	d.health = hs
	hs.probe = hs.local.IsValid()
	if h.Interval < minHealthInterval || h.Interval > maxHealthInterval {
		errs.add("healthCheck.interval", "%q is not a duration from %s to %s; write it like 1s or 500ms", h.Interval, minHealthInterval, maxHealthInterval)
	}
	if n := h.MaxPacketLossCount; n < 0 || n > maxMaxPacketLossCount {
		errs.add("healthCheck.maxPacketLossCount", "%d is out of range; use 1 to %d, or leave it unset for %d", n, maxMaxPacketLossCount, DefaultMaxPacketLossCount)
	}
	if h.Enabled != nil {
		if *h.Enabled && !hs.local.IsValid() {
			errs.add("healthCheck.enabled", "is true but tun.address is empty; set tun.address to this gateway's health-check address (probes leave from it), or set enabled to false")
		}
		hs.probe = *h.Enabled && hs.local.IsValid()
	}

	seen := map[netip.Addr]string{}
	for i, r := range s.Remotes {
		a := r.HealthCheckIP
		if !a.IsValid() {
			continue
		}
		f := fmt.Sprintf("remotes[%d].healthCheckIP", i)
		if msg := healthIPProblem(s, d, i, a); msg != "" {
			errs.add(f, "%s", msg)
			continue
		}
		if prev, dup := seen[a]; dup {
			errs.add(f, "%s is already %s; every gateway needs its own health-check address", a, prev)
			continue
		}
		seen[a] = f
		hs.remotes[i] = a
	}
}

// healthIPProblem says what is wrong with a as remote i's healthCheckIP, or
// returns "". The address must name that remote's gateway alone: probes from
// it are answered only when that remote sent them.
func healthIPProblem(c *Spec, s *spec, i int, a netip.Addr) string {
	local := s.health.local
	switch {
	case a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Sprintf("%s is not a unicast address a gateway can own; give the remote gateway's health-check address", a)
	case local.IsValid() && a.Is4() != local.Is4():
		return fmt.Sprintf("%s and tun.address %s are of different IP versions; a probe goes from tun.address to healthCheckIP, so give both of one version", a, local)
	}
	if s.globalnet == nil {
		if a == local {
			return fmt.Sprintf("%s is this gateway's own tun.address; give the remote gateway's address", a)
		}
		for _, p := range s.local {
			if p.Contains(a) {
				return fmt.Sprintf("%s lies in this cluster's CIDR %s; the remote gateway's address cannot be in this cluster", a, p)
			}
		}
	} else if g := s.globalnet.rules.Global; g.IsValid() && g.Contains(a) {
		return fmt.Sprintf("%s lies in globalnet.globalCIDR %s, this cluster's own global CIDR; give the remote gateway's address", a, g)
	}
	for j, r := range s.remotes {
		if j == i {
			continue
		}
		for _, p := range r.cidrs {
			if p.Contains(a) {
				return fmt.Sprintf("%s lies in %s of remotes[%d] (cluster %q); a gateway's health-check address must not belong to another cluster", a, p, j, c.Remotes[j].ID)
			}
		}
	}
	return ""
}

// allowedIPs are what WireGuard's cryptokey routing binds to remote i: its
// routed CIDRs and its healthCheckIP, so that probes reach it and its
// answers are accepted from it.
func (s *spec) allowedIPs(i int) []netip.Prefix {
	out := s.remotes[i].cidrs
	a := s.health.remotes[i]
	if !a.IsValid() {
		return out
	}
	for _, p := range out {
		if p.Contains(a) {
			return out
		}
	}
	return append(out[:len(out):len(out)], netip.PrefixFrom(a, a.BitLen()))
}

// tokenLen is the length of a probe's payload: a random token of the
// gateway's, which replies must carry back.
const tokenLen = 8

// echoTTL is the TTL or hop limit of the echoes the gateway writes.
const echoTTL = 64

// echoTailroom is the room behind an echo for a transport's trailer (ESP's
// padding and ICV).
const echoTailroom = 64

// health is a gateway's prober and responder. It exists only when the
// gateway has a tun.address and at least one remote has a healthCheckIP.
type health struct {
	// addr and proto are what Deliver compares each packet with: the
	// health address as packet.Parsed holds it, and the protocol number
	// of ICMP or ICMPv6.
	addr    [16]byte
	proto   uint8
	version uint8
	local   netip.Addr
	// echoRequest and echoReply are the ICMP types of local's version.
	echoRequest, echoReply uint8

	// id and token mark this gateway's probes: the echo identifier, and
	// the payload replies must carry back.
	id    uint16
	token [tokenLen]byte

	interval time.Duration
	remotes  []netip.Addr     // healthCheckIP per remote; invalid where unset
	byAddr   map[[16]byte]int // healthCheckIP as packet.Parsed holds it → remote
	probers  []*prober        // per remote; nil where not probed
	now      func() time.Time // the clock round trips are timed on

	budget  atomic.Int64 // echo requests still to answer this second
	perSec  int64        // what the budget is refilled to each second
	scratch sync.Pool    // *echoScratch
}

// echoScratch is a buffer to build one echo in, with the headroom and the
// tailroom a transport needs.
type echoScratch struct {
	buf []byte
	one [1][]byte
}

// newHealth returns the prober and responder for spec s, whose remotes
// sit in slots, or nil when there is nothing to probe or answer. From prev
// it keeps the probe identity and each prober whose remote kept its slot
// and healthCheckIP, so that a change elsewhere loses no probe history.
func newHealth(s *spec, slots []int, nslots int, prev *health) *health {
	hs := s.health
	if hs == nil || !hs.local.IsValid() {
		return nil
	}
	h := &health{
		addr:     addrKey(hs.local),
		local:    hs.local,
		id:       uint16(rand.N(0xffff)) + 1,
		interval: hs.interval,
		remotes:  make([]netip.Addr, nslots),
		byAddr:   map[[16]byte]int{},
		probers:  make([]*prober, nslots),
		now:      time.Now,
	}
	binary.BigEndian.PutUint64(h.token[:], rand.Uint64())
	if prev != nil && prev.local == h.local {
		h.id, h.token, h.now = prev.id, prev.token, prev.now
	}
	for i, a := range hs.remotes {
		if !a.IsValid() {
			continue
		}
		slot := slots[i]
		h.remotes[slot] = a
		h.byAddr[addrKey(a)] = slot
		if !hs.probe {
			continue
		}
		if prev != nil && prev.id == h.id && slot < len(prev.probers) && prev.probers[slot] != nil &&
			prev.remotes[slot] == a && prev.probers[slot].maxLoss == hs.maxLoss {
			h.probers[slot] = prev.probers[slot]
		} else {
			h.probers[slot] = newProber(a, hs.maxLoss)
		}
	}
	if len(h.byAddr) == 0 {
		return nil
	}
	if hs.local.Is4() {
		h.version, h.proto = 4, packet.ProtoICMPv4
		h.echoRequest, h.echoReply = packet.ICMPv4EchoRequest, packet.ICMPv4EchoReply
	} else {
		h.version, h.proto = 6, packet.ProtoICMPv6
		h.echoRequest, h.echoReply = packet.ICMPv6EchoRequest, packet.ICMPv6EchoReply
	}
	h.perSec = int64(echoRepliesPerRemote * len(h.byAddr))
	h.budget.Store(h.perSec)
	h.scratch.New = func() any {
		return &echoScratch{buf: make([]byte, transport.Headroom+maxEchoLen+echoTailroom)}
	}
	return h
}

// addrKey is a as packet.Parsed holds addresses: IPv4 in the first four
// bytes, the rest zero.
func addrKey(a netip.Addr) [16]byte {
	var k [16]byte
	if a.Is4() {
		v := a.As4()
		copy(k[:4], v[:])
		return k
	}
	return a.As16()
}

// probeLoop sends a round of probes at once and then every interval, until
// the gateway closes. The remotes, and with them the interval, may change
// between rounds.
func (g *Gateway) probeLoop() {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-g.closed:
			return
		case <-t.C:
		}
		interval := DefaultHealthInterval
		if h := g.set.Load().health; h != nil {
			interval = h.interval
			g.sendProbes()
		}
		t.Reset(interval)
	}
}

// sendProbes settles each probed remote's previous probe and sends it the
// next, through the transport.
func (g *Gateway) sendProbes() {
	rs := g.set.Load()
	h := rs.health
	sc := h.scratch.Get().(*echoScratch)
	now := h.now()
	var body [4 + tokenLen]byte // identifier, sequence number, token
	binary.BigEndian.PutUint16(body[0:], h.id)
	copy(body[4:], h.token[:])
	for slot, pr := range h.probers {
		if pr == nil {
			continue
		}
		binary.BigEndian.PutUint16(body[2:], pr.next(now))
		n := writeEcho(sc.buf[transport.Headroom:], h.echoRequest, h.local, h.remotes[slot], body[:])
		sc.one[0] = sc.buf[:transport.Headroom+n]
		if err := g.tr.Send(slot, sc.one[:], transport.Headroom); err != nil {
			rs.bySlot[slot].c.drops[dropSendFailed].Add(1)
		}
	}
	sc.one[0] = nil
	h.scratch.Put(sc)
}

// healthReceive takes an ICMP or ICMPv6 packet b (decoded as p) that came
// from peer to the health address. It answers an echo request from a
// remote's healthCheckIP, matches an echo reply to this gateway's probes,
// and returns true; it returns false for anything else, which takes the
// normal path (a ping of the node's own, say). A probe or reply from a
// remote's healthCheckIP that another remote sent is dropped as spoofed:
// the transport, not the address, says who sent a packet.
func (g *Gateway) healthReceive(rs *remoteSet, peer int, b []byte, p *packet.Parsed) bool {
	h := rs.health
	if p.Version != h.version || p.FragOffset != 0 {
		return false
	}
	request := p.ICMPType == h.echoRequest
	if !request && (p.ICMPType != h.echoReply || p.SrcPort != h.id) {
		return false
	}
	r, ok := h.byAddr[p.Src]
	if !ok {
		return false
	}
	if peer != transport.PeerAny && peer != r {
		g.peerCounters(rs, peer).drops[dropSpoofedSource].Add(1)
		return true
	}
	c := rs.bySlot[r].c
	m := b[p.IPHeaderLen:p.Length]
	if p.MoreFragments || !h.checksumOK(m, p) {
		c.drops[dropHealthMalformed].Add(1)
		return true
	}
	if request {
		g.answerEcho(h, r, c, m)
		return true
	}
	pr := h.probers[r]
	if pr == nil || len(m) != packet.ICMPHeaderLen+tokenLen || [tokenLen]byte(m[packet.ICMPHeaderLen:]) != h.token ||
		!pr.reply(binary.BigEndian.Uint16(m[6:]), h.now()) {
		c.drops[dropHealthUnmatched].Add(1)
	}
	return true
}

// checksumOK verifies the checksum of ICMP message m of packet p.
func (h *health) checksumOK(m []byte, p *packet.Parsed) bool {
	var pseudo uint16
	if h.version == 6 {
		pseudo = packet.PseudoHeaderChecksum(packet.ProtoICMPv6, p.Src[:], p.Dst[:], len(m))
	}
	return packet.Checksum(m, pseudo) == 0xffff
}

// answerEcho sends the remote in slot r the reply to its echo request m
// (the ICMP message), back through the transport, within the rate limit;
// c are that remote's counters.
func (g *Gateway) answerEcho(h *health, r int, c *counters, m []byte) {
	hdr := packet.IPv4MinHeaderLen
	if h.version == 6 {
		hdr = packet.IPv6HeaderLen
	}
	if hdr+len(m) > maxEchoLen {
		c.drops[dropHealthMalformed].Add(1)
		return
	}
	if g.dev.Load() == nil {
		// Run has not started: the transport may deliver before New has
		// attached it to the gateway, so it cannot be used to answer.
		c.drops[dropSendFailed].Add(1)
		return
	}
	if h.budget.Add(-1) < 0 {
		c.drops[dropHealthRateLimited].Add(1)
		return
	}
	sc := h.scratch.Get().(*echoScratch)
	n := writeEcho(sc.buf[transport.Headroom:], h.echoReply, h.local, h.remotes[r], m[4:])
	sc.one[0] = sc.buf[:transport.Headroom+n]
	if err := g.tr.Send(r, sc.one[:], transport.Headroom); err != nil {
		c.drops[dropSendFailed].Add(1)
	}
	sc.one[0] = nil
	h.scratch.Put(sc)
}

// writeEcho writes into b an ICMP or ICMPv6 echo message of type typ from
// src to dst whose body after the checksum (identifier, sequence number,
// data) is body, and returns its length, or 0 when b is too small. An IPv4
// echo carries DF: it is small enough for any tunnel.
func writeEcho(b []byte, typ uint8, src, dst netip.Addr, body []byte) int {
	if src.Is4() {
		n := packet.IPv4MinHeaderLen + 4 + len(body)
		if len(b) < n {
			return 0
		}
		h := packet.IPv4(b[:packet.IPv4MinHeaderLen])
		h[0], h[1] = 0x45, 0
		binary.BigEndian.PutUint16(h[2:], uint16(n))
		binary.BigEndian.PutUint32(h[4:], 0x4000) // identification 0, DF (RFC 6864)
		h[8], h[9] = echoTTL, packet.ProtoICMPv4
		s, d := src.As4(), dst.As4()
		copy(h[12:16], s[:])
		copy(h[16:20], d[:])
		h.SetChecksum(h.ComputeChecksum())
		m := packet.ICMPv4(b[packet.IPv4MinHeaderLen:n])
		m[0], m[1] = typ, 0
		copy(m[4:], body)
		m.SetChecksum(m.ComputeChecksum())
		return n
	}
	n := packet.IPv6HeaderLen + 4 + len(body)
	if len(b) < n {
		return 0
	}
	h := packet.IPv6(b[:packet.IPv6HeaderLen])
	binary.BigEndian.PutUint32(h[0:], 6<<28)
	binary.BigEndian.PutUint16(h[4:], uint16(n-packet.IPv6HeaderLen))
	h[6], h[7] = packet.ProtoICMPv6, echoTTL
	s, d := src.As16(), dst.As16()
	h.SetSrc(s)
	h.SetDst(d)
	m := packet.ICMPv6(b[packet.IPv6HeaderLen:n])
	m[0], m[1] = typ, 0
	copy(m[4:], body)
	m.SetChecksum(m.ComputeChecksum(packet.PseudoHeaderChecksum(packet.ProtoICMPv6, s[:], d[:], len(m))))
	return n
}

// Connection states, in Submariner's words.
const (
	statusConnecting = "connecting"
	statusConnected  = "connected"
	statusError      = "error"
)

// prober is the probe state of one remote: connecting until the first
// reply, connected after any reply, error once maxLoss probes in a row went
// unanswered. A probe is lost when the next one is due before its reply.
type prober struct {
	ip      netip.Addr
	maxLoss int

	mu                   sync.Mutex
	seq                  uint16
	sentAt               time.Time
	waiting              bool // probe seq has no reply yet
	misses               int  // probes lost in a row
	sent, received, lost uint64
	status               string
	established          time.Time // when status last became connected
	rtt                  rttRing
}

func newProber(ip netip.Addr, maxLoss int) *prober {
	return &prober{ip: ip, maxLoss: maxLoss, status: statusConnecting}
}

// next counts the previous probe lost if no reply came, and returns the
// sequence number of the probe sent at now.
func (p *prober) next(now time.Time) uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting {
		p.lost++
		p.misses++
		if p.misses >= p.maxLoss {
			p.status = statusError
		}
	}
	p.seq++
	p.sent++
	p.sentAt, p.waiting = now, true
	return p.seq
}

// reply records the reply to probe seq, received at now. It returns false
// when seq is not the probe awaiting its reply: a duplicate, or a reply too
// late, after its probe was counted lost.
func (p *prober) reply(seq uint16, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.waiting || seq != p.seq {
		return false
	}
	p.waiting = false
	p.received++
	p.misses = 0
	if p.status != statusConnected {
		p.established = now
	}
	p.status = statusConnected
	p.rtt.add(max(now.Sub(p.sentAt), 0))
	return true
}

// snapshot returns the status, the reason for an error, the counters, and
// when the status last became connected (zero if it never did).
func (p *prober) snapshot() (status, message string, hs *HealthStatus, established time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status == statusError {
		message = fmt.Sprintf("no reply to the last %d health probes to %s", p.maxLoss, p.ip)
	}
	return p.status, message, &HealthStatus{
		HealthCheckIP: p.ip,
		Sent:          p.sent,
		Received:      p.received,
		Lost:          p.lost,
		RTT:           p.rtt.stats(),
	}, p.established
}

// rttRing holds the latest rttWindow round-trip times.
type rttRing struct {
	samples [rttWindow]time.Duration
	n, next int
	last    time.Duration
}

func (r *rttRing) add(d time.Duration) {
	r.samples[r.next] = d
	r.next = (r.next + 1) % rttWindow
	r.n = min(r.n+1, rttWindow)
	r.last = d
}

// stats summarises the window, or returns nil when it is empty. The
// standard deviation is the population's, as Submariner computes it.
func (r *rttRing) stats() *RTTStats {
	if r.n == 0 {
		return nil
	}
	s := r.samples[:r.n]
	st := &RTTStats{Last: r.last, Min: s[0], Max: s[0]}
	var sum float64
	for _, d := range s {
		st.Min, st.Max = min(st.Min, d), max(st.Max, d)
		sum += float64(d)
	}
	mean := sum / float64(len(s))
	var sq float64
	for _, d := range s {
		sq += (float64(d) - mean) * (float64(d) - mean)
	}
	st.Average = time.Duration(math.Round(mean))
	st.StdDev = time.Duration(math.Round(math.Sqrt(sq / float64(len(s)))))
	return st
}

// HealthStatus is what the health probes to one remote found.
type HealthStatus struct {
	// HealthCheckIP is where the probes go.
	HealthCheckIP netip.Addr `json:"healthCheckIP"`
	Sent          uint64     `json:"sent"`
	Received      uint64     `json:"received"`
	// Lost counts probes whose reply had not come when the next was due.
	Lost uint64 `json:"lost"`
	// RTT is nil until the first reply.
	RTT *RTTStats `json:"rtt,omitempty"`
}

// RTTStats are the round-trip times of the last 64 replies, with the fields
// of Submariner's LatencyRTTSpec. JSON holds them as Go durations
// ("1.234ms"), as Submariner writes them.
type RTTStats struct {
	Last, Min, Average, Max, StdDev time.Duration
}

type rttJSON struct {
	Last    string `json:"last"`
	Min     string `json:"min"`
	Average string `json:"average"`
	Max     string `json:"max"`
	StdDev  string `json:"stdDev"`
}

// MarshalJSON writes each time as a Go duration.
func (r RTTStats) MarshalJSON() ([]byte, error) {
	return json.Marshal(rttJSON{r.Last.String(), r.Min.String(), r.Average.String(), r.Max.String(), r.StdDev.String()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *RTTStats) UnmarshalJSON(b []byte) error {
	var j rttJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	for _, f := range []struct {
		name, v string
		d       *time.Duration
	}{{"last", j.Last, &r.Last}, {"min", j.Min, &r.Min}, {"average", j.Average, &r.Average}, {"max", j.Max, &r.Max}, {"stdDev", j.StdDev, &r.StdDev}} {
		d, err := time.ParseDuration(f.v)
		if err != nil {
			return fmt.Errorf("rtt.%s: %w", f.name, err)
		}
		*f.d = d
	}
	return nil
}
