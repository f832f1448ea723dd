package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// StreamServer echoes every TCP connection back to its client: the far end
// of StreamProbe's streams.
func StreamServer(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("stream server: %w", err)
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// StreamProbe watches a path while it fails over: long-lived TCP streams
// to a StreamServer, each sending a small message every Interval and
// reading its echo, and a steady ICMP echo ("ping") to the same address.
// It reports what it sees as JSON lines (StreamEvent), times in Unix
// nanoseconds, so that whoever causes the failover can tell when each
// stopped and when it flowed again.
type StreamProbe struct {
	Target  netip.AddrPort
	Streams int
	// Interval is each stream's message period; PingInterval the ping's.
	Interval, PingInterval time.Duration
	// Gap is the silence that counts as an outage: a reply after a longer
	// one is reported as a gap.
	Gap time.Duration
}

// StreamEvent is one line of StreamProbe's output.
type StreamEvent struct {
	// Ev is up (every stream connected), gap (Stream, or -1 for the ping,
	// went silent at From and answered again at To), reset (the stream
	// died at At with Err), reopened (a new connection replaced it at At),
	// tick (every quarter second: Last is the last reply of the ping and
	// of each stream) or end.
	Ev     string  `json:"ev"`
	Stream int     `json:"stream"`
	At     int64   `json:"at,omitempty"`
	From   int64   `json:"from,omitempty"`
	To     int64   `json:"to,omitempty"`
	Err    string  `json:"err,omitempty"`
	Last   []int64 `json:"last,omitempty"`
}

// PingStream is StreamEvent.Stream for the ping.
const PingStream = -1

// msgLen is a stream message's length: small, so that a stream keeps
// about one message in flight.
const msgLen = 16

// Run runs the probe until ctx ends, writing events to out.
func (p StreamProbe) Run(ctx context.Context, out io.Writer) error {
	if p.Streams < 1 || p.Interval <= 0 || p.PingInterval <= 0 || p.Gap <= 0 {
		return errors.New("stream probe: Streams, Interval, PingInterval and Gap must be positive")
	}
	ew := &eventWriter{enc: json.NewEncoder(out)}
	last := make([]atomic.Int64, p.Streams+1) // [0] is the ping, [i+1] stream i
	pc, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		return fmt.Errorf("stream probe: ping socket: %w", err)
	}
	defer pc.Close()
	conns := make([]net.Conn, p.Streams)
	for i := range conns {
		c, err := p.dial(ctx)
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return err
		}
		conns[i] = c
	}
	now := time.Now().UnixNano()
	for i := range last {
		last[i].Store(now)
	}
	ew.write(StreamEvent{Ev: "up", Stream: p.Streams, At: now})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { p.ping(ctx, pc, &last[0], ew) })
	for i, c := range conns {
		wg.Go(func() { p.stream(ctx, i, c, &last[i+1], ew) })
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			ew.write(StreamEvent{Ev: "end", At: time.Now().UnixNano()})
			return nil
		case <-tick.C:
			ls := make([]int64, len(last))
			for i := range last {
				ls[i] = last[i].Load()
			}
			ew.write(StreamEvent{Ev: "tick", At: time.Now().UnixNano(), Last: ls})
		}
	}
}

func (p StreamProbe) dial(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", p.Target.String())
	if err != nil {
		return nil, fmt.Errorf("stream probe: %w", err)
	}
	return c, nil
}

// stream runs stream i on c, and on a new connection whenever c dies.
func (p StreamProbe) stream(ctx context.Context, i int, c net.Conn, last *atomic.Int64, ew *eventWriter) {
	for {
		err := p.exchange(ctx, i, c, last, ew)
		c.Close()
		if ctx.Err() != nil {
			return
		}
		ew.write(StreamEvent{Ev: "reset", Stream: i, At: time.Now().UnixNano(), Err: err.Error()})
		for {
			if c, err = p.dial(ctx); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(p.Interval):
			}
		}
		now := time.Now().UnixNano()
		last.Store(now)
		ew.write(StreamEvent{Ev: "reopened", Stream: i, At: now})
	}
}

// exchange sends a message every Interval on c and reads the echoes until
// c fails or ctx ends.
func (p StreamProbe) exchange(ctx context.Context, i int, c net.Conn, last *atomic.Int64, ew *eventWriter) error {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	failed := make(chan error, 1)
	go func() {
		msg := make([]byte, msgLen)
		t := time.NewTicker(p.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-failed:
				return
			case <-t.C:
			}
			if _, err := c.Write(msg); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, msgLen)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			close(failed)
			return err
		}
		p.answered(i, last, ew)
	}
}

// answered records a reply of stream i (PingStream for the ping), and a
// gap when the silence before it was longer than Gap.
func (p StreamProbe) answered(i int, last *atomic.Int64, ew *eventWriter) {
	now := time.Now().UnixNano()
	if prev := last.Swap(now); now-prev > int64(p.Gap) {
		ew.write(StreamEvent{Ev: "gap", Stream: i, From: prev, To: now})
	}
}

// ping sends an echo request every PingInterval and reads the replies.
func (p StreamProbe) ping(ctx context.Context, pc *icmp.PacketConn, last *atomic.Int64, ew *eventWriter) {
	dst := &net.IPAddr{IP: p.Target.Addr().AsSlice()}
	id := os.Getpid() & 0xffff
	context.AfterFunc(ctx, func() { pc.Close() })
	go func() {
		t := time.NewTicker(p.PingInterval)
		defer t.Stop()
		for seq := 0; ; seq++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			m := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq & 0xffff, Data: make([]byte, 56)}}
			if b, err := m.Marshal(nil); err == nil {
				_, _ = pc.WriteTo(b, dst)
			}
		}
	}()
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if a, ok := from.(*net.IPAddr); !ok || !a.IP.Equal(dst.IP) {
			continue
		}
		m, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id {
			p.answered(PingStream, last, ew)
		}
	}
}

// eventWriter serialises the goroutines' events.
type eventWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (w *eventWriter) write(e StreamEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.enc.Encode(e)
}
