package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
)

// capture is a tcpdump running in a namespace, printing one line per
// packet.
type capture struct {
	mu   sync.Mutex
	out  bytes.Buffer
	errs bytes.Buffer
	done chan error
	stop func()
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}

// startCapture starts tcpdump on iface in ns with a filter, and returns
// once tcpdump says it is listening, so that no packet sent after the call
// is missed. With count > 0 tcpdump exits after that many packets.
func startCapture(t *testing.T, ns *topo.NS, iface, filter string, count int) *capture {
	t.Helper()
	// The context only keeps a capture the test forgot from running on;
	// the cleanup below stops it, however long the test took.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	args := []string{"-i", iface, "-n", "-l", "--immediate-mode"}
	if count > 0 {
		args = append(args, "-c", fmt.Sprint(count))
	}
	cmd := ns.Command(ctx, "tcpdump", append(args, filter)...)
	c := &capture{done: make(chan error, 1)}
	cmd.Stdout = c
	stderr, err := cmd.StderrPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("tcpdump in %s: %v", ns, err)
	}
	c.stop = func() {
		// SIGINT makes tcpdump flush what it captured and exit 0.
		cmd.Process.Signal(syscall.SIGINT)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			c.mu.Lock()
			c.errs.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			if !signalled && strings.Contains(sc.Text(), "listening on") {
				close(ready)
				signalled = true
			}
		}
		if !signalled {
			close(ready)
		}
		c.done <- cmd.Wait()
		cancel()
	}()
	t.Cleanup(func() {
		c.stop()
		<-c.done
	})
	select {
	case <-ready:
	case <-time.After(settle):
		t.Fatalf("tcpdump in %s did not start listening: %s", ns, c.stderr())
	}
	if c.exited() {
		t.Fatalf("tcpdump in %s exited at start: %s", ns, c.stderr())
	}
	return c
}

func (c *capture) exited() bool {
	select {
	case err := <-c.done:
		c.done <- err
		return true
	default:
		return false
	}
}

func (c *capture) stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errs.String()
}

// wait waits for tcpdump to exit on its own (after its count) for up to
// timeout, then stops it, and returns the packet lines it printed.
func (c *capture) wait(timeout time.Duration) []string {
	select {
	case err := <-c.done:
		c.done <- err
	case <-time.After(timeout):
		c.stop()
		err := <-c.done
		c.done <- err
	}
	return c.printed()
}

// lines stops tcpdump and returns the packet lines it printed.
func (c *capture) lines() []string {
	return c.wait(0)
}

// linesWhen waits until the packet lines tcpdump printed satisfy ok, for up
// to timeout, then stops it and returns them. A packet tcpdump has not yet
// read when it is stopped is never printed, and on a loaded host tcpdump
// lags the traffic it captures: a check that counts packets it knows have
// crossed waits for them here.
func (c *capture) linesWhen(timeout time.Duration, ok func([]string) bool) []string {
	deadline := time.Now().Add(timeout)
	for !ok(c.printed()) && time.Now().Before(deadline) && !c.exited() {
		time.Sleep(20 * time.Millisecond)
	}
	return c.lines()
}

// printed returns the packet lines tcpdump has printed so far.
func (c *capture) printed() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.FieldsFunc(c.out.String(), func(r rune) bool { return r == '\n' })
}
