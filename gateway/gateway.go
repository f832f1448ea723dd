// Package gateway is Snorkel's data-plane engine. It reads batches of packets
// from a tun.Device (a kernel TUN device, whose offloads it handles itself
// (offload_linux.go), or a gVisor netstack), routes each by
// longest-prefix match on its destination to a remote cluster, clamps TCP MSS
// to the tunnel MTU and hands the batch to a transport; in the other
// direction it takes decapsulated batches from the transport, drops any packet
// whose inner source does not belong to the sending cluster, and writes the
// rest to the device. With Globalnet, remotes are known by their global CIDRs
// and the NAT engine (package natengine) translates every packet on the way.
// On a kernel TUN a super-packet is routed and translated whole, then cut
// (super_linux.go); on the way in, a flow's segments are joined first and
// translated once, by the first one's headers.
// Without it, packets to the clusterset IP range (the VIPs of MCS
// ServiceImports) are given a backend by natengine.Clusterset first, and
// written back to the device when that backend is local (clusterset.go).
// With a tun.address and the remotes' healthCheckIPs, the gateway probes each
// remote gateway through the tunnel and answers its probes (health.go).
// On a kernel TUN the gateway fails closed: OpenTUN leaves a guard on the
// remotes' CIDRs that drops their traffic whenever no gateway carries it,
// however the last one ended (guard.go).
//
// The remotes change while the gateway runs (update.go): a remote joining,
// leaving or moving touches only that remote's routes, transport peer,
// anti-spoofing set and probes; the device, the socket, the other remotes'
// sessions and the Globalnet flows stay.
//
// Concurrency: one goroutine reads the device; transports call Deliver from
// their own goroutines, possibly at once. The remotes and their route table
// are one immutable value swapped by update, read with one atomic load per
// batch. Per-packet work allocates nothing; counters are updated per batch.
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

	"github.com/snorkel-net/snorkel/natengine"
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
	// Takeover, if set, is the follower of the gateway this one takes over
	// from: it is stopped, and its replica imported into the NAT engine
	// before the first packet is translated.
	Takeover *Follower
}

// Gateway is a running data-plane engine. Create it with New and drive it
// with Run.
type Gateway struct {
	spec  *spec // the local part, fixed for the gateway's life
	set   atomic.Pointer[remoteSet]
	dev   atomic.Pointer[tun.Device] // set by Run
	tr    peerTransport
	log   *slog.Logger
	xlate Translator
	// globalnet is the Globalnet section in force, for /status: the
	// spec's at first, replaced by updateGlobalnet.
	globalnet atomic.Pointer[globalnetSpec]
	// clusterset is the clusterset IP range and its engine, nil while
	// the spec has none; csEngine outlives changes to it, with its
	// connections.
	clusterset atomic.Pointer[clustersetState]
	csEngine   atomic.Pointer[natengine.Clusterset]
	// sync serves the NAT engine's flows to the passive gateway; nil
	// unless Spec.Sync.Listen is set.
	sync *syncServer

	// globalRoutes is this cluster's global CIDR with Globalnet, else nil:
	// the only destinations a remote may address before translation.
	globalRoutes *routeTable

	pathMTU atomic.Int64 // the largest inner packet the tunnel carries
	mtu     int          // the TUN device's MTU
	from4   netip.Addr
	from6   netip.Addr

	unattr       counters // drops of packets that belong to no remote
	now          atomic.Int64
	tooBigBudget atomic.Int64 // ICMP errors left in the current second
	publicKey    string

	scratch   sync.Pool // *deliverScratch
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
	s, err := cfg.Compile()
	if err != nil {
		return nil, err
	}
	return NewFromSpec(s, opts)
}

// NewFromSpec is New for a Spec, which it validates.
func NewFromSpec(sp *Spec, opts Options) (*Gateway, error) {
	s, err := sp.derive()
	if err != nil {
		return nil, err
	}
	return newGatewayFor(s, opts)
}

