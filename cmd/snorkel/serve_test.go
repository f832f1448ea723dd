package main

import (
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// wait bounds every wait on the network: far beyond the normal time, so
// that a busy machine does not fail the test.
const wait = 60 * time.Second

// countingListener counts the connections its Accept handed out that are
// not closed yet, and the most there ever were.
type countingListener struct {
	net.Listener
	open, most atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.open.Add(1)
	for m := l.most.Load(); n > m && !l.most.CompareAndSwap(m, n); m = l.most.Load() {
	}
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// TestSlowHeadersAreCutAndConnectionsCapped: clients that send half a
// request header and stall are each closed once the header timeout runs
// out, the server never holds more connections than its cap however many
// wait, and it serves a whole request afterwards.
func TestSlowHeadersAreCutAndConnectionsCapped(t *testing.T) {
	lim := httpLimits{readHeader: 2 * time.Second, read: 4 * time.Second, write: 4 * time.Second, idle: 4 * time.Second, maxConns: 3}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: inner}
	srv := serveHTTP(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	}), lim)
	defer srv.Close()

	clients := 3 * lim.maxConns
	type result struct {
		err     error
		elapsed time.Duration
	}
	results := make(chan result, clients)
	for range clients {
		c, err := net.DialTimeout("tcp", srv.Addr, wait)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			start := time.Now()
			if _, err := c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: snorkel\r\nX-Slow: ")); err != nil {
				results <- result{err: err}
				return
			}
			c.SetReadDeadline(time.Now().Add(wait))
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				results <- result{err: errors.New("still open after a minute")}
				return
			}
			results <- result{elapsed: time.Since(start)}
		}()
	}
	// The server's timer starts a moment after the client's clock: the
	// two may differ by a scheduling delay, not by the timeout.
	const timerSlack = 50 * time.Millisecond
	for range clients {
		r := <-results
		if r.err != nil {
			t.Errorf("a client with half a header: %v; want the server to close it after %v", r.err, lim.readHeader)
		} else if r.elapsed < lim.readHeader-timerSlack {
			t.Errorf("a client with half a header was closed after %v, before the header timeout of %v", r.elapsed, lim.readHeader)
		}
	}
	if most := ln.most.Load(); most > int64(lim.maxConns) {
		t.Errorf("the server held %d connections at once; the cap is %d", most, lim.maxConns)
	}

	client := &http.Client{Timeout: wait}
	resp, err := client.Get("http://" + srv.Addr + "/metrics")
	if err != nil {
		t.Fatalf("a whole request after the slow ones: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a whole request after the slow ones: %s", resp.Status)
	}
}

// TestEveryListenerHasEveryLimit: a zero timeout is no timeout, and a zero
// cap is a listener that accepts nothing.
func TestEveryListenerHasEveryLimit(t *testing.T) {
	for name, lim := range map[string]httpLimits{"metrics": metricsLimits, "debug": debugLimits} {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := serveHTTP(inner, http.NotFoundHandler(), lim)
		srv.Close()
		for field, d := range map[string]time.Duration{
			"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
			"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout,
		} {
			if d <= 0 {
				t.Errorf("%s listener: %s is %v; want a bound", name, field, d)
			}
		}
		if lim.maxConns <= 0 {
			t.Errorf("%s listener: connection cap %d", name, lim.maxConns)
		}
	}
}

// TestDebugListener: the debug listener serves the gateway's state, and the
// profiler only with --pprof, and then not for ever.
func TestDebugListener(t *testing.T) {
	state := http.NewServeMux()
	state.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("state\n")) })
	for _, tc := range []struct {
		name  string
		args  []string
		paths map[string]int
	}{
		{"without --pprof", nil, map[string]int{
			"/status":                        http.StatusOK,
			"/debug/pprof/":                  http.StatusNotFound,
			"/debug/pprof/profile?seconds=1": http.StatusNotFound,
		}},
		{"with --pprof", []string{"--pprof"}, map[string]int{
			"/status":                           http.StatusOK,
			"/debug/pprof/":                     http.StatusOK,
			"/debug/pprof/goroutine?debug=1":    http.StatusOK,
			"/debug/pprof/trace?seconds=NaN":    http.StatusBadRequest,
			"/debug/pprof/profile?seconds=3600": http.StatusBadRequest,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			d := addDebugFlags(fs)
			if err := fs.Parse(append([]string{"--debug-address=127.0.0.1:0"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			srv, err := d.serve(state)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			client := &http.Client{Timeout: wait}
			for path, want := range tc.paths {
				resp, err := client.Get("http://" + srv.Addr + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("GET %s: %s; want %d", path, resp.Status, want)
				}
			}
		})
	}
}

func TestDebugFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr []string // each in the error; none for no error and no listener
	}{
		{"empty address turns the listener off", []string{"--debug-address="}, nil},
		{"pprof without an address is refused", []string{"--debug-address=", "--pprof"}, []string{"--pprof", "--debug-address"}},
		{"a bad address names the flag", []string{"--debug-address=nowhere"}, []string{"--debug-address", "nowhere"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			d := addDebugFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			srv, err := d.serve(http.NotFoundHandler())
			if srv != nil {
				srv.Close()
				t.Errorf("a listener on %s", srv.Addr)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Errorf("err %v; want none", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; want one naming %v", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

func TestDebugAddressDefaultsToLoopback(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	d := addDebugFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(*d.address)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		t.Errorf("--debug-address defaults to %q; want a loopback address", *d.address)
	}
	if *d.pprof {
		t.Error("--pprof is on by default")
	}
}
