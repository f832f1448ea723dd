// Package gateway is Snorkel's data-plane engine. It reads batches of packets
// from a tun.Device (a kernel TUN device or a gVisor netstack), routes each by
// longest-prefix match on its destination to a remote cluster, clamps TCP MSS
// to the tunnel MTU and hands the batch to a transport; in the other
// direction it takes decapsulated batches from the transport, drops any packet
// whose inner source does not belong to the sending cluster, and writes the
// rest to the device. With Globalnet, remotes are known by their global CIDRs
// and the NAT engine (package natengine) translates every packet on the way.
// With a tun.address and the remotes' healthCheckIPs, the gateway probes each
// remote gateway through the tunnel and answers its probes (health.go).
// On a kernel TUN the gateway fails closed: OpenTUN leaves a guard on the
// remotes' CIDRs that drops their traffic whenever no gateway carries it,
// however the last one ended (guard.go).
//
// Concurrency: one goroutine reads the device; transports call Deliver from
// their own goroutines, possibly at once. Routing tables are immutable after
// New. Per-packet work allocates nothing; counters are updated per batch.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.zx2c4.com/wireguard/tun"

	"github.com/snorkel-net/snorkel/packet"
	"github.com/snorkel-net/snorkel/transport"
)

// Translator rewrites packets between the cluster's own addresses and the
// global address space (Globalnet). Egress runs after routing, on packets
// leaving for remote cluster `remote`; Ingress runs after the anti-spoofing
// check, on packets that arrived from `remote`. Each returns false to drop the
// packet. Implementations update p to match the rewritten bytes.
type Translator interface {
	Egress(remote int, b []byte, p *packet.Parsed) bool
	Ingress(remote int, b []byte, p *packet.Parsed) bool
}

// Options are the gateway's dependencies that do not belong in Config.
type Options struct {
	Logger *slog.Logger
	// Translator, if set, translates every packet in place of the NAT
	// engine New starts for a config with Globalnet.
	Translator Translator
}

// Gateway is a running data-plane engine. Create it with New and drive it
// with Run.
type Gateway struct {
	spec  *spec
	dev   atomic.Pointer[tun.Device] // set by Run
	tr    transport.Transport
	log   *slog.Logger
	xlate Translator
	// globalnet is the Globalnet section in force, for /status: the
	// spec's at first, replaced by updateGlobalnet.
	globalnet atomic.Pointer[globalnetSpec]

	remoteRoutes *routeTable // destination → remote index
	localRoutes  *routeTable // this cluster's own CIDRs (and TUN address) → 0
	// globalRoutes is this cluster's global CIDR with Globalnet, else nil:
	// the only destinations a remote may address before translation.
	globalRoutes *routeTable

	pathMTU int // the largest inner packet the tunnel carries
	mtu     int // the TUN device's MTU
	from4   netip.Addr
	from6   netip.Addr

	counters     []counters // one per remote, then one for unattributed drops
	now          atomic.Int64
	nowNano      atomic.Int64 // the same coarse clock, for the NAT engine
	tooBigBudget atomic.Int64 // ICMP errors left in the current second
	publicKey    string

	scratch   sync.Pool // *deliverScratch
	health    *health   // nil without a tun.address or remote healthCheckIPs
	closeOnce sync.Once
	closed    chan struct{}
}

// maxTooBigPerSecond bounds the ICMP errors the gateway generates, as
// routers do (RFC 1812 §4.3.2.8), so a flood of oversize packets cannot turn
// into a flood of replies.
const maxTooBigPerSecond = 100

// New validates cfg and opens the transport (binding its UDP port). The
// gateway moves packets once Run gives it a device; until then it drops what
// arrives. MTU tells what MTU that device should have.
func New(cfg Config, opts Options) (*Gateway, error) {
	s, err := cfg.build()
	if err != nil {
		return nil, err
	}
	g := newGateway(s, opts)
	if s.globalnet != nil && g.xlate == nil {
		if err := g.startNAT(); err != nil {
			return nil, err
		}
	}
	tr, key, err := newTransport(s, g, g.log)
	if err != nil {
		return nil, err
	}
	g.attach(tr, key)
	return g, nil
}

