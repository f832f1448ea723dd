package perf

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
)

// pingInterval is the gap between echo requests of the ping workload: short
// enough for a few hundred samples in a repetition, long enough that each
// echo crosses an idle path.
const pingInterval = 20 * time.Millisecond

// Ping is what one run of iputils ping reports.
type Ping struct {
	Sent, Received int
	// RTTs are the round trips of the answered requests, in microseconds,
	// in the order they arrived.
	RTTs []float64
}

var (
	pingReplyRE = regexp.MustCompile(`^\d+ bytes from .*: icmp_seq=\d+ .*time=([\d.]+) ms`)
	pingCountRE = regexp.MustCompile(`^(\d+) packets transmitted, (\d+) received`)
)

// ParsePing reads the output of iputils `ping -c N ADDR` (without -q): a
// line per reply, then the statistics.
func ParsePing(out []byte) (Ping, error) {
	var p Ping
	counted := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		// A duplicate reply is not a round trip of its own, and ping does
		// not count it as received.
		if m := pingReplyRE.FindStringSubmatch(line); m != nil && !strings.HasSuffix(line, "(DUP!)") {
			ms, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				return Ping{}, fmt.Errorf("perf: ping reply %q: %w", line, err)
			}
			p.RTTs = append(p.RTTs, ms*1000)
			continue
		}
		if m := pingCountRE.FindStringSubmatch(line); m != nil {
			p.Sent, _ = strconv.Atoi(m[1])
			p.Received, _ = strconv.Atoi(m[2])
			counted = true
		}
	}
	if !counted {
		return Ping{}, errors.New("perf: ping printed no statistics line (\"N packets transmitted, M received\"); was it cut short?")
	}
	if p.Sent == 0 {
		return Ping{}, errors.New("perf: ping sent nothing")
	}
	if len(p.RTTs) != p.Received {
		return Ping{}, fmt.Errorf("perf: ping reports %d received but printed %d replies; run it without -q", p.Received, len(p.RTTs))
	}
	return p, nil
}

// Values returns the ping workload's metrics: loss always, the RTT
// percentiles when anything came back.
func (p Ping) Values() map[string]float64 {
	v := map[string]float64{MetricLoss.Name: 100 * float64(p.Sent-p.Received) / float64(p.Sent)}
	if len(p.RTTs) == 0 {
		return v
	}
	s := slices.Sorted(slices.Values(p.RTTs))
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	v[MetricRTTMean.Name] = sum / float64(len(s))
	v[MetricP50.Name] = Percentile(s, 50)
	v[MetricP99.Name] = Percentile(s, 99)
	return v
}

// runPing pings addr from ns for about d and returns ping's output, which
// holds the statistics also when some requests went unanswered.
func runPing(ctx context.Context, ns *topo.NS, addr netip.Addr, d time.Duration) ([]byte, error) {
	count := max(10, int(d/pingInterval))
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	out, err := ns.Command(ctx, "ping", "-n", "-c", strconv.Itoa(count), "-i", fmt.Sprintf("%.3f", pingInterval.Seconds()), "-W", "2", addr.String()).Output()
	if err != nil && len(out) == 0 {
		return nil, fmt.Errorf("perf: ping %s in %s: %w", addr, ns, err)
	}
	return out, nil
}
