package esp

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
	"github.com/snorkel-net/snorkel/transport/udp"
)

var (
	_ transport.Transport   = (*Transport)(nil)
	_ transport.DropCounter = (*Transport)(nil)
	_ ike.DataPlane         = (*Transport)(nil)
	_ ike.Sender            = (*Transport)(nil)
	_ ike.DropCounter       = (*Transport)(nil)
	_ ike.Mover             = (*Transport)(nil)
)

// Transport is an ESP-in-UDP tunnel to a set of peers, keyed by IKE.
type Transport struct {
	cfg     settings
	peers   atomic.Pointer[peerTable]
	conn    *udp.Conn
	deliver transport.Deliverer
	unknown dropRow // drops of datagrams whose peer is unknown

	// inbound maps SPI to inbound SA; the map is never modified, only
	// replaced, so the receive path reads it without a lock.
	inbound atomic.Pointer[map[uint32]*inbound]
	ike     atomic.Pointer[func(from netip.AddrPort, msg []byte)]
	onMove  atomic.Pointer[func(peer int, to netip.AddrPort)]
	now     atomic.Int64 // coarse Unix nanoseconds, see clockTick

	mu       sync.Mutex        // serialises the control plane
	children map[uint32]*child // by inbound SPI; guarded by mu
	installs uint64            // CHILD_SAs installed so far; guarded by mu

	closed atomic.Bool
	done   chan struct{}
	timers sync.WaitGroup

	txPool sync.Pool // *[][]byte of capacity udp.BatchSize
	rxPool sync.Pool // *rxScratch
}

// New opens the UDP port of cfg and starts receiving; d is given every
// inner packet that opens under an installed SA. Nothing is sent until
// InstallChild. A port in use is reported with an error wrapping
// syscall.EADDRINUSE.
func New(cfg Config, d transport.Deliverer) (*Transport, error) {
	if d == nil {
		return nil, fmt.Errorf("esp: nil Deliverer")
	}
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return start(s, d)
}

// start opens the socket of validated settings and starts the receive
// loops and the timers.
func start(s settings, d transport.Deliverer) (*Transport, error) {
	t := &Transport{
		cfg:      s,
		deliver:  d,
		children: make(map[uint32]*child),
		done:     make(chan struct{}),
	}
	tbl := make(peerTable, len(s.endpoints))
	for i, ep := range s.endpoints {
		tbl[i] = newPeer(ep)
	}
	t.peers.Store(&tbl)
	t.inbound.Store(&map[uint32]*inbound{})
	t.now.Store(time.Now().UnixNano())
	t.txPool.New = func() any {
		b := make([][]byte, 0, udp.BatchSize)
		return &b
	}
	t.rxPool.New = func() any { return newRxScratch() }
	c, err := udp.Open(s.port)
	if err != nil {
		return nil, fmt.Errorf("esp: %w", err)
	}
	t.conn = c
	if err := c.Start(rxOffset, t.receive); err != nil {
		c.Close()
		return nil, fmt.Errorf("esp: %w", err)
	}
	t.timers.Add(1)
	go t.runTimers()
	return t, nil
}

// Port is the local UDP port.
func (t *Transport) Port() uint16 { return t.conn.Port() }

// Send seals bufs[i][offset:] in place with the peer's current outbound SA
// and sends them as one batch. offset must leave sealHeadroom (56) bytes;
// transport.Headroom does. Packets that cannot be sent — no SA yet, the
// sequence numbers used up, not IP, no tailroom — are dropped and counted,
// not reported as an error.
func (t *Transport) Send(peer int, bufs [][]byte, offset int) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	p := t.peer(peer)
	if p == nil {
		return fmt.Errorf("esp: send to peer %d: no such peer", peer)
	}
	if offset < sealHeadroom {
		return fmt.Errorf("esp: send offset %d: need at least %d bytes of headroom", offset, sealHeadroom)
	}
	if len(bufs) > udp.BatchSize {
		return fmt.Errorf("esp: send batch of %d: at most %d", len(bufs), udp.BatchSize)
	}
	sa := p.out.Load()
	if sa == nil {
		p.drops.add(dropNoSA, uint64(len(bufs)))
		return nil
	}
	ip := 0
	for _, b := range bufs {
		if nextHeaderOf(b, offset) != 0 {
			ip++
		}
	}
	if nonIP := len(bufs) - ip; nonIP > 0 {
		p.drops.add(dropTxNotIP, uint64(nonIP))
	}
	seq, granted := sa.reserve(ip)
	if short := ip - granted; short > 0 {
		p.drops.add(dropSeqExhausted, uint64(short))
	}
	sp := t.txPool.Get().(*[][]byte)
	out := (*sp)[:0]
	var bytes uint64
	for _, b := range bufs {
		if granted == 0 {
			break
		}
		next := nextHeaderOf(b, offset)
		if next == 0 {
			continue
		}
		pkt, r := sa.seal(b, offset, next, seq)
		seq++
		granted--
		if r != accepted {
			p.drops.add(r, 1)
			continue
		}
		out = append(out, pkt)
		bytes += uint64(len(b) - offset)
	}
	sa.bytes.Add(bytes)
	err := t.conn.Send(out, *p.endpoint.Load())
	clear(out)
	*sp = out[:0]
	t.txPool.Put(sp)
	if err != nil {
		return fmt.Errorf("esp: send to peer %d: %w", peer, err)
	}
	return nil
}

