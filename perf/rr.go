package perf

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

// The request/response workload, after netperf's TCP_RR: one TCP
// connection, one transaction in flight, each a request of Size bytes
// answered by a response of the same size. A transaction's time is a round
// trip through both gateways and both pods' stacks.

// MaxRRSize bounds the request and response size.
const MaxRRSize = 64 << 10

// RRReport is what an RR client measured; `snorkel perf-pod rr-client`
// prints it as JSON.
type RRReport struct {
	Transactions int     `json:"transactions"`
	Seconds      float64 `json:"seconds"`
	Size         int     `json:"size"`
	// Latencies of single transactions, in microseconds.
	MinMicros  float64 `json:"minMicros"`
	MeanMicros float64 `json:"meanMicros"`
	P50Micros  float64 `json:"p50Micros"`
	P90Micros  float64 `json:"p90Micros"`
	P99Micros  float64 `json:"p99Micros"`
	P999Micros float64 `json:"p999Micros"`
	MaxMicros  float64 `json:"maxMicros"`
}

// ServeRR answers RR clients on ln until ctx is done. A client first sends
// the transaction size as a 4-byte big-endian number; every request of
// that size is then echoed back.
func ServeRR(ctx context.Context, ln net.Listener) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("perf: rr server: %w", err)
		}
		go func() {
			defer c.Close()
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			echoRR(c)
		}()
	}
}

// echoRR serves one RR connection until the client closes it.
func echoRR(c net.Conn) {
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size == 0 || size > MaxRRSize {
		return
	}
	buf := make([]byte, size)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// RunRR runs transactions of size bytes over c, one at a time, for d, and
// reports their latencies.
func RunRR(ctx context.Context, c net.Conn, size int, d time.Duration) (RRReport, error) {
	if size < 1 || size > MaxRRSize {
		return RRReport{}, fmt.Errorf("perf: rr size %d: use 1 to %d bytes", size, MaxRRSize)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(size))
	if _, err := c.Write(hdr[:]); err != nil {
		return RRReport{}, fmt.Errorf("perf: rr: %w", err)
	}
	req, resp := make([]byte, size), make([]byte, size)
	// A stalled path fails the run rather than hanging it.
	const stall = 5 * time.Second
	lat := make([]float64, 0, 1<<16)
	start := time.Now()
	end := start.Add(d)
	for {
		t0 := time.Now()
		if !t0.Before(end) {
			break
		}
		c.SetDeadline(t0.Add(stall))
		if _, err := c.Write(req); err != nil {
			return RRReport{}, rrErr(ctx, err, len(lat))
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			return RRReport{}, rrErr(ctx, err, len(lat))
		}
		lat = append(lat, float64(time.Since(t0).Nanoseconds())/1e3)
	}
	r := summarizeRR(lat, size)
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

func rrErr(ctx context.Context, err error, done int) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("perf: rr: no response within 5s after %d transactions: %w", done, err)
	}
	return fmt.Errorf("perf: rr: after %d transactions: %w", done, err)
}

// summarizeRR computes the latency statistics of transactions that took
// lat microseconds each.
func summarizeRR(lat []float64, size int) RRReport {
	r := RRReport{Transactions: len(lat), Size: size}
	if len(lat) == 0 {
		return r
	}
	s := slices.Sorted(slices.Values(lat))
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	r.MinMicros, r.MaxMicros = s[0], s[len(s)-1]
	r.MeanMicros = sum / float64(len(s))
	r.P50Micros = Percentile(s, 50)
	r.P90Micros = Percentile(s, 90)
	r.P99Micros = Percentile(s, 99)
	r.P999Micros = Percentile(s, 99.9)
	return r
}

// ParseRRReport reads an RR client's JSON report.
func ParseRRReport(b []byte) (RRReport, error) {
	var r RRReport
	if err := json.Unmarshal(b, &r); err != nil {
		return RRReport{}, fmt.Errorf("perf: rr report: %w", err)
	}
	if r.Transactions == 0 || r.Seconds <= 0 {
		return RRReport{}, fmt.Errorf("perf: rr report: %d transactions in %gs; the path carried none", r.Transactions, r.Seconds)
	}
	if !(r.MinMicros <= r.P50Micros && r.P50Micros <= r.P90Micros && r.P90Micros <= r.P99Micros &&
		r.P99Micros <= r.P999Micros && r.P999Micros <= r.MaxMicros) {
		return RRReport{}, fmt.Errorf("perf: rr report: latencies out of order (min %g, p50 %g, p90 %g, p99 %g, p99.9 %g, max %g)",
			r.MinMicros, r.P50Micros, r.P90Micros, r.P99Micros, r.P999Micros, r.MaxMicros)
	}
	return r, nil
}

// Values returns the RR workload's metrics.
func (r RRReport) Values() map[string]float64 {
	return map[string]float64{
		MetricTransactions.Name: float64(r.Transactions) / r.Seconds,
		MetricP50.Name:          r.P50Micros,
		MetricP99.Name:          r.P99Micros,
		MetricP999.Name:         r.P999Micros,
		MetricRTTMean.Name:      r.MeanMicros,
	}
}