// newGatewayFor starts the NAT engine and the transport of a validated
// spec.
func newGatewayFor(s *spec, opts Options) (*Gateway, error) {
	g := newGateway(s, opts)
	if err := g.setClusterset(s, g.set.Load()); err != nil {
		return nil, err
	}
	if s.globalnet != nil && g.xlate == nil {
		if err := g.startNAT(); err != nil {
			return nil, err
		}
	}
	g.takeOver(opts.Takeover)
	tr, key, err := newTransport(s, g, g.log)
	if err != nil {
		return nil, err
	}
	g.attach(tr, key)
	if err := g.startSync(); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// newGateway builds a gateway for a validated spec, without its transport.
func newGateway(s *spec, opts Options) *Gateway {
	g := &Gateway{
		spec:   s,
		log:    opts.Logger,
		xlate:  opts.Translator,
		closed: make(chan struct{}),
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	if s.globalnet != nil {
		g.globalnet.Store(s.globalnet)
	}
	if s.tunAddr.IsValid() {
		if s.tunAddr.Addr().Is4() {
			g.from4 = s.tunAddr.Addr()
		} else {
			g.from6 = s.tunAddr.Addr()
		}
	}
	g.set.Store(newRemoteSet(s, nil))
	if s.globalnet != nil {
		g.globalRoutes = newRouteTable([]route{{s.globalnet.rules.Global, 0}})
	}
	g.scratch.New = func() any { return &deliverScratch{} }
	g.tick()
	return g
}

// attach gives the gateway its transport, which fixes the tunnel MTU.
func (g *Gateway) attach(tr peerTransport, publicKey string) {
	g.tr, g.publicKey = tr, publicKey
	g.setPathMTU()
	g.mtu = int(g.pathMTU.Load())
	if g.spec.TUN.MTU != 0 {
		g.mtu = g.spec.TUN.MTU
	}
}

// setPathMTU follows the transport's overhead, which grows when a remote
// is first reached over IPv6 and shrinks once ESP has negotiated a cheaper
// suite than the costliest it assumed. It never exceeds the TUN device's
// MTU, fixed at attach: a larger MSS clamp would let pods send segments
// the node cannot route into the device.
func (g *Gateway) setPathMTU() {
	mtu := g.spec.UnderlayMTU - g.tr.Overhead()
	if g.mtu > 0 {
		mtu = min(mtu, g.mtu)
	}
	g.pathMTU.Store(int64(mtu))
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
	go g.probeLoop()
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
	sec := time.Now().Unix()
	if g.now.Swap(sec) != sec {
		g.tooBigBudget.Store(maxTooBigPerSecond)
		if h := g.set.Load().health; h != nil {
			h.budget.Store(h.perSec)
		}
	}
}

func (g *Gateway) unattributed() *counters { return &g.unattr }

// readLoop is the egress path: device → route → transport.
func (g *Gateway) readLoop(dev tun.Device) error {
	n := dev.BatchSize()
	bufs := make([][]byte, n)
	sizes := make([]int, n)
	for i := range bufs {
		bufs[i] = make([]byte, transport.BufSize)
	}
	var out [][][]byte
	var tallies []tally
	back := make([][]byte, 0, n) // translated by the clusterset engine for this cluster
	icmp := [1][]byte{make([]byte, transport.Headroom+1280)}
	const off = transport.Headroom
	var p packet.Parsed
	od, _ := dev.(*offloadTUN)
	segs := make([][]byte, 0, n)
	for {
		var cnt int
		var err error
		// checked: the TCP checksums of what was read are known to
		// verify, so they need not be checked before sending.
		var checked bool
		if od != nil && !od.pending() {
			var tp tunPacket
			if tp, err = od.readPacket(bufs[0][off:]); err == nil {
				if tp.size > 0 && g.sendSuper(tp, bufs, sizes, segs, &p) {
					continue
				}
				checked = tp.checked || tp.size > 0
				cnt, err = od.cut(tp, bufs, sizes, off)
			}
		} else {
			// From an offloadTUN, the rest of a super-packet's segments.
			checked = od != nil
			cnt, err = dev.Read(bufs, sizes, off)
		}
		if err != nil {
			if errors.Is(err, tun.ErrTooManySegments) {
				// The device split a super-packet into more segments than
				// bufs holds; the rest are lost and TCP will resend them.
				g.unattributed().drops[dropTooBig].Add(1)
			} else if errors.Is(err, errBadOffload) {
				g.unattributed().drops[dropMalformed].Add(1)
			} else if errors.Is(err, os.ErrClosed) || isClosed(g.closed) {
				return nil
			} else {
				return fmt.Errorf("gateway: read %s: %w", g.spec.TUN.Name, err)
			}
		}
		rs := g.set.Load()
		cs := g.clusterset.Load()
		for len(out) < len(rs.bySlot) {
			out = append(out, make([][]byte, 0, n))
			tallies = append(tallies, tally{})
		}
		pathMTU := int(g.pathMTU.Load())
		for i := 0; i < cnt; i++ {
			pkt := bufs[i][off : off+sizes[i]]
			if p.Decode(pkt) != packet.DropNone {
				g.unattributed().drops[dropMalformed].Add(1)
				continue
			}
			pkt = pkt[:p.Length]
			if cs != nil && cs.covers(p.Version, &p.Dst) {
				switch g.clustersetEgress(dev, cs, icmp[:], pkt, &p, pathMTU) {
				case natengine.VIPDrop:
					continue
				case natengine.VIPLocal:
					back = append(back, bufs[i][:off+p.Length])
					continue
				}
			}
			r := rs.routes.lookup(p.Version, &p.Dst)
			if r == noRoute {
				g.unattributed().drops[dropNoRoute].Add(1)
				continue
			}
			if p.Length > pathMTU {
				if p.Version == 6 || p.DontFragment {
					g.sendTooBig(dev, icmp[:], pkt, &p, pathMTU)
				}
				rs.bySlot[r].c.drops[dropTooBig].Add(1)
				continue
			}
			// Remotes that take this gateway's segments as checked
			// (RemoteSpec.CheckedSegments) join them unsummed: a segment
			// damaged before it got here must not reach them. What the
			// gateway rewrites below, it updates checksums for.
			if !checked && !packet.SegmentChecksumValid(pkt) {
				rs.bySlot[r].c.drops[dropBadChecksum].Add(1)
				continue
			}
			if g.xlate != nil && !g.xlate.Egress(r, pkt, &p) {
				rs.bySlot[r].c.drops[dropTranslate].Add(1)
				continue
			}
			clampMSS(pkt, &p, pathMTU)
			out[r] = append(out[r], bufs[i][:off+p.Length])
			tallies[r].packets++
			tallies[r].bytes += uint64(p.Length)
		}
		if len(back) > 0 {
			if _, err := dev.Write(back, off); err != nil {
				g.unattributed().drops[dropTUNWrite].Add(uint64(len(back)))
			}
			clear(back)
			back = back[:0]
		}
		for r := range out {
			if len(out[r]) == 0 {
				continue
			}
			g.send(rs.bySlot[r].c, r, out[r], tallies[r])
			out[r] = out[r][:0]
			tallies[r] = tally{}
		}
	}
}

// send hands the packets of the remote in slot r, whose counters are c, to
// the transport in batches it accepts.
func (g *Gateway) send(c *counters, r int, batch [][]byte, t tally) {
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

// clampMSS lowers the MSS a SYN offers to what fits pathMTU.
func clampMSS(b []byte, p *packet.Parsed, pathMTU int) {
	if p.Proto != 6 || p.TCPFlags&packet.TCPFlagSYN == 0 {
		return
	}
	hdr := 40 // IPv4 (20) + TCP (20)
	if p.Version == 6 {
		hdr = 60
	}
	packet.ClampMSS(b, p, uint16(pathMTU-hdr))
}

// sendTooBig answers an oversize packet with an ICMP "fragmentation needed"
// or "packet too big" written back to the device, within the rate limit.
func (g *Gateway) sendTooBig(dev tun.Device, icmp [][]byte, orig []byte, p *packet.Parsed, pathMTU int) {
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
	n := packet.TooBig(buf[transport.Headroom:], orig, p, from, pathMTU)
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
	// For a device that takes super-packets: the remote each packet of
	// out came from, their lengths, and the joining.
	srcs  []int
	sizes []int
	gro   packet.Coalescer
}

// Deliver is the ingress path: transport → anti-spoofing → (with Globalnet:
// a destination in the global CIDR → translation; with clusterset IPs: a
// remote backend's reply rewritten to come from its VIP) → a local
// destination → device. It implements transport.Deliverer. Health probes and their replies
// to the health address leave the path first, untranslated: the gateway
// answers or matches them itself. On a device that takes super-packets,
// a flow's segments are joined after the anti-spoofing checks, and what
// follows is done once per super-packet, on its first segment's headers.
func (g *Gateway) Deliver(peer int, bufs [][]byte, offset int) {
	sc := g.scratch.Get().(*deliverScratch)
	rs := g.set.Load()
	for len(sc.tallies) < len(rs.bySlot) {
		sc.tallies = append(sc.tallies, tally{})
	}
	var od *offloadTUN
	dev := g.dev.Load()
	if dev != nil {
		od, _ = (*dev).(*offloadTUN)
	}
	out := sc.out[:0]
	p := &sc.p
	pathMTU := int(g.pathMTU.Load())
	// Whether every packet to join came from a remote that checked its
	// segments' checksums.
	checked := true
	for _, b := range bufs {
		pkt := b[offset:]
		src, ok := g.admit(rs, peer, pkt, p)
		if !ok {
			continue
		}
		if od != nil {
			out = append(out, b[:offset+p.Length])
			sc.srcs = append(sc.srcs, src)
			checked = checked && rs.bySlot[src].checkedSegments
			continue
		}
		if !g.admitLocal(rs, src, pkt[:p.Length], p, pathMTU, 1) {
			continue
		}
		out = append(out, b[:offset+p.Length])
		sc.tallies[src].packets++
		sc.tallies[src].bytes += uint64(p.Length)
	}
	switch {
	case len(out) == 0:
	case od != nil:
		sc.gro.SenderChecked = checked
		g.deliverSupers(od, sc, rs, out, offset, pathMTU)
	case dev == nil:
		g.unattributed().drops[dropTUNWrite].Add(uint64(len(out)))
	default:
		if _, err := (*dev).Write(out, offset); err != nil {
			g.unattributed().drops[dropTUNWrite].Add(uint64(len(out)))
		}
	}
	now := g.now.Load()
	for r := range sc.tallies {
		if t := sc.tallies[r]; t.packets > 0 {
			c := rs.bySlot[r].c
			c.rxPackets.Add(t.packets)
			c.rxBytes.Add(t.bytes)
			if prev := c.lastRx.Swap(now); prev == 0 || now-prev > connectedWindow {
				c.established.Store(now)
			}
			sc.tallies[r] = tally{}
		}
	}
	clear(out)
	sc.out = out[:0]
	sc.srcs = sc.srcs[:0]
	g.scratch.Put(sc)
}

// admit decodes pkt, from peer, into p, takes it if it is a health probe
// or reply, and checks that its source belongs to the remote it came from
// and, with Globalnet, that it is addressed to this cluster's global CIDR.
// It returns the remote's slot, or false for a packet that goes no
// further, its drop counted.
func (g *Gateway) admit(rs *remoteSet, peer int, pkt []byte, p *packet.Parsed) (int, bool) {
	if p.Decode(pkt) != packet.DropNone {
		g.peerCounters(rs, peer).drops[dropMalformed].Add(1)
		return 0, false
	}
	if h := rs.health; h != nil && p.Proto == h.proto && p.Dst == h.addr && g.healthReceive(rs, peer, pkt[:p.Length], p) {
		return 0, false
	}
	src := rs.routes.lookup(p.Version, &p.Src)
	if src == noRoute || (peer != transport.PeerAny && src != peer) {
		g.peerCounters(rs, peer).drops[dropSpoofedSource].Add(1)
		return 0, false
	}
	// With Globalnet a remote reaches this cluster only at its global
	// CIDR: the pod and service CIDRs behind it are the remote's own
	// too, and must not be addressable untranslated.
	if g.globalRoutes != nil && g.globalRoutes.lookup(p.Version, &p.Dst) == noRoute {
		rs.bySlot[src].c.drops[dropBadDestination].Add(1)
		return 0, false
	}
	return src, true
}

// admitLocal translates pkt, decoded into p, from the remote in slot src,
// checks that it is then addressed to this cluster, and clamps a SYN's
// MSS. It reports false for a packet to drop, counted as segments drops.
func (g *Gateway) admitLocal(rs *remoteSet, src int, pkt []byte, p *packet.Parsed, pathMTU, segments int) bool {
	c := rs.bySlot[src].c
	if g.xlate != nil && !g.xlate.Ingress(src, pkt, p) {
		c.drops[dropTranslate].Add(uint64(segments))
		return false
	}
	if cs := g.clusterset.Load(); cs != nil {
		cs.eng.Ingress(pkt, p)
	}
	if rs.local.lookup(p.Version, &p.Dst) == noRoute {
		c.drops[dropBadDestination].Add(uint64(segments))
		return false
	}
	clampMSS(pkt, p, pathMTU)
	return true
}

// deliverSupers joins the admitted packets bufs, from the remotes in
// sc.srcs, into super-packets, takes each through admitLocal once by its
// first segment, and writes those left to od.
func (g *Gateway) deliverSupers(od *offloadTUN, sc *deliverScratch, rs *remoteSet, bufs [][]byte, offset, pathMTU int) {
	sc.sizes = sc.sizes[:0]
	for _, b := range bufs {
		sc.sizes = append(sc.sizes, len(b)-offset)
	}
	supers := sc.gro.Group(bufs, sc.sizes, offset)
	kept := supers[:0]
	p := &sc.p
	for _, s := range supers {
		first := bufs[s.Index][offset : offset+sc.sizes[s.Index]]
		src := sc.srcs[s.Index]
		p.Decode(first) // as admit did
		if !g.admitLocal(rs, src, first, p, pathMTU, s.Segments) {
			continue
		}
		s.Finish(first)
		kept = append(kept, s)
		t := &sc.tallies[src]
		t.packets += uint64(s.Segments)
		t.bytes += uint64(len(first))
		for _, j := range s.Joined {
			t.bytes += uint64(sc.sizes[j])
		}
	}
	if err := od.writeSupers(bufs, sc.sizes, offset, kept); err != nil {
		var n uint64
		for _, s := range kept {
			n += uint64(s.Segments)
		}
		g.unattributed().drops[dropTUNWrite].Add(n)
	}
}

// peerCounters returns the counters drops are charged to when a packet from
// peer is refused before its cluster is known.
func (g *Gateway) peerCounters(rs *remoteSet, peer int) *counters {
	if st := rs.state(peer); st != nil {
		return st.c
	}
	return g.unattributed()
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