// newGateway builds a gateway for a validated spec, without its transport.
func newGateway(s *spec, opts Options) *Gateway {
	g := &Gateway{
		spec:     s,
		log:      opts.Logger,
		xlate:    opts.Translator,
		counters: make([]counters, len(s.remotes)+1),
		closed:   make(chan struct{}),
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	if s.globalnet != nil {
		g.globalnet.Store(s.globalnet)
	}
	var remote, local []route
	for i, r := range s.remotes {
		for _, p := range r.cidrs {
			remote = append(remote, route{p, i})
		}
	}
	for _, p := range s.local {
		local = append(local, route{p, 0})
	}
	if s.tunAddr.IsValid() {
		local = append(local, route{netip.PrefixFrom(s.tunAddr.Addr(), s.tunAddr.Addr().BitLen()), 0})
		if s.tunAddr.Addr().Is4() {
			g.from4 = s.tunAddr.Addr()
		} else {
			g.from6 = s.tunAddr.Addr()
		}
	}
	g.remoteRoutes = newRouteTable(remote)
	g.localRoutes = newRouteTable(local)
	if s.globalnet != nil {
		g.globalRoutes = newRouteTable([]route{{s.globalnet.rules.Global, 0}})
	}
	g.scratch.New = func() any { return newDeliverScratch(len(s.remotes)) }
	g.health = newHealth(s)
	g.tick()
	return g
}

// attach gives the gateway its transport, which fixes the tunnel MTU.
func (g *Gateway) attach(tr transport.Transport, publicKey string) {
	g.tr, g.publicKey = tr, publicKey
	g.pathMTU = g.spec.cfg.UnderlayMTU - tr.Overhead()
	g.mtu = g.pathMTU
	if g.spec.cfg.TUN.MTU != 0 {
		g.mtu = g.spec.cfg.TUN.MTU
	}
}

// MTU is the MTU the TUN device should have.
func (g *Gateway) MTU() int { return g.mtu }

// PublicKey is the gateway's WireGuard public key, empty for other transports.
func (g *Gateway) PublicKey() string { return g.publicKey }

// Run moves packets between dev and the transport until ctx is cancelled or
// the device fails, then closes both. The gateway owns dev from the call on.
// It returns nil on cancellation.
func (g *Gateway) Run(ctx context.Context, dev tun.Device) error {
	g.dev.Store(&dev)
	go func() {
		select {
		case <-ctx.Done():
		case <-g.closed:
		}
		g.Close()
	}()
	go g.clock()
	if g.health != nil && g.health.probing() {
		go g.probeLoop()
	}
	err := g.readLoop(dev)
	select {
	case <-g.closed:
		return nil
	default:
	}
	g.Close()
	return err
}

// Close stops the transport and the device, which unblocks Run.
func (g *Gateway) Close() error {
	var err error
	g.closeOnce.Do(func() {
		close(g.closed)
		err = g.tr.Close()
		if dev := g.dev.Load(); dev != nil {
			err = errors.Join(err, (*dev).Close())
		}
	})
	return err
}

// clock keeps a coarse time for per-batch bookkeeping: packets never call
// time.Now.
func (g *Gateway) clock() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-g.closed:
			return
		case <-t.C:
			g.tick()
		}
	}
}

func (g *Gateway) tick() {
	t := time.Now()
	g.nowNano.Store(t.UnixNano())
	sec := t.Unix()
	if g.now.Swap(sec) != sec {
		g.tooBigBudget.Store(maxTooBigPerSecond)
		if g.health != nil {
			g.health.budget.Store(g.health.perSec)
		}
	}
}

func (g *Gateway) unattributed() *counters { return &g.counters[len(g.counters)-1] }

