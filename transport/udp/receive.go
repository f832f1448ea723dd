package udp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/snorkel-net/snorkel/transport"
)

// Handler takes one received batch. bufs[i] is a whole buffer of
// transport.BufSize bytes and datagram i is bufs[i][offset:offset+sizes[i]],
// where offset is the one given to Start; srcs[i] is its sender. Entries
// with sizes[i] == 0 carry nothing and are to be skipped. The handler may
// reslice the entries of bufs and write into the buffers, but must not keep
// any of them after it returns.
type Handler func(bufs [][]byte, sizes []int, srcs []netip.AddrPort)

// batch is the memory of one receive loop: BatchSize buffers and the scratch
// slices the bind and the handler are given. It lives as long as the loop
// and returns to batchPool when the loop ends.
type batch struct {
	bufs  [][]byte // whole buffers, len transport.BufSize
	views [][]byte // bufs[i][offset:], where the bind writes
	out   [][]byte // given to the handler, reset from bufs before each call
	sizes []int
	eps   []conn.Endpoint
	srcs  []netip.AddrPort
}

var batchPool = sync.Pool{New: func() any {
	b := &batch{
		bufs:  make([][]byte, BatchSize),
		views: make([][]byte, BatchSize),
		out:   make([][]byte, BatchSize),
		sizes: make([]int, BatchSize),
		eps:   make([]conn.Endpoint, BatchSize),
		srcs:  make([]netip.AddrPort, BatchSize),
	}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, transport.BufSize)
	}
	return b
}}

// receiveBackoff bounds how long a loop sleeps after a run of read errors
// that are not the socket closing, so a persistent error does not spin.
const receiveBackoff = 100 * time.Millisecond

// logInterval is the least time between two logged read errors of a loop.
const logInterval = time.Second

// Start runs one receive loop per socket family, each calling h with the
// batches it reads. Datagrams are written at offset into their buffers, so
// that a caller can strip its headers and leave room before the payload;
// offset is at most transport.Headroom. Start may be called once.
func (c *Conn) Start(offset int, h Handler) error {
	if offset < 0 || offset > transport.Headroom {
		return fmt.Errorf("udp: receive offset %d: must be within 0..%d", offset, transport.Headroom)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return ErrClosed
	}
	if c.started {
		return errors.New("udp: receive loops already started")
	}
	c.started = true
	for _, fn := range c.fns {
		c.loops.Add(1)
		go c.receive(fn, offset, h)
	}
	return nil
}

func (c *Conn) receive(fn conn.ReceiveFunc, offset int, h Handler) {
	defer c.loops.Done()
	b := batchPool.Get().(*batch)
	defer batchPool.Put(b)
	for i := range b.bufs {
		b.views[i] = b.bufs[i][offset:]
	}
	var streak int
	var logged time.Time
	for {
		n, err := fn(b.views, b.sizes, b.eps)
		if err != nil {
			if c.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			if now := time.Now(); now.Sub(logged) >= logInterval {
				logged = now
				slog.Warn("udp: receive failed; retrying", "port", c.port, "func", fn.PrettyName(), "err", err)
			}
			streak++
			time.Sleep(min(time.Duration(streak)*10*time.Millisecond, receiveBackoff))
			continue
		}
		streak = 0
		for i := 0; i < n; i++ {
			b.out[i] = b.bufs[i]
			b.srcs[i] = netip.AddrPort{}
			ep, ok := b.eps[i].(*conn.StdNetEndpoint)
			b.eps[i] = nil
			if b.sizes[i] == 0 || !ok {
				b.sizes[i] = 0
				continue
			}
			// An IPv4 sender on the dual-stack path arrives as an
			// IPv4-mapped address; callers key peers on plain IPv4.
			b.srcs[i] = netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())
		}
		h(b.out[:n], b.sizes[:n], b.srcs[:n])
	}
}
