package perf

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/perf/internal/fixture"
)

// settle bounds the tests' waits for things that take milliseconds on an
// idle machine: under `go test ./...` on two busy cores they can take
// seconds, and a deadline is there to stop a hang, not to time the code.
const settle = 60 * time.Second

// The ping fixtures are real outputs of iputils ping 20221126: over
// loopback, to a namespace that dropped every other echo request, and to
// one that dropped all.
func TestParsePingReadsEveryReplyAndTheLoss(t *testing.T) {
	for _, tc := range []struct {
		file           string
		sent, received int
		p50, p99, loss float64
	}{
		{"ping.txt", 8, 8, 41, 49, 0},
		{"ping-loss.txt", 6, 3, 17, 65, 50},
		{"ping-none.txt", 3, 0, 0, 0, 100},
	} {
		t.Run(tc.file, func(t *testing.T) {
			p, err := ParsePing(fixture.Read(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if p.Sent != tc.sent || p.Received != tc.received || len(p.RTTs) != tc.received {
				t.Errorf("sent %d, received %d, %d RTTs; want %d, %d", p.Sent, p.Received, len(p.RTTs), tc.sent, tc.received)
			}
			v := p.Values()
			if v[MetricLoss.Name] != tc.loss {
				t.Errorf("loss %v%%, want %v%%", v[MetricLoss.Name], tc.loss)
			}
			if tc.received == 0 {
				if _, ok := v[MetricP50.Name]; ok {
					t.Error("an RTT percentile without replies")
				}
				return
			}
			if !near(v[MetricP50.Name], tc.p50) || !near(v[MetricP99.Name], tc.p99) {
				t.Errorf("p50 %v µs, p99 %v µs; want %v and %v", v[MetricP50.Name], v[MetricP99.Name], tc.p50, tc.p99)
			}
			if v[MetricP50.Name] > v[MetricP99.Name] {
				t.Error("percentiles out of order")
			}
		})
	}
}

func near(a, b float64) bool { return a > b-1e-6 && a < b+1e-6 }

func TestParsePingRefusesCutOrQuietOutput(t *testing.T) {
	full := string(fixture.Read(t, "ping.txt"))
	for name, in := range map[string]string{
		"empty":         "",
		"no statistics": full[:strings.Index(full, "---")],
		"quiet (-q)":    "PING 10.9.0.11 (10.9.0.11) 56(84) bytes of data.\n\n--- 10.9.0.11 ping statistics ---\n5 packets transmitted, 5 received, 0% packet loss, time 80ms\n",
	} {
		t.Run(name, func(t *testing.T) {
			if p, err := ParsePing([]byte(in)); err == nil {
				t.Errorf("parsed %+v, want an error", p)
			}
		})
	}
	dup := strings.Replace(full, "time=0.048 ms\n", "time=0.048 ms\n64 bytes from 127.0.0.1: icmp_seq=8 ttl=64 time=0.051 ms (DUP!)\n", 1)
	if p, err := ParsePing([]byte(dup)); err != nil || len(p.RTTs) != 8 {
		t.Errorf("a duplicate reply: %v, %d RTTs; want it ignored", err, len(p.RTTs))
	}
}

func TestRRRoundTripsOverLoopbackAndOrdersPercentiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), settle)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ServeRR(ctx, ln)
	for _, size := range []int{1, 1400} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		r, err := RunRR(ctx, c, size, 300*time.Millisecond)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if r.Transactions < 10 || r.Size != size || r.Seconds < 0.3 {
			t.Errorf("size %d: %+v, want at least 10 transactions over 0.3s", size, r)
		}
		b, _ := json.Marshal(r)
		back, err := ParseRRReport(b)
		if err != nil {
			t.Fatalf("its own report does not parse: %v", err)
		}
		v := back.Values()
		if !(v[MetricP50.Name] > 0 && v[MetricP50.Name] <= v[MetricP99.Name] && v[MetricP99.Name] <= v[MetricP999.Name]) {
			t.Errorf("percentiles %v out of order", v)
		}
		if got, want := v[MetricTransactions.Name], float64(r.Transactions)/r.Seconds; got != want {
			t.Errorf("transactions/s %v, want %v", got, want)
		}
	}
	if _, err := RunRR(ctx, nil, MaxRRSize+1, time.Second); err == nil {
		t.Error("a transaction larger than MaxRRSize was accepted")
	}
}

func TestRRFailsWhenTheServerStopsAnswering(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			var b [5]byte
			c.Read(b[:])
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r, err := RunRR(t.Context(), c, 1, 2*time.Second); err == nil {
		t.Errorf("RR against a server that closed: %+v, want an error", r)
	}
}

func TestParseRRReportRefusesEmptyOrDisorderedReports(t *testing.T) {
	for name, in := range map[string]string{
		"not JSON":        "iperf",
		"no transactions": `{"transactions":0,"seconds":1}`,
		"disordered":      `{"transactions":5,"seconds":1,"minMicros":10,"p50Micros":30,"p90Micros":20,"p99Micros":40,"p999Micros":50,"maxMicros":60}`,
	} {
		if r, err := ParseRRReport([]byte(in)); err == nil {
			t.Errorf("%s: parsed %+v, want an error", name, r)
		}
	}
}
