package udpsearch

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// The UDP generator: a source sends small datagrams, paced to a rate or
// as fast as it can, in batches of sendmmsg; a sink counts what arrives
// in batches of recvmmsg; the two compare counts over a TCP control
// connection on the same port. Every datagram starts with its trial's
// session number and its sequence number, so that stragglers of an
// earlier trial are not counted. search.go drives trials of it to find
// a system's forwarding rate.

// Sizes and times of the UDP generator.
const (
	// Payload is the workload's datagram payload: 64 bytes, a 92-byte
	// IPv4 packet.
	Payload = 64
	// udpHeader is the session and sequence numbers leading each payload.
	udpHeader = 16
	// udpBatch is the most datagrams one sendmmsg or recvmmsg moves.
	udpBatch = 64
	// udpPaceInterval is the time a paced source aims to leave between
	// its batches: short enough that a batch is a small burst, long
	// enough that waking up for it costs little CPU.
	udpPaceInterval = 200 * time.Microsecond
	// udpMaxSleep bounds one sleep of a paced source, so that it notices
	// a cancelled context.
	udpMaxSleep = 10 * time.Millisecond
	// After its last datagram a source asks the sink's count every
	// udpDrainPoll until every datagram arrived or the count stayed the
	// same for udpDrainQuiet, and at most for DrainMax: the datagrams
	// still queued in the tunnel arrive late, not never.
	udpDrainPoll  = 20 * time.Millisecond
	udpDrainQuiet = 200 * time.Millisecond
	DrainMax      = 2 * time.Second
)

// Sink counts the datagrams of the current session.
type Sink struct {
	session  atomic.Uint64
	received atomic.Int64
}

// Serve counts datagrams arriving on conn and answers sources on ctl, the
// TCP listener on the same address, until ctx is done.
func (s *Sink) Serve(ctx context.Context, conn *net.UDPConn, ctl net.Listener) error {
	go func() {
		<-ctx.Done()
		conn.Close()
		ctl.Close()
	}()
	// A deep receive buffer keeps the sink from dropping a burst the
	// tunnel delivered.
	conn.SetReadBuffer(8 << 20)
	errc := make(chan error, 2)
	go func() { errc <- s.receive(conn) }()
	go func() {
		for {
			c, err := ctl.Accept()
			if err != nil {
				errc <- fmt.Errorf("udpsearch: sink control: %w", err)
				return
			}
			go s.control(c)
		}
	}()
	err := <-errc
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (s *Sink) receive(conn *net.UDPConn) error {
	pc := ipv4.NewPacketConn(conn)
	msgs := make([]ipv4.Message, udpBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 2048)}
	}
	for {
		n, err := pc.ReadBatch(msgs, 0)
		if err != nil {
			return fmt.Errorf("udpsearch: sink: %w", err)
		}
		want := s.session.Load()
		var got int64
		for _, m := range msgs[:n] {
			if m.N >= udpHeader && binary.BigEndian.Uint64(m.Buffers[0][:8]) == want {
				got++
			}
		}
		if want != 0 {
			s.received.Add(got)
		}
	}
}

// control serves one source, one command a line: "start SESSION" begins
// counting that session's datagrams from zero and is answered "ok";
// "count" is answered with the count so far; "stop" is answered with the
// count, and ends the session. A source runs any number of sessions, one
// after the other, on one connection.
func (s *Sink) control(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		cmd, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch cmd {
		case "start":
			id, err := strconv.ParseUint(arg, 16, 64)
			if err != nil || id == 0 {
				fmt.Fprintf(c, "error: bad session %q\n", arg)
				return
			}
			s.session.Store(0)
			s.received.Store(0)
			s.session.Store(id)
			fmt.Fprintln(c, "ok")
		case "count":
			fmt.Fprintln(c, s.received.Load())
		case "stop":
			n := s.received.Load()
			s.session.Store(0)
			fmt.Fprintln(c, n)
		default:
			fmt.Fprintf(c, "error: unknown command %q\n", cmd)
			return
		}
	}
}

