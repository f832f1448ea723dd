package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gatedEcho echoes like StreamServer, but holds every echo while paused
// and closes every connection on reset: a path that fails over.
type gatedEcho struct {
	paused atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func (g *gatedEcho) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		g.conns = append(g.conns, c)
		g.mu.Unlock()
		go func() {
			defer c.Close()
			buf := make([]byte, msgLen)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				for g.paused.Load() {
					time.Sleep(5 * time.Millisecond)
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}

func (g *gatedEcho) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		c.Close()
	}
	g.conns = nil
}

// TestStreamProbeReportsGapsAndResets runs the probe against a path that
// stalls and then drops its connections: each stream reports a gap that
// spans the stall, then a reset and a new connection.
func TestStreamProbeReportsGapsAndResets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the probe's ping needs a raw socket: run as root")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g := &gatedEcho{}
	go g.serve(ln)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	p := StreamProbe{
		Target:  netip.MustParseAddrPort(ln.Addr().String()),
		Streams: 3, Interval: 10 * time.Millisecond, PingInterval: 10 * time.Millisecond, Gap: 100 * time.Millisecond,
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, pw); pw.Close() }()

	events := make(chan StreamEvent, 1024)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var e StreamEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Errorf("line %q: %v", sc.Text(), err)
				continue
			}
			events <- e
		}
		close(events)
	}()
	next := func(want string, stream int) StreamEvent {
		t.Helper()
		for e := range events {
			if e.Ev == want && (stream < -1 || e.Stream == stream) {
				return e
			}
		}
		t.Fatalf("no %s event for stream %d", want, stream)
		return StreamEvent{}
	}
	up := next("up", -2)
	if up.Stream != 3 {
		t.Fatalf("up with %d streams, want 3", up.Stream)
	}
	next("tick", -2)

	stalled := time.Now().UnixNano()
	g.paused.Store(true)
	time.Sleep(400 * time.Millisecond) // the stall the probe must see
	resumed := time.Now().UnixNano()
	g.paused.Store(false)
	gaps := map[int]StreamEvent{}
	for len(gaps) < 3 {
		e := next("gap", -2)
		if e.Stream >= 0 {
			gaps[e.Stream] = e
		}
	}
	for i, e := range gaps {
		// An echo already on its way when the stall began may land just
		// after it: the gap starts within a message period or two.
		if e.From > stalled+int64(50*time.Millisecond) || e.To < resumed || e.To-e.From < int64(300*time.Millisecond) {
			t.Errorf("stream %d: gap %v from the stall's start, %v long; the stall ran %v from its start",
				i, time.Duration(e.From-stalled), time.Duration(e.To-e.From), time.Duration(resumed-stalled))
		}
	}

	g.reset()
	resets, reopened := map[int]bool{}, map[int]bool{}
	for len(resets) < 3 || len(reopened) < 3 {
		e, ok := <-events
		if !ok {
			t.Fatalf("the probe ended with streams reset %v and reopened %v; want all three each", resets, reopened)
		}
		switch e.Ev {
		case "reset":
			if e.Err == "" {
				t.Errorf("reset of stream %d without its error", e.Stream)
			}
			resets[e.Stream] = true
		case "reopened":
			if !resets[e.Stream] {
				t.Errorf("stream %d reopened before its reset", e.Stream)
			}
			reopened[e.Stream] = true
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	next("end", -2)
}