// readLoop is the egress path: device → route → transport.
func (g *Gateway) readLoop(dev tun.Device) error {
	n := dev.BatchSize()
	bufs := make([][]byte, n)
	sizes := make([]int, n)
	for i := range bufs {
		bufs[i] = make([]byte, transport.BufSize)
	}
	nr := len(g.spec.remotes)
	out := make([][][]byte, nr)
	for i := range out {
		out[i] = make([][]byte, 0, n)
	}
	tallies := make([]tally, nr)
	icmp := [1][]byte{make([]byte, transport.Headroom+1280)}
	const off = transport.Headroom
	var p packet.Parsed
	for {
		cnt, err := dev.Read(bufs, sizes, off)
		if err != nil {
			if errors.Is(err, tun.ErrTooManySegments) {
				// The device split a super-packet into more segments than
				// bufs holds; the rest are lost and TCP will resend them.
				g.unattributed().drops[dropTooBig].Add(1)
			} else if errors.Is(err, os.ErrClosed) || isClosed(g.closed) {
				return nil
			} else {
				return fmt.Errorf("gateway: read %s: %w", g.spec.cfg.TUN.Name, err)
			}
		}
		for i := 0; i < cnt; i++ {
			pkt := bufs[i][off : off+sizes[i]]
			if p.Decode(pkt) != packet.DropNone {
				g.unattributed().drops[dropMalformed].Add(1)
				continue
			}
			pkt = pkt[:p.Length]
			r := g.remoteRoutes.lookup(p.Version, &p.Dst)
			if r == noRoute {
				g.unattributed().drops[dropNoRoute].Add(1)
				continue
			}
			if p.Length > g.pathMTU {
				if p.Version == 6 || p.DontFragment {
					g.sendTooBig(dev, icmp[:], pkt, &p)
				}
				g.counters[r].drops[dropTooBig].Add(1)
				continue
			}
			if g.xlate != nil && !g.xlate.Egress(r, pkt, &p) {
				g.counters[r].drops[dropTranslate].Add(1)
				continue
			}
			g.clampMSS(pkt, &p)
			out[r] = append(out[r], bufs[i][:off+p.Length])
			tallies[r].packets++
			tallies[r].bytes += uint64(p.Length)
		}
		for r := range out {
			if len(out[r]) == 0 {
				continue
			}
			g.send(r, out[r], tallies[r])
			out[r] = out[r][:0]
			tallies[r] = tally{}
		}
	}
}

// send hands one remote's packets to the transport in batches it accepts.
func (g *Gateway) send(r int, batch [][]byte, t tally) {
	c := &g.counters[r]
	max := g.tr.BatchSize()
	for len(batch) > 0 {
		k := min(len(batch), max)
		if err := g.tr.Send(r, batch[:k], transport.Headroom); err != nil {
			c.drops[dropSendFailed].Add(uint64(k))
			t.packets -= uint64(k)
		}
		batch = batch[k:]
	}
	c.txPackets.Add(t.packets)
	c.txBytes.Add(t.bytes)
}

func (g *Gateway) clampMSS(b []byte, p *packet.Parsed) {
	if p.Proto != 6 || p.TCPFlags&packet.TCPFlagSYN == 0 {
		return
	}
	hdr := 40 // IPv4 (20) + TCP (20)
	if p.Version == 6 {
		hdr = 60
	}
	packet.ClampMSS(b, p, uint16(g.pathMTU-hdr))
}

// sendTooBig answers an oversize packet with an ICMP "fragmentation needed"
// or "packet too big" written back to the device, within the rate limit.
func (g *Gateway) sendTooBig(dev tun.Device, icmp [][]byte, orig []byte, p *packet.Parsed) {
	if g.tooBigBudget.Add(-1) < 0 {
		return
	}
	from := g.from4
	if p.Version == 6 {
		from = g.from6
	}
	if !from.IsValid() {
		// With no address of its own on the device, the gateway speaks for
		// the destination it could not reach.
		from = p.DstAddr()
	}
	buf := icmp[0][:cap(icmp[0])]
	n := packet.TooBig(buf[transport.Headroom:], orig, p, from, g.pathMTU)
	if n == 0 {
		return
	}
	icmp[0] = buf[:transport.Headroom+n]
	if _, err := dev.Write(icmp, transport.Headroom); err != nil {
		g.unattributed().drops[dropTUNWrite].Add(1)
	}
}

