package perf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Metric describes a quantity a measurement reports. Metrics are named, not
// fields, so that a new workload (latency, UDP packet rate) adds metrics
// without changing the result types or the code that summarises them.
type Metric struct {
	Name        string `json:"name"`
	Unit        string `json:"unit"`
	Description string `json:"description"`
	// HigherIsBetter orders systems in comparisons.
	HigherIsBetter bool `json:"higherIsBetter"`
}

// The metrics of the TCP throughput workload.
var (
	MetricThroughput = Metric{"throughput", "bit/s",
		"TCP payload received per second by the iperf3 server (iperf3 end.sum_received.bits_per_second)", true}
	MetricRetransmits = Metric{"retransmits", "segments",
		"TCP retransmissions of the sender (iperf3 end.sum_sent.retransmits)", false}
	MetricTunnelCPU = Metric{"tunnel_cpu", "% of one core",
		"CPU (user+system) of the tunnel processes on both gateway nodes, from /proc/PID/stat", false}
	MetricSenderCPU = Metric{"sender_cpu", "% of one core",
		"CPU of the iperf3 client (iperf3 cpu_utilization_percent.host_total)", false}
	MetricReceiverCPU = Metric{"receiver_cpu", "% of one core",
		"CPU of the iperf3 server (iperf3 cpu_utilization_percent.remote_total)", false}
	MetricHostBusy = Metric{"host_busy", "% of all cores",
		"CPU busy on the whole host during the measurement, from /proc/stat", false}
)

// Results is everything one benchmark run measured; results.json is its
// JSON form.
type Results struct {
	Benchmark string    `json:"benchmark"`
	Command   string    `json:"command"`
	Started   time.Time `json:"started"`
	Finished  time.Time `json:"finished"`
	// Interrupted is set when the run stopped early; the measurements are
	// those taken until then.
	Interrupted bool          `json:"interrupted,omitempty"`
	Machine     Machine       `json:"machine"`
	Settings    Settings      `json:"settings"`
	Metrics     []Metric      `json:"metrics"`
	Systems     []SystemInfo  `json:"systems"`
	Runs        []Measurement `json:"measurements"`
	Summaries   []Summary     `json:"summaries"`
	Comparisons []Comparison  `json:"comparisons"`
}

// Settings are the knobs of a run that shape its numbers.
type Settings struct {
	Workload    string  `json:"workload"`
	Reps        int     `json:"reps"`
	DurationSec float64 `json:"durationSeconds"`
	// IdleWaitSec bounds the wait before each repetition for the host's
	// CPU to drop to IdleBusyMax percent.
	IdleWaitSec float64 `json:"idleWaitSeconds"`
	IdleBusyMax float64 `json:"idleBusyMaxPercent"`
	// TunnelMTU is the inner MTU every tunnel runs with.
	TunnelMTU int `json:"tunnelMTU"`
}

// SystemInfo describes a system under test.
type SystemInfo struct {
	// Name identifies the system in tables and comparisons
	// ("snorkel-wireguard", "wireguard-go").
	Name string `json:"name"`
	// Kind is KindSnorkel or KindBaseline.
	Kind      string `json:"kind"`
	Transport string `json:"transport,omitempty"`
	// Globalnet is set for a Snorkel system whose gateways translate
	// every packet between clusters with the same CIDRs.
	Globalnet   bool   `json:"globalnet,omitempty"`
	Description string `json:"description"`
	// Version is the first line the tunnel binary prints for --version.
	Version string `json:"version,omitempty"`
	Prefix  string `json:"namespacePrefix"`
	Client  string `json:"client"`
	Server  string `json:"server"`
}

// Kinds of system.
const (
	KindSnorkel  = "snorkel"
	KindBaseline = "baseline"
)

