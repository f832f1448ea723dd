// Package udp is the batched UDP socket that the tunnel transports share: one
// port, with a socket per address family, that sends with sendmmsg and UDP
// segmentation offload (GSO) and receives with recvmmsg and UDP receive
// offload (GRO). It adds what a transport needs around them: a receive loop
// per socket family that fills buffers at a caller-chosen offset, netip
// source addresses, and a port-in-use error callers can test for.
//
// Cost per packet is what this package is for, so it makes its own system
// calls rather than going through a general-purpose batch API:
//   - The calls are raw (syscall.RawSyscall6 inside the socket's RawConn), so
//     a gateway's busy loops do not enter and leave the Go scheduler's
//     system-call state, nor wake its monitor thread, once per batch.
//   - A receive reads up to BatchSize datagrams per call whether or not the
//     kernel coalesced them, so small packets, which the kernel rarely
//     coalesces, still come a batch at a time; a coalesced datagram's
//     segments are handed where the kernel wrote them, none copied.
//   - Only the message headers a call used are reset before the next.
//
// Allocation: Send and the receive loops allocate nothing per packet or per
// batch; the scratch of a Send comes from a pool, and a loop's memory lives
// as long as the loop.
//
// Concurrency: Send may be called from any number of goroutines. The handler
// is called from one goroutine per socket family (IPv4, IPv6), so it may run
// concurrently with itself. Close waits for the receive loops to return.
package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/snorkel-net/snorkel/transport"
)

// BatchSize is the largest batch Send takes and a handler is given.
const BatchSize = 128

// ErrClosed is returned by Send once the socket is closed.
var ErrClosed = transport.ErrClosed

// socketBuffer is the send and receive buffer each socket asks for: room for
// a few milliseconds of a busy gateway's traffic while its loop is not
// scheduled.
const socketBuffer = 7 << 20

// Conn is one UDP port, open on IPv4 and IPv6 where the host has them.
type Conn struct {
	socks []*socket // IPv4 first, then IPv6; either may be missing
	port  uint16

	mu      sync.Mutex // guards started and closed transitions
	started bool
	closed  atomic.Bool
	loops   sync.WaitGroup

	// gsoOff is set once the kernel refused UDP segmentation offload on a
	// send, after which every datagram goes in a message of its own.
	gsoOff atomic.Bool

	dropsMu sync.Mutex // guards the sockets' drops and lastDrops (KernelDrops)
}

// socket is the Conn's socket of one address family.
type socket struct {
	conn *net.UDPConn
	rc   syscall.RawConn
	v6   bool
	gso  bool // the kernel offers UDP_SEGMENT

	drops     uint64 // the kernel's drops, counted past 32 bits (KernelDrops)
	lastDrops uint32 // the kernel's count when last read
}

// Open binds UDP port on all addresses; port 0 picks a free port (see Port).
// If the port is taken the error wraps syscall.EADDRINUSE.
func Open(port uint16) (*Conn, error) {
	// With port 0 the IPv4 socket picks a port that the IPv6 one may find
	// taken; another pick usually succeeds.
	for tries := 0; ; tries++ {
		c, err := open(port)
		if err == nil {
			return c, nil
		}
		if port == 0 && errors.Is(err, syscall.EADDRINUSE) && tries < 100 {
			continue
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("udp: port %d is already in use (choose another port or stop the process holding it): %w", port, err)
		}
		return nil, fmt.Errorf("udp: open port %d: %w", port, err)
	}
}

func open(port uint16) (*Conn, error) {
	c := &Conn{port: port}
	for _, network := range []string{"udp4", "udp6"} {
		uc, err := net.ListenUDP(network, &net.UDPAddr{Port: int(c.port)})
		if err != nil {
			if errors.Is(err, syscall.EAFNOSUPPORT) || errors.Is(err, syscall.EADDRNOTAVAIL) {
				continue // the host lacks this family
			}
			c.closeSockets()
			return nil, err
		}
		s, err := newSocket(uc, network == "udp6")
		if err != nil {
			uc.Close()
			c.closeSockets()
			return nil, err
		}
		c.socks = append(c.socks, s)
		c.port = uint16(uc.LocalAddr().(*net.UDPAddr).Port)
	}
	if len(c.socks) == 0 {
		return nil, errors.New("neither IPv4 nor IPv6 is available")
	}
	return c, nil
}

