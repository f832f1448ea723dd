package perf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/perf/udpsearch"
)

// Benchmarks, each a set of workloads.
const (
	BenchmarkThroughput = "throughput"
	BenchmarkLatency    = "latency"
	BenchmarkAll        = "all"
)

// Benchmarks lists the benchmarks Options.Benchmark takes.
var Benchmarks = []string{BenchmarkThroughput, BenchmarkLatency, BenchmarkAll}

// Ports the traffic servers listen on in the server pod.
const (
	iperfPort = 5201
	rrPort    = 5202
	udpPort   = 5203
)

// A Workload is one kind of traffic, measured once per repetition on every
// system.
type Workload struct {
	Name string `json:"name"`
	// Benchmark is the benchmark the workload belongs to.
	Benchmark string `json:"benchmark"`
	// Title is the workload's column heading.
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Metrics     []Metric `json:"metrics"`
	// Primary is the metric comparisons between systems use.
	Primary string `json:"primary"`

	// run measures the workload once on a path and returns the
	// metrics and the tool's own output.
	run func(ctx context.Context, e runEnv) (map[string]float64, []byte, error)
	// rawExt is the extension of the tool's saved output.
	rawExt string
}

// runEnv is what a workload's run gets.
type runEnv struct {
	path     Path
	duration time.Duration
	// binary is the snorkel binary, whose perf-pod command runs the
	// RR and UDP clients.
	binary  string
	udpRate float64
}

// Names of the workloads.
const (
	WorkloadTCP1       = "tcp-1"
	WorkloadTCP1Rev    = "tcp-1-rev"
	WorkloadTCP10      = "tcp-10"
	WorkloadTCP10Rev   = "tcp-10-rev"
	WorkloadUDP        = "udp-64"
	WorkloadRR         = "tcp-rr"
	WorkloadPing       = "ping"
	tcpParallelFlows   = 10
	tcpParallelWindow  = "256K"
	rrTransactionBytes = 1
)

// AllWorkloads lists every workload in the order each system runs them.
var AllWorkloads = []Workload{
	tcpWorkload(WorkloadTCP1, 1, false),
	tcpWorkload(WorkloadTCP1Rev, 1, true),
	tcpWorkload(WorkloadTCP10, tcpParallelFlows, false),
	tcpWorkload(WorkloadTCP10Rev, tcpParallelFlows, true),
	{
		Name:      WorkloadUDP,
		Benchmark: BenchmarkThroughput,
		Title:     "UDP 64 B, c1→c2",
		Description: fmt.Sprintf("the highest rate of UDP datagrams of %d bytes of payload from the client pod to the server pod with at most %g%% lost, after RFC 2544: "+
			"an unpaced probe bounds the rate (unless --udp-rate does), then trials of the run's duration/%d (%s to %s) at rates paced in batches of sendmmsg against the monotonic clock, "+
			"doubling from the probe's received rate while they pass, then bisecting; at most %d trials with the probe; each trial waits for the datagrams still in the tunnel before counting; "+
			"a trial passes when it lost at most %g%% and its source offered at least %.0f%% of the rate asked for; the figure is the highest rate a source really offered in a trial within the loss; "+
			"the sink receives in batches with recvmmsg (`snorkel perf-pod udp-search`/`udp-sink`)", udpsearch.Payload, udpsearch.MaxLoss, udpsearch.MaxTrials, udpsearch.TrialMin, udpsearch.TrialMax, udpsearch.MaxTrials, udpsearch.MaxLoss, 100*udpsearch.OfferedShare),
		Metrics: []Metric{MetricUDPRate, MetricLoss, MetricUDPAtBound, MetricUDPTrials, MetricUDPProbeRx},
		Primary: MetricUDPRate.Name,
		run:     runUDPWorkload,
		rawExt:  "json",
	},
	{
		Name:      WorkloadRR,
		Benchmark: BenchmarkLatency,
		Title:     "TCP request/response",
		Description: fmt.Sprintf("TCP_RR-style: one connection from the client pod, one %d-byte request answered by a %d-byte response at a time, back to back for the repetition's time; "+
			"latency percentiles over every transaction (`snorkel perf-pod rr-client`/`rr-server`)", rrTransactionBytes, rrTransactionBytes),
		Metrics: []Metric{MetricTransactions, MetricP50, MetricP99, MetricP999, MetricRTTMean},
		Primary: MetricP50.Name,
		run:     runRRWorkload,
		rawExt:  "json",
	},
	{
		Name:        WorkloadPing,
		Benchmark:   BenchmarkLatency,
		Title:       "ping",
		Description: fmt.Sprintf("ICMP echo from the client pod every %s for the repetition's time (iputils ping); RTT percentiles over the replies", pingInterval),
		Metrics:     []Metric{MetricP50, MetricP99, MetricRTTMean, MetricLoss},
		Primary:     MetricP50.Name,
		run:         runPingWorkload,
		rawExt:      "txt",
	},
}

// WorkloadsOf returns the workloads of a benchmark, in run order.
func WorkloadsOf(benchmark string) []Workload {
	var out []Workload
	for _, w := range AllWorkloads {
		if benchmark == BenchmarkAll || w.Benchmark == benchmark {
			out = append(out, w)
		}
	}
	return out
}