// Measurement is one repetition of a workload on one system.
type Measurement struct {
	System string `json:"system"`
	Rep    int    `json:"rep"`
	// Order is the measurement's position in the run, from 1.
	Order int       `json:"order"`
	Start time.Time `json:"start"`
	// Seconds is the wall-clock time the traffic ran.
	Seconds float64 `json:"seconds"`
	// Values maps metric names to values in the metric's unit.
	Values map[string]float64 `json:"values"`
	// Processes is the CPU of each tunnel process over the measurement.
	Processes []ProcessCPU `json:"tunnelProcesses,omitempty"`
	// IdleBefore is the host's busy percentage just before the
	// measurement, and IdleWaitSec how long it waited for it.
	IdleBefore  float64 `json:"hostBusyBeforePercent"`
	IdleWaitSec float64 `json:"idleWaitSeconds"`
	// IdleGaveUp is set when the host was still busy at the end of the
	// wait.
	IdleGaveUp bool    `json:"idleGaveUp,omitempty"`
	LoadAvg1   float64 `json:"loadavg1"`
	// Raw is the tool's own output, relative to the output directory.
	Raw string `json:"raw,omitempty"`
	// Profiles are CPU profiles taken during the measurement, relative to
	// the output directory.
	Profiles     []string `json:"profiles,omitempty"`
	ProfileError string   `json:"profileError,omitempty"`
	// Error says why the measurement failed; a failed measurement has no
	// values and is left out of the summaries.
	Error string `json:"error,omitempty"`
}

// ProcessCPU is one process's CPU use over a measurement.
type ProcessCPU struct {
	Name    string  `json:"name"`
	PID     int     `json:"pid"`
	Percent float64 `json:"percentOfOneCore"`
}

// Summary is the statistics of one metric of one system over its
// successful repetitions.
type Summary struct {
	System string `json:"system"`
	Metric string `json:"metric"`
	Stat
	// Failed counts repetitions that produced no value.
	Failed int `json:"failed,omitempty"`
}

// Comparison is the ratio of a system's median to a baseline's median for
// one metric.
type Comparison struct {
	Metric   string  `json:"metric"`
	System   string  `json:"system"`
	Baseline string  `json:"baseline"`
	Ratio    float64 `json:"ratio"`
	// Target is the ratio the project aims for, when it has one.
	Target float64 `json:"target,omitempty"`
}

// Met reports whether the comparison reaches its target.
func (c Comparison) Met() bool {
	return c.Target > 0 && c.Ratio >= c.Target
}

// summarize fills r.Summaries from r.Runs: one summary per system and
// metric, systems in r.Systems order, metrics in r.Metrics order.
func (r *Results) summarize() {
	r.Summaries = r.Summaries[:0]
	for _, s := range r.Systems {
		for _, m := range r.Metrics {
			var vs []float64
			failed := 0
			for _, run := range r.Runs {
				if run.System != s.Name {
					continue
				}
				v, ok := run.Values[m.Name]
				if !ok {
					failed++
					continue
				}
				vs = append(vs, v)
			}
			if len(vs) == 0 && failed == 0 {
				continue
			}
			r.Summaries = append(r.Summaries, Summary{System: s.Name, Metric: m.Name, Stat: Summarize(vs), Failed: failed})
		}
	}
}

// Summary returns the summary of a system's metric.
func (r *Results) Summary(system, metric string) (Summary, bool) {
	for _, s := range r.Summaries {
		if s.System == system && s.Metric == metric {
			return s, true
		}
	}
	return Summary{}, false
}

// compare adds a comparison of system to baseline on metric, if both have
// a median.
func (r *Results) compare(metric, system, baseline string, target float64) {
	a, ok1 := r.Summary(system, metric)
	b, ok2 := r.Summary(baseline, metric)
	if !ok1 || !ok2 || a.N == 0 || b.N == 0 || b.Median == 0 {
		return
	}
	r.Comparisons = append(r.Comparisons, Comparison{Metric: metric, System: system, Baseline: baseline, Ratio: a.Median / b.Median, Target: target})
}

// WriteJSON writes the results to dir/results.json.
func (r *Results) WriteJSON(dir string) (string, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("perf: encode results: %w", err)
	}
	path := filepath.Join(dir, "results.json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("perf: write results: %w", err)
	}
	return path, nil
}

// ReadResults reads a results.json, so that reports and plots can be made
// again from a finished run.
func ReadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("perf: read results: %w", err)
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("perf: %s: %w", path, err)
	}
	return &r, nil
}