// Trial is one trial of the UDP generator: datagrams offered at a rate
// for a time, and how many the sink counted.
type Trial struct {
	// Rate is the datagrams per second asked for; 0 sends as fast as the
	// source can.
	Rate float64 `json:"rate"`
	// Sent counts the datagrams the source's stack took.
	Sent     int64 `json:"sent"`
	Received int64 `json:"received"`
	// SendErrors counts datagrams the source's stack refused (no buffer
	// space, an ICMP error of an earlier datagram); they count as lost.
	SendErrors int64 `json:"sendErrors"`
	// Seconds is the time the source sent for.
	Seconds float64 `json:"seconds"`
	// DrainSeconds is how long the source then waited for the datagrams
	// still in the tunnel.
	DrainSeconds float64 `json:"drainSeconds"`
}

// Offered is the rate the source really offered, in datagrams per second.
func (t Trial) Offered() float64 {
	if t.Seconds <= 0 {
		return 0
	}
	return float64(t.Sent+t.SendErrors) / t.Seconds
}

// ReceivedRate is the datagrams the sink counted per second of sending.
func (t Trial) ReceivedRate() float64 {
	if t.Seconds <= 0 {
		return 0
	}
	return float64(t.Received) / t.Seconds
}

// Loss is the share of the offered datagrams the sink did not count, in
// percent; 100 when nothing was offered.
func (t Trial) Loss() float64 {
	offered := t.Sent + t.SendErrors
	if offered <= 0 {
		return 100
	}
	return 100 * float64(offered-t.Received) / float64(offered)
}

// source sends trials to one Sink, each a session of its own on one
// control connection.
type source struct {
	ctl     net.Conn
	ctlr    *bufio.Reader
	conn    *net.UDPConn
	pc      *ipv4.PacketConn
	msgs    []ipv4.Message
	payload int
}

// dialSource connects to the sink at server; the caller closes it.
func dialSource(ctx context.Context, server netip.AddrPort, payload int) (*source, error) {
	if payload < udpHeader || payload > 1400 {
		return nil, fmt.Errorf("udpsearch: payload %d: use %d to 1400 bytes", payload, udpHeader)
	}
	var d net.Dialer
	ctl, err := d.DialContext(ctx, "tcp", server.String())
	if err != nil {
		return nil, fmt.Errorf("udpsearch: source: control connection: %w", err)
	}
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server))
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("udpsearch: source: %w", err)
	}
	s := &source{ctl: ctl, ctlr: bufio.NewReader(ctl), conn: conn, pc: ipv4.NewPacketConn(conn), payload: payload}
	s.msgs = make([]ipv4.Message, udpBatch)
	for i := range s.msgs {
		s.msgs[i].Buffers = [][]byte{make([]byte, payload)}
	}
	return s, nil
}

func (s *source) Close() error {
	return errors.Join(s.conn.Close(), s.ctl.Close())
}

// trial offers datagrams at rate (0: as fast as the source can) for d,
// waits for the tunnel to drain, and reads the sink's count.
func (s *source) trial(ctx context.Context, rate float64, d time.Duration) (Trial, error) {
	stop := context.AfterFunc(ctx, func() { s.ctl.SetDeadline(time.Now()) })
	defer stop()
	var sid [8]byte
	rand.Read(sid[:])
	session := binary.BigEndian.Uint64(sid[:]) | 1
	if _, err := s.ask(fmt.Sprintf("start %x", session)); err != nil {
		return Trial{}, err
	}
	for _, m := range s.msgs {
		binary.BigEndian.PutUint64(m.Buffers[0][:8], session)
	}
	t, err := s.send(ctx, rate, d)
	if err != nil {
		return Trial{}, err
	}
	drained := time.Now()
	last, quiet := int64(-1), drained
	for {
		n, err := s.askCount("count")
		if err != nil {
			return Trial{}, err
		}
		now := time.Now()
		if n != last {
			last, quiet = n, now
		}
		if n >= t.Sent || now.Sub(quiet) >= udpDrainQuiet || now.Sub(drained) >= DrainMax {
			break
		}
		select {
		case <-ctx.Done():
			return Trial{}, ctx.Err()
		case <-time.After(udpDrainPoll):
		}
	}
	n, err := s.askCount("stop")
	if err != nil {
		return Trial{}, err
	}
	t.DrainSeconds = time.Since(drained).Seconds()
	// The sink counts only the session's datagrams, but a duplicated one
	// would count twice.
	t.Received = min(n, t.Sent)
	return t, nil
}