// newSocket sets a bound socket's buffers and offloads.
func newSocket(uc *net.UDPConn, v6 bool) (*socket, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &socket{conn: uc, rc: rc, v6: v6}
	var serr error
	err = rc.Control(func(fd uintptr) {
		f := int(fd)
		// The FORCE variants pass over net.core.[rw]mem_max with
		// CAP_NET_ADMIN, which a gateway has; without it the plain ones
		// get what the sysctl allows.
		if unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, socketBuffer) != nil {
			serr = unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_RCVBUF, socketBuffer)
		}
		if unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, socketBuffer) != nil {
			if err := unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_SNDBUF, socketBuffer); serr == nil {
				serr = err
			}
		}
		// Receive offload is best effort: without it each datagram comes
		// alone, which the loop handles the same way.
		_ = unix.SetsockoptInt(f, unix.SOL_UDP, unix.UDP_GRO, 1)
		_, gerr := unix.GetsockoptInt(f, unix.SOL_UDP, unix.UDP_SEGMENT)
		s.gso = gerr == nil
	})
	if err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, fmt.Errorf("socket buffers: %w", serr)
	}
	return s, nil
}

// Port is the local port the socket is bound to.
func (c *Conn) Port() uint16 { return c.port }

// GSODisabled reports whether the kernel refused UDP segmentation offload and
// sends went back to one datagram per message.
func (c *Conn) GSODisabled() bool { return c.gsoOff.Load() }

// sockFor returns the socket that reaches addr, or nil.
func (c *Conn) sockFor(addr netip.Addr) *socket {
	v6 := !addr.Is4()
	for _, s := range c.socks {
		if s.v6 == v6 {
			return s
		}
	}
	return nil
}

// Send writes each of bufs as one UDP datagram to dst. len(bufs) is at most
// BatchSize. With GSO, runs of equal-sized datagrams go in one message, which
// the kernel gathers from their buffers; bufs are only read.
func (c *Conn) Send(bufs [][]byte, dst netip.AddrPort) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if len(bufs) == 0 {
		return nil
	}
	if len(bufs) > BatchSize {
		return c.sendError(errBatchTooLarge, dst)
	}
	addr := dst.Addr().Unmap()
	s := c.sockFor(addr)
	if s == nil {
		return c.sendError(errNoFamily, dst)
	}
	sc := sendPool.Get().(*sendScratch)
	sc.setDest(addr, dst.Port())
	gso := s.gso && !c.gsoOff.Load()
	n := sc.prepare(bufs, gso, maxPayload(addr))
	err := sc.send(s, n)
	if gso && n < len(bufs) && (errors.Is(err, unix.EIO) || errors.Is(err, unix.EINVAL)) {
		// EIO: the kernel cannot segment on this path (a device without
		// checksum offload), so each datagram goes on its own from now
		// on. EINVAL: a segment does not fit the path's MTU, which only
		// this batch's datagrams need to know. Either way the batch goes
		// again without segmentation.
		if errors.Is(err, unix.EIO) {
			c.gsoOff.Store(true)
		}
		n = sc.prepare(bufs, false, 0)
		err = sc.send(s, n)
	}
	sc.clear(len(bufs))
	sendPool.Put(sc)
	if err == nil {
		return nil
	}
	return c.sendError(err, dst)
}

var (
	errBatchTooLarge = fmt.Errorf("batch larger than %d datagrams", BatchSize)
	errNoFamily      = errors.New("no socket of this address family (the host lacks it)")
)

// sendError is kept out of Send so that the error path's allocations do not
// make Send's locals escape.
func (c *Conn) sendError(err error, dst netip.AddrPort) error {
	if c.closed.Load() {
		return ErrClosed
	}
	return fmt.Errorf("udp: send to %v: %w", dst, err)
}

// Close closes the sockets and waits for the receive loops to return. It is
// safe to call more than once.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Swap(true) {
		return nil
	}
	err := c.closeSockets()
	c.loops.Wait()
	return err
}

func (c *Conn) closeSockets() error {
	var errs []error
	for _, s := range c.socks {
		errs = append(errs, s.conn.Close())
	}
	return errors.Join(errs...)
}
