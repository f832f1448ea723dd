package dnsperf

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Stats is what dnsperf prints after a run.
type Stats struct {
	Sent, Completed, Lost int
	// Rcodes counts the answers by response code.
	Rcodes  map[string]int
	RunTime time.Duration
	QPS     float64
	// Latency is over the completed queries: average, least, most and
	// standard deviation (dnsperf prints no percentiles).
	AvgLatency, MinLatency, MaxLatency, StdDevLatency time.Duration
}

var (
	statsInt = regexp.MustCompile(`^\s*Queries (sent|completed|lost):\s+(\d+)`)
	statsNum = regexp.MustCompile(`^\s*(Run time \(s\)|Queries per second|Latency StdDev \(s\)):\s+([0-9.]+)`)
	statsAvg = regexp.MustCompile(`^\s*Average Latency \(s\):\s+([0-9.]+) \(min ([0-9.]+), max ([0-9.]+)\)`)
	statsRc  = regexp.MustCompile(`([A-Z]+) (\d+) \(`)
)

// ParseStats reads the statistics of dnsperf's output (without -v or
// with). It fails when the output has none: dnsperf did not finish a run.
func ParseStats(out string) (Stats, error) {
	st := Stats{Rcodes: map[string]int{}}
	seen := map[string]bool{}
	for line := range strings.Lines(out) {
		if m := statsInt.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[2])
			switch m[1] {
			case "sent":
				st.Sent = n
			case "completed":
				st.Completed = n
			case "lost":
				st.Lost = n
			}
			seen[m[1]] = true
			continue
		}
		if m := statsNum.FindStringSubmatch(line); m != nil {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				return st, fmt.Errorf("dnsperf: %q: %w", strings.TrimSpace(line), err)
			}
			switch m[1] {
			case "Run time (s)":
				st.RunTime = seconds(v)
			case "Queries per second":
				st.QPS = v
				seen["qps"] = true
			case "Latency StdDev (s)":
				st.StdDevLatency = seconds(v)
			}
			continue
		}
		if m := statsAvg.FindStringSubmatch(line); m != nil {
			for i, d := range []*time.Duration{&st.AvgLatency, &st.MinLatency, &st.MaxLatency} {
				v, _ := strconv.ParseFloat(m[i+1], 64)
				*d = seconds(v)
			}
			continue
		}
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "Response codes:"); ok {
			for _, m := range statsRc.FindAllStringSubmatch(rest, -1) {
				st.Rcodes[m[1]], _ = strconv.Atoi(m[2])
			}
		}
	}
	for _, k := range []string{"sent", "completed", "lost", "qps"} {
		if !seen[k] {
			return st, fmt.Errorf("dnsperf: no statistics in its output (no %q line); it did not finish a run:\n%s", k, tail(out, 10))
		}
	}
	return st, nil
}

func seconds(v float64) time.Duration { return time.Duration(math.Round(v * float64(time.Second))) }

// Latencies are the per-query results of `dnsperf -v`.
type Latencies struct {
	// Each is one answered query's latency, in the order they came.
	Each []time.Duration
	// Lost counts the queries that timed out ("> T").
	Lost int
	// Rcodes counts the answers by response code.
	Rcodes map[string]int
}

// ParseVerbose reads the "> RCODE name type latency" and "> T name type"
// lines of `dnsperf -v`; other lines are skipped.
func ParseVerbose(r io.Reader) (Latencies, error) {
	l := Latencies{Rcodes: map[string]int{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "> ")
		if !ok {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "T" {
			l.Lost++
			continue
		}
		if len(f) < 4 {
			return l, fmt.Errorf("dnsperf -v: unexpected line %q", sc.Text())
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return l, fmt.Errorf("dnsperf -v: %q: latency %w", sc.Text(), err)
		}
		l.Each = append(l.Each, seconds(v))
		l.Rcodes[f[0]]++
	}
	return l, sc.Err()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
