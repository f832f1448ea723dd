// Package udp is the batched UDP socket that the tunnel transports share. It
// wraps wireguard-go's conn.StdNetBind, which reads and writes with
// recvmmsg/sendmmsg and uses UDP GSO/GRO where the kernel offers them, and
// adds what a transport needs around it: a receive loop per socket family
// that fills pooled buffers at a caller-chosen offset, netip source
// addresses, and a port-in-use error callers can test for.
//
// Allocation: Send and the receive loops allocate nothing of their own per
// packet or per batch; buffers, endpoints and scratch slices come from pools
// or live as long as the loop. conn.StdNetBind itself still allocates an
// endpoint per received datagram.
//
// Concurrency: Send may be called from any number of goroutines. The handler
// is called from one goroutine per socket family (IPv4, IPv6), so it may run
// concurrently with itself. Close waits for the receive loops to return.
package udp

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/snorkel-net/snorkel/transport"
)

// BatchSize is the largest batch Send takes and a handler is given.
const BatchSize = conn.IdealBatchSize

// ErrClosed is returned by Send once the socket is closed.
var ErrClosed = transport.ErrClosed

// Conn is one UDP port, open on IPv4 and IPv6 where the host has them.
type Conn struct {
	bind conn.Bind
	fns  []conn.ReceiveFunc
	port uint16

	// eps holds *conn.StdNetEndpoint values for Send, which needs an
	// endpoint interface value per call.
	eps sync.Pool

	mu      sync.Mutex // guards started and closed transitions
	started bool
	closed  atomic.Bool
	loops   sync.WaitGroup

	// gsoOff is set once the kernel refused UDP segmentation offload on a
	// send and the bind fell back to one datagram per packet.
	gsoOff atomic.Bool
}

// Open binds UDP port on all addresses; port 0 picks a free port (see Port).
// If the port is taken the error wraps syscall.EADDRINUSE.
func Open(port uint16) (*Conn, error) {
	bind := conn.NewStdNetBind()
	fns, actual, err := bind.Open(port)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("udp: port %d is already in use (choose another port or stop the process holding it): %w", port, err)
		}
		return nil, fmt.Errorf("udp: open port %d: %w", port, err)
	}
	c := &Conn{bind: bind, fns: fns, port: actual}
	c.eps.New = func() any { return new(conn.StdNetEndpoint) }
	return c, nil
}

// Port is the local port the socket is bound to.
func (c *Conn) Port() uint16 { return c.port }

// GSODisabled reports whether the kernel refused UDP segmentation offload and
// sends went back to one datagram per packet.
func (c *Conn) GSODisabled() bool { return c.gsoOff.Load() }

// Send writes each of bufs as one UDP datagram to dst. len(bufs) is at most
// BatchSize. When GSO is on, the bind may coalesce bufs[1:] into the
// capacity behind bufs[0], so the caller must own that tailroom.
func (c *Conn) Send(bufs [][]byte, dst netip.AddrPort) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if len(bufs) == 0 {
		return nil
	}
	ep := c.eps.Get().(*conn.StdNetEndpoint)
	ep.AddrPort = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	err := c.bind.Send(bufs, ep)
	c.eps.Put(ep)
	if err == nil {
		return nil
	}
	return c.sendError(err, dst)
}

// sendError is kept out of Send so that the error path's allocations do not
// make Send's locals escape.
func (c *Conn) sendError(err error, dst netip.AddrPort) error {
	var gso conn.ErrUDPGSODisabled
	if errors.As(err, &gso) {
		// The bind already retried the batch without GSO; only the retry's
		// outcome matters to the caller.
		c.gsoOff.Store(true)
		if gso.RetryErr == nil {
			return nil
		}
		err = gso.RetryErr
	}
	if c.closed.Load() {
		return ErrClosed
	}
	return fmt.Errorf("udp: send to %v: %w", dst, err)
}

// Close closes the socket and waits for the receive loops to return. It is
// safe to call more than once.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Swap(true) {
		return nil
	}
	err := c.bind.Close()
	c.loops.Wait()
	return err
}
