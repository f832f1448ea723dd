package perf

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
)

// The UDP packet-rate workload: a source sends small datagrams as fast as
// it can (or at a set rate) in batches of sendmmsg, a sink counts what
// arrives in batches of recvmmsg, and the two compare counts over a TCP
// control connection on the same port. Every datagram starts with the
// run's session number and its sequence number, so that stragglers of an
// earlier run are not counted.

// Sizes of the UDP workload.
const (
	// UDPPayload is the workload's datagram payload: 64 bytes, a 92-byte
	// IPv4 packet.
	UDPPayload = 64
	// udpHeader is the session and sequence numbers leading each payload.
	udpHeader = 16
	udpBatch  = 64
	// udpDrain is how long the source waits after its last datagram
	// before asking for the count, for the ones still in the tunnel.
	udpDrain = 300 * time.Millisecond
)

// UDPReport is what a UDP source measured; `snorkel perf-pod udp-source`
// prints it as JSON.
type UDPReport struct {
	Sent     int64 `json:"sent"`
	Received int64 `json:"received"`
	// SendErrors counts datagrams the source's stack refused (no buffer
	// space, an ICMP error of an earlier datagram).
	SendErrors int64   `json:"sendErrors"`
	Seconds    float64 `json:"seconds"`
	Payload    int     `json:"payload"`
}

// ParseUDPReport reads a UDP source's JSON report.
func ParseUDPReport(b []byte) (UDPReport, error) {
	var r UDPReport
	if err := json.Unmarshal(b, &r); err != nil {
		return UDPReport{}, fmt.Errorf("perf: udp report: %w", err)
	}
	if r.Sent <= 0 || r.Seconds <= 0 {
		return UDPReport{}, fmt.Errorf("perf: udp report: %d datagrams sent in %gs; the source sent nothing", r.Sent, r.Seconds)
	}
	if r.Received < 0 || r.Received > r.Sent {
		return UDPReport{}, fmt.Errorf("perf: udp report: %d received of %d sent", r.Received, r.Sent)
	}
	return r, nil
}

// Values returns the UDP workload's metrics.
func (r UDPReport) Values() map[string]float64 {
	return map[string]float64{
		MetricRxPPS.Name: float64(r.Received) / r.Seconds,
		MetricTxPPS.Name: float64(r.Sent) / r.Seconds,
		MetricLoss.Name:  100 * float64(r.Sent-r.Received) / float64(r.Sent),
	}
}

// UDPSink counts the datagrams of the current session.
type UDPSink struct {
	session  atomic.Uint64
	received atomic.Int64
}

// Serve counts datagrams arriving on conn and answers sources on ctl, the
// TCP listener on the same address, until ctx is done.
func (s *UDPSink) Serve(ctx context.Context, conn *net.UDPConn, ctl net.Listener) error {
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
				errc <- fmt.Errorf("perf: udp sink control: %w", err)
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

func (s *UDPSink) receive(conn *net.UDPConn) error {
	pc := ipv4.NewPacketConn(conn)
	msgs := make([]ipv4.Message, udpBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 2048)}
	}
	for {
		n, err := pc.ReadBatch(msgs, 0)
		if err != nil {
			return fmt.Errorf("perf: udp sink: %w", err)
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

// control serves one source: "start SESSION" begins counting that
// session's datagrams from zero and is answered "ok"; "stop" is answered
// with the count, and ends the session.
func (s *UDPSink) control(c net.Conn) {
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
		case "stop":
			n := s.received.Load()
			s.session.Store(0)
			fmt.Fprintln(c, n)
			return
		default:
			fmt.Fprintf(c, "error: unknown command %q\n", cmd)
			return
		}
	}
}

// UDPSourceOptions configures RunUDPSource.
type UDPSourceOptions struct {
	Server   netip.AddrPort
	Duration time.Duration
	// Payload is the datagram payload size, at least 16; default
	// UDPPayload.
	Payload int
	// Rate caps the datagrams per second; 0 sends as fast as the source
	// can.
	Rate float64
}