// tcpWorkload is iperf3 TCP with the given number of parallel flows, from
// the client pod to the server pod or, reversed, the other way.
func tcpWorkload(name string, flows int, reverse bool) Workload {
	dir, desc := "c1→c2", "from the client pod to the server pod"
	if reverse {
		dir, desc = "c2→c1", "from the server pod to the client pod (iperf3 -R)"
	}
	title := fmt.Sprintf("TCP %d flow, %s", flows, dir)
	d := fmt.Sprintf("iperf3 TCP, one flow %s", desc)
	if flows > 1 {
		title = fmt.Sprintf("TCP %d flows, %s", flows, dir)
		d = fmt.Sprintf("iperf3 TCP, %d parallel flows with a %s socket buffer (-P %d -w %s, as `subctl benchmark throughput` runs it) %s", flows, tcpParallelWindow, flows, tcpParallelWindow, desc)
	}
	return Workload{
		Name:        name,
		Benchmark:   BenchmarkThroughput,
		Title:       title,
		Description: d,
		Metrics:     []Metric{MetricThroughput, MetricRetransmits, MetricSenderCPU, MetricReceiverCPU},
		Primary:     MetricThroughput.Name,
		rawExt:      "json",
		run: func(ctx context.Context, e runEnv) (map[string]float64, []byte, error) {
			args := []string{"-P", strconv.Itoa(flows)}
			if flows > 1 {
				args = append(args, "-w", tcpParallelWindow)
			}
			if reverse {
				args = append(args, "-R")
			}
			out, runErr := runIperfTCP(ctx, e.path.Client, e.path.ServerAddr, e.duration, args...)
			r, err := ParseIperfTCP(out)
			if err != nil {
				// iperf3's own message, from its JSON, says more than its
				// exit status.
				return nil, out, errors.Join(err, runErr)
			}
			if r.Streams != flows || r.Reverse != reverse {
				return nil, out, fmt.Errorf("perf: iperf3 ran %d flows, reverse %v; asked for %d, reverse %v", r.Streams, r.Reverse, flows, reverse)
			}
			return r.Values(), out, nil
		},
	}
}

func runUDPWorkload(ctx context.Context, e runEnv) (map[string]float64, []byte, error) {
	trial := udpsearch.TrialTime(e.duration)
	args := []string{"perf-pod", "udp-search", "--server", netip.AddrPortFrom(e.path.ServerAddr, udpPort).String(),
		"--trial", trial.String(), "--payload", strconv.Itoa(udpsearch.Payload),
		"--bound", strconv.FormatFloat(e.udpRate, 'f', -1, 64)}
	// Every trial sends, drains and talks to the sink; runClient adds
	// its own margin for starting the client.
	out, err := runClientFor(ctx, e, udpsearch.MaxTrials*(trial+udpsearch.DrainMax+time.Second), args...)
	if err != nil {
		return nil, out, err
	}
	r, err := udpsearch.Parse(out)
	if err != nil {
		return nil, out, err
	}
	return udpValues(r), out, nil
}

// udpValues returns the UDP workload's metrics: the rate found and the
// loss at it (a rate of 0 when no trial passed), whether it is the
// search's bound, the trials it took, and the received rate of the
// unpaced probe when there was one.
func udpValues(r udpsearch.Report) map[string]float64 {
	v := map[string]float64{
		MetricUDPRate.Name:   r.Rate,
		MetricUDPTrials.Name: float64(len(r.Trials)),
	}
	if r.Found {
		v[MetricLoss.Name] = r.Loss
	}
	if r.AtBound {
		v[MetricUDPAtBound.Name] = 1
	}
	if r.BoundFrom == udpsearch.BoundProbe && len(r.Trials) > 0 {
		v[MetricUDPProbeRx.Name] = r.Trials[0].ReceivedRate()
	}
	return v
}

func runRRWorkload(ctx context.Context, e runEnv) (map[string]float64, []byte, error) {
	out, err := runClient(ctx, e, "perf-pod", "rr-client", "--server", netip.AddrPortFrom(e.path.ServerAddr, rrPort).String(),
		"--duration", e.duration.String(), "--size", strconv.Itoa(rrTransactionBytes))
	if err != nil {
		return nil, out, err
	}
	r, err := ParseRRReport(out)
	if err != nil {
		return nil, out, err
	}
	return r.Values(), out, nil
}

func runPingWorkload(ctx context.Context, e runEnv) (map[string]float64, []byte, error) {
	out, err := runPing(ctx, e.path.Client, e.path.ServerAddr, e.duration)
	if err != nil {
		return nil, out, err
	}
	p, err := ParsePing(out)
	if err != nil {
		return nil, out, err
	}
	if p.Received == 0 {
		return nil, out, fmt.Errorf("perf: none of %d echo requests to %s was answered", p.Sent, e.path.ServerAddr)
	}
	return p.Values(), out, nil
}

// runClient runs a `snorkel perf-pod` client in the client pod and returns
// its standard output, its report.
func runClient(ctx context.Context, e runEnv, args ...string) ([]byte, error) {
	return runClientFor(ctx, e, e.duration, args...)
}

// runClientFor is runClient for a client that runs for about d.
func runClientFor(ctx context.Context, e runEnv, d time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	cmd := e.path.Client.Command(ctx, e.binary, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("perf: snorkel %s in %s: %w: %s", strings.Join(args[:2], " "), e.path.Client, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// validBenchmark reports whether b names a benchmark.
func validBenchmark(b string) bool { return slices.Contains(Benchmarks, b) }
