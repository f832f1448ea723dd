package natdiscovery

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPort is Submariner's natt-discovery-port.
const DefaultPort = 4490

// resendInterval is how often a probe repeats its request until answered:
// UDP may lose either.
const resendInterval = 500 * time.Millisecond

// Conn is a gateway's discovery socket: it answers the requests of other
// gateways and sends its own probes from the same port, so that the source
// a remote sees is the mapping a NAT keeps for this port.
type Conn struct {
	pc  *net.UDPConn
	key Key
	id  string

	mu      sync.Mutex
	pending map[[NonceLen]byte]probe

	drops [numDrops]atomic.Uint64
	done  chan struct{}
}

// probe is a request in flight.
type probe struct {
	to     netip.AddrPort
	remote string
	seen   chan netip.AddrPort
}

// Listen opens the discovery socket of cluster id at addr and starts
// answering requests authenticated with key.
func Listen(addr netip.AddrPort, id string, key Key) (*Conn, error) {
	if id == "" || len(id) > MaxIDLen {
		return nil, fmt.Errorf("natdiscovery: cluster ID %q: it must have 1 to %d characters", id, MaxIDLen)
	}
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("natdiscovery: listen on %v: %w", addr, err)
	}
	c := &Conn{pc: pc, key: key, id: id, pending: map[[NonceLen]byte]probe{}, done: make(chan struct{})}
	go c.serve()
	return c, nil
}

// LocalAddr is the address the socket listens on.
func (c *Conn) LocalAddr() netip.AddrPort { return c.pc.LocalAddr().(*net.UDPAddr).AddrPort() }

// Close stops the socket; probes in flight fail.
func (c *Conn) Close() error {
	err := c.pc.Close()
	<-c.done
	return err
}

// Drops are the datagrams dropped so far, by reason.
func (c *Conn) Drops() map[Drop]uint64 {
	out := map[Drop]uint64{}
	for d := DropMalformed; d < numDrops; d++ {
		if n := c.drops[d].Load(); n > 0 {
			out[d] = n
		}
	}
	return out
}

func (c *Conn) serve() {
	defer close(c.done)
	buf := make([]byte, MaxSize+1)
	out := make([]byte, 0, MaxSize)
	for {
		n, src, err := c.pc.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		m, drop := Parse(buf[:n], &c.key)
		if drop == NotDropped {
			drop = c.handle(&m, src, out)
		}
		if drop != NotDropped {
			c.drops[drop].Add(1)
		}
	}
}

// handle answers a request or hands a response to its probe.
func (c *Conn) handle(m *Message, src netip.AddrPort, out []byte) Drop {
	if m.To != c.id {
		return DropNotForUs
	}
	if m.Type == Request {
		r := Message{Type: Response, Nonce: m.Nonce, From: c.id, To: m.From, Seen: src}
		// A failed send is a lost datagram: the prober asks again.
		_, _ = c.pc.WriteToUDPAddrPort(r.Append(out[:0], &c.key), src)
		return NotDropped
	}
	c.mu.Lock()
	p, ok := c.pending[m.Nonce]
	if ok && p.to == src && p.remote == m.From {
		delete(c.pending, m.Nonce)
	}
	c.mu.Unlock()
	if !ok || p.to != src || p.remote != m.From {
		return DropUnexpected
	}
	p.seen <- m.Seen
	return NotDropped
}

// Probe asks the gateway of cluster remote at to, repeating the request
// until it answers or ctx ends, and returns the source address it saw this
// gateway's request come from.
func (c *Conn) Probe(ctx context.Context, to netip.AddrPort, remote string) (netip.AddrPort, error) {
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	req := Message{Type: Request, From: c.id, To: remote}
	if _, err := rand.Read(req.Nonce[:]); err != nil {
		return netip.AddrPort{}, err
	}
	seen := make(chan netip.AddrPort, 1)
	c.mu.Lock()
	c.pending[req.Nonce] = probe{to: to, remote: remote, seen: seen}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, req.Nonce)
		c.mu.Unlock()
	}()
	b := req.Append(nil, &c.key)
	t := time.NewTicker(resendInterval)
	defer t.Stop()
	for {
		if _, err := c.pc.WriteToUDPAddrPort(b, to); errors.Is(err, net.ErrClosed) {
			return netip.AddrPort{}, fmt.Errorf("natdiscovery: probe %s at %v: %w", remote, to, err)
		}
		select {
		case s := <-seen:
			return s, nil
		case <-ctx.Done():
			return netip.AddrPort{}, fmt.Errorf("natdiscovery: probe %s at %v: no answer: %w", remote, to, ctx.Err())
		case <-c.done:
			return netip.AddrPort{}, fmt.Errorf("natdiscovery: probe %s at %v: %w", remote, to, net.ErrClosed)
		case <-t.C:
		}
	}
}