// RunUDPSource sends datagrams to a UDPSink for o.Duration and reports how
// many it sent and how many the sink counted.
func RunUDPSource(ctx context.Context, o UDPSourceOptions) (UDPReport, error) {
	if o.Payload == 0 {
		o.Payload = UDPPayload
	}
	if o.Payload < udpHeader || o.Payload > 1400 {
		return UDPReport{}, fmt.Errorf("perf: udp payload %d: use %d to 1400 bytes", o.Payload, udpHeader)
	}
	var d net.Dialer
	ctl, err := d.DialContext(ctx, "tcp", o.Server.String())
	if err != nil {
		return UDPReport{}, fmt.Errorf("perf: udp source: control connection: %w", err)
	}
	defer ctl.Close()
	stop := context.AfterFunc(ctx, func() { ctl.SetDeadline(time.Now()) })
	defer stop()
	ctlr := bufio.NewReader(ctl)
	var sid [8]byte
	rand.Read(sid[:])
	session := binary.BigEndian.Uint64(sid[:]) | 1
	if err := ask(ctl, ctlr, fmt.Sprintf("start %x", session), "ok"); err != nil {
		return UDPReport{}, err
	}
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(o.Server))
	if err != nil {
		return UDPReport{}, fmt.Errorf("perf: udp source: %w", err)
	}
	defer conn.Close()
	r, err := blast(ctx, conn, session, o)
	if err != nil {
		return UDPReport{}, err
	}
	if err := sleep(ctx, udpDrain); err != nil {
		return UDPReport{}, err
	}
	ctl.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(ctl, "stop"); err != nil {
		return UDPReport{}, fmt.Errorf("perf: udp source: control connection: %w", err)
	}
	line, err := ctlr.ReadString('\n')
	if err != nil {
		return UDPReport{}, fmt.Errorf("perf: udp source: no count from the sink: %w", err)
	}
	r.Received, err = strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		return UDPReport{}, fmt.Errorf("perf: udp source: sink answered %q", strings.TrimSpace(line))
	}
	// The sink counts only the session's datagrams, but a duplicated one
	// would count twice.
	r.Received = min(r.Received, r.Sent)
	return r, nil
}

// ask sends a control command and checks the sink's answer.
func ask(c net.Conn, r *bufio.Reader, cmd, want string) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(c, cmd); err != nil {
		return fmt.Errorf("perf: udp source: control connection: %w", err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("perf: udp source: no answer to %q from the sink: %w", cmd, err)
	}
	if got := strings.TrimSpace(line); got != want {
		return fmt.Errorf("perf: udp source: sink answered %q to %q", got, cmd)
	}
	return nil
}

// blast sends batches of datagrams for o.Duration.
func blast(ctx context.Context, conn *net.UDPConn, session uint64, o UDPSourceOptions) (UDPReport, error) {
	pc := ipv4.NewPacketConn(conn)
	msgs := make([]ipv4.Message, udpBatch)
	for i := range msgs {
		b := make([]byte, o.Payload)
		binary.BigEndian.PutUint64(b[:8], session)
		msgs[i].Buffers = [][]byte{b}
	}
	var r UDPReport
	r.Payload = o.Payload
	var seq uint64
	start := time.Now()
	end := start.Add(o.Duration)
	for i := 0; ; i++ {
		// Reading the clock every few batches keeps it off the sending
		// path's cost.
		if i%16 == 0 {
			now := time.Now()
			if !now.Before(end) || ctx.Err() != nil {
				break
			}
			if o.Rate > 0 {
				if due := start.Add(time.Duration(float64(r.Sent+r.SendErrors) / o.Rate * float64(time.Second))); due.After(now) {
					time.Sleep(due.Sub(now))
				}
			}
		}
		for _, m := range msgs {
			seq++
			binary.BigEndian.PutUint64(m.Buffers[0][8:16], seq)
		}
		n, err := pc.WriteBatch(msgs, 0)
		r.Sent += int64(n)
		if err != nil {
			// ECONNREFUSED reports an ICMP error for an earlier datagram;
			// ENOBUFS a full queue. Both cost the datagram, not the run.
			if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.EAGAIN) {
				r.SendErrors += int64(max(1, len(msgs)-n))
				continue
			}
			return UDPReport{}, fmt.Errorf("perf: udp source: send: %w", err)
		}
	}
	r.Seconds = time.Since(start).Seconds()
	if ctx.Err() != nil {
		return UDPReport{}, ctx.Err()
	}
	return r, nil
}