// deliverScratch is the per-call state of Deliver, pooled because transports
// call Deliver from several goroutines.
type deliverScratch struct {
	out     [][]byte
	tallies []tally
	// p lives here, not on Deliver's stack: passing it to the Translator
	// interface would move it to the heap on every call.
	p packet.Parsed
}

func newDeliverScratch(remotes int) *deliverScratch {
	return &deliverScratch{tallies: make([]tally, remotes)}
}

// Deliver is the ingress path: transport → anti-spoofing → (with Globalnet:
// a destination in the global CIDR → translation) → a local destination →
// device. It implements transport.Deliverer. Health probes and their replies
// to the health address leave the path first, untranslated: the gateway
// answers or matches them itself.
func (g *Gateway) Deliver(peer int, bufs [][]byte, offset int) {
	sc := g.scratch.Get().(*deliverScratch)
	out := sc.out[:0]
	p := &sc.p
	for _, b := range bufs {
		pkt := b[offset:]
		if p.Decode(pkt) != packet.DropNone {
			g.peerCounters(peer).drops[dropMalformed].Add(1)
			continue
		}
		if h := g.health; h != nil && p.Proto == h.proto && p.Dst == h.addr && g.healthReceive(peer, pkt[:p.Length], p) {
			continue
		}
		src := g.remoteRoutes.lookup(p.Version, &p.Src)
		if src == noRoute || (peer != transport.PeerAny && src != peer) {
			g.peerCounters(peer).drops[dropSpoofedSource].Add(1)
			continue
		}
		// With Globalnet a remote reaches this cluster only at its global
		// CIDR: the pod and service CIDRs behind it are the remote's own
		// too, and must not be addressable untranslated.
		if g.globalRoutes != nil && g.globalRoutes.lookup(p.Version, &p.Dst) == noRoute {
			g.counters[src].drops[dropBadDestination].Add(1)
			continue
		}
		if g.xlate != nil && !g.xlate.Ingress(src, pkt[:p.Length], p) {
			g.counters[src].drops[dropTranslate].Add(1)
			continue
		}
		if g.localRoutes.lookup(p.Version, &p.Dst) == noRoute {
			g.counters[src].drops[dropBadDestination].Add(1)
			continue
		}
		g.clampMSS(pkt[:p.Length], p)
		out = append(out, b[:offset+p.Length])
		sc.tallies[src].packets++
		sc.tallies[src].bytes += uint64(p.Length)
	}
	now := g.now.Load()
	for r := range sc.tallies {
		if t := sc.tallies[r]; t.packets > 0 {
			c := &g.counters[r]
			c.rxPackets.Add(t.packets)
			c.rxBytes.Add(t.bytes)
			c.lastRx.Store(now)
			sc.tallies[r] = tally{}
		}
	}
	if len(out) > 0 {
		if dev := g.dev.Load(); dev == nil {
			g.unattributed().drops[dropTUNWrite].Add(uint64(len(out)))
		} else if _, err := (*dev).Write(out, offset); err != nil {
			g.unattributed().drops[dropTUNWrite].Add(uint64(len(out)))
		}
	}
	clear(out)
	sc.out = out[:0]
	g.scratch.Put(sc)
}

// peerCounters returns the counters drops are charged to when a packet from
// peer is refused before its cluster is known.
func (g *Gateway) peerCounters(peer int) *counters {
	if peer == transport.PeerAny || peer < 0 || peer >= len(g.counters)-1 {
		return g.unattributed()
	}
	return &g.counters[peer]
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
