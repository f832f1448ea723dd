// Package vxlan is an unencrypted tunnel transport speaking VXLAN (RFC 7348)
// in userspace over a udp.Conn, so that a Snorkel gateway can exchange
// traffic with another Snorkel gateway or with a Linux kernel vxlan device.
//
// Each IP packet travels in an Ethernet frame inside a VXLAN header. The
// transport plays a router on a point-to-point segment: it answers ARP for
// every address the peer asks about with its own MAC, learns the peer's MAC
// from the frames it receives, and passes IP packets (never Ethernet) to the
// Deliverer.
//
// Allocation: Send, the receive path, encapsulation, decapsulation and ARP
// answers allocate nothing per packet or per batch; headers are written in
// place into the headroom the caller leaves (transport.Headroom), and
// received packets are delivered where the socket wrote them, at
// transport.Headroom: the segments of a coalesced datagram are decapsulated
// in place, end to end in one buffer, and none is copied. Scratch slices
// come from pools.
//
// Peers: a peer's number is its index in Config.Peers, or the number given
// to SetPeer. SetPeer and RemovePeer change one peer while the transport
// runs, without touching the socket or the other peers.
//
// Concurrency: Send may be called from any number of goroutines. Deliver is
// called from the socket's receive goroutines (one per address family), so
// calls may overlap. Learned MACs and drop counters are atomics. The peer
// table is an immutable snapshot that Send and receive load once per batch
// without locking; SetPeer and RemovePeer, serialised by a mutex, build a
// new one and swap it in, and RemovePeer then waits for the batches that
// still hold the old one. Close waits for the receive goroutines, so
// Deliver is not called after it returns.
package vxlan

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/udp"
)

// Underlay overhead per packet: outer IP, UDP (8), VXLAN (8) and the inner
// Ethernet header (14); RFC 7348 §4.3 asks that the underlay carry it
// without fragmenting.
const (
	overheadIPv4 = 20 + 8 + headerLen
	overheadIPv6 = 40 + 8 + headerLen
)

// rxOffset is where the socket writes each datagram, so that the inner IP
// packet lands at transport.Headroom after the headers are stripped.
const rxOffset = transport.Headroom - headerLen

var (
	_ transport.Transport   = (*Transport)(nil)
	_ transport.DropCounter = (*Transport)(nil)
)

// Transport is a VXLAN tunnel to a set of peers that may change while it
// runs (SetPeer, RemovePeer).
type Transport struct {
	cfg     settings
	conn    *udp.Conn
	deliver transport.Deliverer
	// peers is the current peer table. Send and receive load it once per
	// batch without locking; SetPeer and RemovePeer replace it under mu.
	peers atomic.Pointer[peerTable]
	// inUse counts the batches that hold a table, so that RemovePeer can
	// wait out those that hold the one it replaced.
	inUse readers
	mu    sync.Mutex
	// anyDrops counts what arrives from no peer's address.
	anyDrops dropRow
	closed   atomic.Bool
	txPool   sync.Pool // *[][]byte of capacity udp.BatchSize
	rxPool   sync.Pool // *rxScratch
}

// New opens the UDP port of cfg and starts receiving; d is given every IP
// packet that arrives from a configured peer. A port in use is reported
// with an error wrapping syscall.EADDRINUSE. cfg may list no peers; SetPeer
// adds them later.
func New(cfg Config, d transport.Deliverer) (*Transport, error) {
	if d == nil {
		return nil, fmt.Errorf("vxlan: nil Deliverer")
	}
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	t := &Transport{cfg: s, deliver: d}
	peers := make([]*peer, len(s.peers))
	for i, ps := range s.peers {
		peers[i] = &peer{peerSettings: ps, state: &peerState{}}
	}
	t.peers.Store(newPeerTable(peers))
	t.txPool.New = func() any {
		b := make([][]byte, 0, udp.BatchSize)
		return &b
	}
	t.rxPool.New = func() any { return newRxScratch() }
	c, err := udp.Open(s.port)
	if err != nil {
		return nil, fmt.Errorf("vxlan: %w", err)
	}
	t.conn = c
	if err := c.Start(rxOffset, t.receive); err != nil {
		c.Close()
		return nil, fmt.Errorf("vxlan: %w", err)
	}
	return t, nil
}

// MAC is the local inner Ethernet address.
func (t *Transport) MAC() [6]byte { return t.cfg.mac }

// PeerMAC is the inner Ethernet address frames to peer are sent to.
func (t *Transport) PeerMAC(peer int) ([6]byte, error) {
	p := t.peers.Load().get(peer)
	if p == nil {
		return mac{}, fmt.Errorf("vxlan: peer %d: no such peer", peer)
	}
	return p.dstMAC(), nil
}

// Send encapsulates bufs[i][offset:] in place and sends them to peer as one
// batch. A packet that is neither IPv4 nor IPv6 is dropped and counted.
func (t *Transport) Send(peer int, bufs [][]byte, offset int) error {
	if t.closed.Load() {
		return transport.ErrClosed
	}
	if offset < headerLen {
		return fmt.Errorf("vxlan: send offset %d: need at least %d bytes of headroom", offset, headerLen)
	}
	if len(bufs) > udp.BatchSize {
		return fmt.Errorf("vxlan: send batch of %d: at most %d", len(bufs), udp.BatchSize)
	}
	e := t.inUse.enter()
	defer t.inUse.exit(e)
	p := t.peers.Load().get(peer)
	if p == nil {
		return fmt.Errorf("vxlan: send to peer %d: no such peer", peer)
	}
	dst := p.dstMAC()
	sp := t.txPool.Get().(*[][]byte)
	out := (*sp)[:0]
	for _, b := range bufs {
		f, ok := encap(b, offset, t.cfg.vni, dst, t.cfg.mac)
		if !ok {
			p.state.drops.add(dropTxNotIP)
			continue
		}
		out = append(out, f)
	}
	err := t.conn.Send(out, p.to())
	clear(out)
	*sp = out[:0]
	t.txPool.Put(sp)
	if err != nil {
		return fmt.Errorf("vxlan: send to peer %d: %w", peer, err)
	}
	return nil
}

// Overhead is 50 bytes over an IPv4 underlay and 70 over IPv6; with peers of
// both families it is the larger. It follows the current peers.
func (t *Transport) Overhead() int {
	if t.peers.Load().ipv6 {
		return overheadIPv6
	}
	return overheadIPv4
}

// BatchSize is the largest batch Send takes and Deliver is given.
func (t *Transport) BatchSize() int { return udp.BatchSize }

// Drops lists the packets discarded so far by peer and reason: those from
// unknown senders first, with what the kernel discarded at the socket
// before the transport read it (kernel_dropped, see udp.Conn.KernelDrops),
// then each current peer's by peer number.
func (t *Transport) Drops() []transport.Drop {
	out := t.anyDrops.appendTo(nil, transport.PeerAny)
	if n := t.conn.KernelDrops(); n != 0 {
		out = append(out, transport.Drop{Peer: transport.PeerAny, Reason: transport.KernelDropReason, Count: n})
	}
	for i, p := range t.peers.Load().peers {
		if p != nil {
			out = p.state.drops.appendTo(out, i)
		}
	}
	return out
}

// Close closes the socket and waits for the receive goroutines.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	return t.conn.Close()
}
