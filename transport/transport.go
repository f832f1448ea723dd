// Package transport defines the tunnel between two gateways: a small interface
// that sends batches of IP packets to a remote gateway and delivers the
// batches it receives. Implementations live in the sub-packages (wireguard,
// vxlan); udp holds the batched socket they share.
//
// Buffers: a packet handed to Send or Deliver is bufs[i][offset:]. On Send the
// bytes before offset (at least Headroom of them) are the transport's to write
// its headers into, and the capacity after len(bufs[i]) is tailroom, so that
// encapsulation happens in place. On Deliver the packet is the Deliverer's to
// rewrite within its length, and nothing around it is: a transport may hand
// the segments of one coalesced datagram end to end in one buffer, each
// packet's headroom the end of the one before. Neither side keeps a buffer
// after the call returns.
package transport

import "errors"

// Headroom is the number of free bytes a gateway leaves before each packet it
// passes to Send.
const Headroom = 64

// BufSize is the size of one packet buffer: room for a GSO/GRO super-packet of
// up to 64 KiB behind Headroom.
const BufSize = Headroom + 65535

// PeerAny is passed to Deliver by a transport that has already bound the inner
// source address to the sending peer itself (WireGuard's cryptokey routing).
const PeerAny = -1

// KernelDropReason is the reason under which a transport reports, for
// PeerAny, the datagrams the kernel discarded at its UDP sockets before it
// read them: most of all because a socket's receive queue was full, the
// gateway having fallen behind its peers; also for a wrong UDP checksum.
const KernelDropReason = "kernel_dropped"

// ErrClosed is returned by Send once the transport is closed.
var ErrClosed = errors.New("transport: closed")

// Deliverer takes packets that a transport has received and decapsulated. It
// is called from the transport's goroutines, possibly concurrently. peer is the
// index of the sending remote in the transport's peer list, or PeerAny.
type Deliverer interface {
	Deliver(peer int, bufs [][]byte, offset int)
}

// Transport carries packets to remote gateways. Peers are addressed by their
// index in the peer list the transport was configured with.
type Transport interface {
	// Send encapsulates and transmits packets bufs[i][offset:] to peer.
	// len(bufs) is at most BatchSize.
	Send(peer int, bufs [][]byte, offset int) error
	// Overhead is the number of bytes the tunnel adds to each inner packet on
	// the underlay (outer IP and UDP headers included), used to derive the MTU.
	Overhead() int
	// BatchSize is the largest batch Send takes and Deliver is given.
	BatchSize() int
	// Close stops the transport; Deliver is not called after it returns.
	Close() error
}

// Drop is a count of packets a transport discarded, by peer and reason.
// Peer is PeerAny where the sender is unknown.
type Drop struct {
	Peer   int
	Reason string
	Count  uint64
}

// DropCounter is implemented by transports that count what they discard.
type DropCounter interface {
	Drops() []Drop
}