// Overhead is the most a packet grows on the underlay: outer IP (20, or 40
// when a peer is reached over IPv6), UDP (8) and the ESP overhead of the
// outbound SAs installed — 37 bytes for AES-GCM, 57 for AES-CBC with
// HMAC-SHA-256-128. Before any is installed it is that of the costliest
// suite supported, so that an MTU derived at start-up holds whatever IKE
// negotiates.
func (t *Transport) Overhead() int {
	outer := ipv4HeaderLen + udpHeaderLen
	esp := 0
	for _, p := range *t.peers.Load() {
		if p == nil {
			continue
		}
		if p.endpoint.Load().Addr().Is6() {
			outer = ipv6HeaderLen + udpHeaderLen
		}
		if o := p.out.Load(); o != nil {
			esp = max(esp, o.overhead())
		}
	}
	if esp == 0 {
		esp = maxESPOverhead
	}
	return outer + esp
}

// maxESPOverhead is the ESP overhead of the costliest suite, AES-CBC:
// header, a 16-byte IV, up to 15 bytes of padding, trailer and ICV.
const maxESPOverhead = espHeaderLen + cbcIVLen + cbcIVLen - 1 + trailerLen + icvLen

// BatchSize is the largest batch Send takes and Deliver is given.
func (t *Transport) BatchSize() int { return udp.BatchSize }

// Drops lists, by peer and reason, the datagrams and packets that were
// neither delivered nor sent; see the package documentation.
func (t *Transport) Drops() []transport.Drop {
	out := t.unknown.list(nil, transport.PeerAny)
	if n := t.conn.KernelDrops(); n != 0 {
		out = append(out, transport.Drop{Peer: transport.PeerAny, Reason: transport.KernelDropReason, Count: n})
	}
	for i, p := range *t.peers.Load() {
		if p != nil {
			out = p.drops.list(out, i)
		}
	}
	return out
}

// SetEndpoint moves peer to ep, where ESP, IKE and keepalives for it go
// from now on; a port of 0 means the local port. The IKE engine calls it
// when an authenticated IKE message arrives from a new address
// (RFC 7296 §2.23); an authenticated ESP packet moves the peer itself.
func (t *Transport) SetEndpoint(peer int, ep netip.AddrPort) error {
	p := t.peer(peer)
	if p == nil {
		return fmt.Errorf("esp: set endpoint of peer %d: no such peer", peer)
	}
	e, err := endpoint(ep, t.Port())
	if err != nil {
		return fmt.Errorf("esp: set endpoint of peer %d: %w", peer, err)
	}
	p.endpoint.Store(&e)
	return nil
}

// Moved is how many times peer's endpoint moved because a packet that
// opened under its SAs came from another address or port: a NAT that
// rebound the peer's mapping, or a peer that moved.
func (t *Transport) Moved(peer int) uint64 {
	if p := t.peer(peer); p != nil {
		return p.moved.Load()
	}
	return 0
}

// SetMoveHandler sets h to be called, from a receive goroutine, each time
// an authenticated ESP packet moves a peer's endpoint, so that the IKE
// engine sends to the new one too (ike.Engine.Follow). h must return
// quickly.
func (t *Transport) SetMoveHandler(h func(peer int, to netip.AddrPort)) {
	t.onMove.Store(&h)
}

// Close closes the socket and waits for the receive goroutines and the
// timers. It is safe to call more than once.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	close(t.done)
	t.timers.Wait()
	return t.conn.Close()
}
