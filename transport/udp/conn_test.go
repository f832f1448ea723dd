package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/internal/transporttest"
)

// settle bounds a wait for datagrams over loopback, which take
// microseconds on an idle machine: go test runs packages in parallel, and on
// a loaded 2-core machine such waits stretch by orders of magnitude. Running
// out fails the test, so it is far beyond the normal time.
const settle = 60 * time.Second

func loopback(port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port)
}

func TestOpenPortInUseWrapsEADDRINUSE(t *testing.T) {
	a, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(a.Port())
	if err == nil {
		b.Close()
		t.Fatalf("second Open(%d) succeeded", a.Port())
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Open on a used port: %v does not wrap EADDRINUSE", err)
	}
}

func TestStartRejectsBadOffsetAndSecondCall(t *testing.T) {
	c, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nop := func([][]byte, []int, []netip.AddrPort) {}
	if err := c.Start(transport.Headroom+1, nop); err == nil {
		t.Fatal("Start accepted an offset beyond Headroom")
	}
	if err := c.Start(8, nop); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(8, nop); err == nil {
		t.Fatal("second Start succeeded")
	}
}

func TestSendAfterCloseIsErrClosed(t *testing.T) {
	c, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Send([][]byte{{1}}, loopback(9)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
}

// collector records every datagram a Conn receives, checking that each lands
// at the requested offset inside a whole buffer.
type collector struct {
	t      *testing.T
	offset int
	mu     sync.Mutex
	got    [][]byte
	srcs   []netip.AddrPort
	signal chan struct{}
}

func (c *collector) handle(bufs [][]byte, sizes []int, srcs []netip.AddrPort) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range bufs {
		if sizes[i] == 0 {
			continue
		}
		if len(bufs[i]) < c.offset+sizes[i] {
			c.t.Errorf("buffer %d has len %d, short of its datagram's end at %d", i, len(bufs[i]), c.offset+sizes[i])
		}
		c.got = append(c.got, bytes.Clone(bufs[i][c.offset:c.offset+sizes[i]]))
		c.srcs = append(c.srcs, srcs[i])
	}
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

func (c *collector) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(settle)
	for {
		c.mu.Lock()
		have := len(c.got)
		c.mu.Unlock()
		if have >= n {
			return
		}
		select {
		case <-c.signal:
		case <-deadline:
			t.Fatalf("received %d of %d datagrams", have, n)
		}
	}
}

// payload is datagram i of a test batch: its index and a fill pattern, with
// the last one shorter so that a GSO batch ends on a short segment. Its
// buffer has no room behind it: the kernel gathers a GSO message from the
// datagrams' own buffers.
func payload(i, n, size int) []byte {
	if i == n-1 {
		size /= 2
	}
	p := make([]byte, size)
	binary.BigEndian.PutUint32(p, uint32(i))
	for j := 4; j < size; j++ {
		p[j] = byte(i + j)
	}
	return p
}

func TestSendReceiveBatchOverLoopback(t *testing.T) {
	const offset = 42
	rx, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	col := &collector{t: t, offset: offset, signal: make(chan struct{}, 1)}
	if err := rx.Start(offset, col.handle); err != nil {
		t.Fatal(err)
	}

	const n = 100
	bufs := make([][]byte, n)
	want := make([][]byte, n)
	for i := range bufs {
		bufs[i] = payload(i, n, 1200)
		want[i] = bytes.Clone(bufs[i])
	}
	if err := tx.Send(bufs, loopback(rx.Port())); err != nil {
		t.Fatal(err)
	}
	col.wait(t, n)

	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.got) != n {
		t.Fatalf("received %d datagrams, want %d", len(col.got), n)
	}
	for i, g := range col.got {
		if !bytes.Equal(g, want[i]) {
			t.Fatalf("datagram %d: got %d bytes starting % x, want %d bytes starting % x", i, len(g), g[:8], len(want[i]), want[i][:8])
		}
		if col.srcs[i] != loopback(tx.Port()) {
			t.Fatalf("datagram %d from %v, want %v", i, col.srcs[i], loopback(tx.Port()))
		}
	}
}

func TestSendAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("skipping: the race detector makes sync.Pool drop items, so pooled paths allocate")
	}
	rx, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	bufs := make([][]byte, 16)
	for i := range bufs {
		bufs[i] = make([]byte, 100, transport.BufSize)
	}
	dst := loopback(rx.Port())
	allocs := transporttest.FewestAllocs(100, func() {
		for i := range bufs {
			bufs[i] = bufs[i][:100]
		}
		if err := tx.Send(bufs, dst); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Send allocates %v times per batch, want 0", allocs)
	}
}