// ask sends a control command and returns the sink's answer.
func (s *source) ask(cmd string) (string, error) {
	s.ctl.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(s.ctl, cmd); err != nil {
		return "", fmt.Errorf("udpsearch: source: control connection: %w", err)
	}
	line, err := s.ctlr.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("udpsearch: source: no answer to %q from the sink: %w", cmd, err)
	}
	got := strings.TrimSpace(line)
	if strings.HasPrefix(got, "error") || cmd != "count" && cmd != "stop" && got != "ok" {
		return "", fmt.Errorf("udpsearch: source: sink answered %q to %q", got, cmd)
	}
	return got, nil
}

// askCount sends "count" or "stop" and returns the count in the answer.
func (s *source) askCount(cmd string) (int64, error) {
	a, err := s.ask(cmd)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(a, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("udpsearch: source: sink answered %q to %q", a, cmd)
	}
	return n, nil
}

// send offers the session's datagrams for d, paced by a pacer against the
// monotonic clock.
func (s *source) send(ctx context.Context, rate float64, d time.Duration) (Trial, error) {
	t := Trial{Rate: rate}
	p := newPacer(rate)
	start := monotonic()
	end := start + d.Nanoseconds()
	var seq uint64
	for {
		now := monotonic()
		if now >= end || ctx.Err() != nil {
			t.Seconds = float64(now-start) / 1e9
			break
		}
		n, wake := p.next(now-start, t.Sent+t.SendErrors)
		if n == 0 {
			sleepUntil(min(start+wake, end, now+udpMaxSleep.Nanoseconds()))
			continue
		}
		msgs := s.msgs[:n]
		for _, m := range msgs {
			seq++
			binary.BigEndian.PutUint64(m.Buffers[0][8:16], seq)
		}
		sent, err := s.pc.WriteBatch(msgs, 0)
		t.Sent += int64(sent)
		if err != nil {
			// ECONNREFUSED reports an ICMP error for an earlier datagram;
			// ENOBUFS a full queue. Both cost the datagram, not the run.
			if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.EAGAIN) {
				t.SendErrors += int64(max(1, n-sent))
				continue
			}
			return Trial{}, fmt.Errorf("udpsearch: source: send: %w", err)
		}
	}
	if ctx.Err() != nil {
		return Trial{}, ctx.Err()
	}
	return t, nil
}

// A pacer spaces a source's datagrams: datagram i is due at i/rate
// seconds from the start, and the source sends whatever is due in batches,
// sleeping between them until a batch of about udpPaceInterval's worth is
// due. Since it counts from the start, a late wake-up is made up at once
// rather than lost. A zero rate sends full batches back to back.
type pacer struct {
	rate  float64 // datagrams per second; 0 unpaced
	batch int64   // datagrams to wait for between sleeps
}

func newPacer(rate float64) pacer {
	if rate <= 0 {
		return pacer{batch: udpBatch}
	}
	b := int64(math.Ceil(rate * udpPaceInterval.Seconds()))
	return pacer{rate: rate, batch: min(max(b, 1), udpBatch)}
}

// next returns how many datagrams to send at elapsed nanoseconds after
// the start, sent of them already gone, and, when none is due, the
// elapsed time to sleep until.
func (p pacer) next(elapsed, sent int64) (n int, wake int64) {
	if p.rate <= 0 {
		return udpBatch, 0
	}
	due := int64(float64(elapsed)*p.rate/1e9) + 1 - sent
	if due > 0 {
		return int(min(due, udpBatch)), 0
	}
	// The first datagram of the next batch is datagram sent+batch-1.
	return 0, int64(math.Ceil(float64(sent+p.batch-1) * 1e9 / p.rate))
}

// monotonic reads CLOCK_MONOTONIC in nanoseconds.
func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// sleepUntil sleeps until CLOCK_MONOTONIC reaches t nanoseconds. An
// absolute deadline does not drift with the time it takes to wake up, and
// clock_nanosleep wakes within microseconds where the Go scheduler's
// timers round short sleeps up to a millisecond.
func sleepUntil(t int64) {
	ts := unix.NsecToTimespec(t)
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
	}
}
