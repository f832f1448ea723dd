package perf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Metric describes a quantity a measurement reports. Metrics are named, not
// fields, so that a workload adds metrics without changing the result
// types or the code that summarises them.
type Metric struct {
	Name        string `json:"name"`
	Unit        string `json:"unit"`
	Description string `json:"description"`
	// HigherIsBetter orders systems in comparisons.
	HigherIsBetter bool `json:"higherIsBetter"`
}

// The metrics of the workloads.
var (
	MetricThroughput = Metric{"throughput", "bit/s",
		"TCP payload received per second by the receiving iperf3 (end.sum_received.bits_per_second), all flows together", true}
	MetricRetransmits = Metric{"retransmits", "segments",
		"TCP retransmissions of the sender (iperf3 end.sum_sent.retransmits)", false}
	MetricSenderCPU = Metric{"sender_cpu", "% of one core",
		"CPU of the sending iperf3 (iperf3 cpu_utilization_percent)", false}
	MetricReceiverCPU = Metric{"receiver_cpu", "% of one core",
		"CPU of the receiving iperf3 (iperf3 cpu_utilization_percent)", false}
	MetricUDPRate = Metric{"udp_rate", "packets/s",
		"highest rate of datagrams offered with at most the tolerated loss (RFC 2544 search); 0 when every rate tried lost more", true}
	MetricUDPAtBound = Metric{"udp_at_bound", "1 if so",
		"set when the rate found is the top of the search (the most the source could offer, or --udp-rate) with nothing lost beyond the tolerated: the system may forward more", false}
	MetricUDPTrials = Metric{"udp_trials", "trials",
		"trials the UDP rate search ran, the unpaced probe included", false}
	MetricUDPProbeRx = Metric{"udp_probe_rx", "packets/s",
		"datagrams received per second while the source sent unpaced (the search's probe): the tunnel's rate while sharing the CPUs with an unpaced source", true}
	MetricLoss = Metric{"loss", "%",
		"share of the datagrams or echo requests sent that were not answered or counted; for UDP, at the rate found", false}
	MetricTransactions = Metric{"transactions", "1/s",
		"request/response transactions completed per second, one in flight", true}
	MetricP50       = Metric{"p50", "µs", "median round trip", false}
	MetricP99       = Metric{"p99", "µs", "99th percentile round trip", false}
	MetricP999      = Metric{"p999", "µs", "99.9th percentile round trip", false}
	MetricRTTMean   = Metric{"mean", "µs", "mean round trip", false}
	MetricTunnelCPU = Metric{"tunnel_cpu", "% of one core",
		"CPU (user+system) of the tunnel processes of both gateway nodes over the measurement, from /proc/PID/stat", false}
	MetricCPUPerGbit = Metric{"cpu_per_gbit", "CPU s/Gbit",
		"CPU seconds the tunnel processes of both gateway nodes spent per gigabit of TCP payload delivered", false}
	MetricPeakRSS = Metric{"peak_rss", "bytes",
		"largest peak resident set (VmHWM, /proc/PID/status) of the tunnel processes, since they started", false}
	MetricHostBusy = Metric{"host_busy", "% of all cores",
		"CPU busy on the whole host during the measurement, from /proc/stat", false}
	MetricHostSteal = Metric{"host_steal", "% of all cores",
		"CPU time the hypervisor gave to others while this virtual machine wanted it, during the measurement (steal, /proc/stat); counted in host_busy", false}
)

// The metrics of `perf stat` (Options.PerfStat), per byte of TCP payload
// delivered; of the tunnel processes, or of the whole host where the
// kernel carries the traffic (Measurement.PerfStat.Scope says which).
var (
	MetricPerfCPUPerGbit = Metric{"perf_cpu_per_gbit", "CPU s/Gbit",
		"CPU seconds counted by perf stat's task-clock per gigabit of TCP payload delivered", false}
	MetricCtxSwitchesPerGB = Metric{"ctx_switches_per_gb", "1/GB",
		"context switches (perf stat) per gigabyte of TCP payload delivered", false}
	MetricMigrationsPerGB = Metric{"cpu_migrations_per_gb", "1/GB",
		"moves of a thread from one CPU to another (perf stat) per gigabyte of TCP payload delivered", false}
	MetricPageFaultsPerGB = Metric{"page_faults_per_gb", "1/GB",
		"page faults (perf stat) per gigabyte of TCP payload delivered", false}
	MetricInstructionsPerByte = Metric{"instructions_per_byte", "1/B",
		"instructions retired (perf stat, needs a hardware PMU) per byte of TCP payload delivered", false}
	MetricCyclesPerByte = Metric{"cycles_per_byte", "1/B",
		"CPU cycles (perf stat, needs a hardware PMU) per byte of TCP payload delivered", false}
)

// costMetrics are recorded by the harness around every workload, the
// perf stat ones where it runs.
var costMetrics = []Metric{MetricTunnelCPU, MetricCPUPerGbit, MetricPeakRSS, MetricHostBusy, MetricHostSteal,
	MetricPerfCPUPerGbit, MetricCtxSwitchesPerGB, MetricMigrationsPerGB, MetricPageFaultsPerGB, MetricInstructionsPerByte, MetricCyclesPerByte}

// Results is everything one benchmark run measured; results.json is its
// JSON form.
type Results struct {
	// Benchmark is what ran: "throughput", "latency" or "all".
	Benchmark string    `json:"benchmark"`
	Command   string    `json:"command"`
	Started   time.Time `json:"started"`
	Finished  time.Time `json:"finished"`
	// Interrupted is set when the run stopped early; the measurements are
	// those taken until then.
	Interrupted bool          `json:"interrupted,omitempty"`
	Machine     Machine       `json:"machine"`
	Settings    Settings      `json:"settings"`
	Workloads   []Workload    `json:"workloads"`
	Systems     []SystemInfo  `json:"systems"`
	Runs        []Measurement `json:"measurements"`
	Summaries   []Summary     `json:"summaries"`
	Comparisons []Comparison  `json:"comparisons"`
	// Plots are the SVG files of the run, relative to the output
	// directory.
	Plots []string `json:"plots,omitempty"`
}

// Settings are the knobs of a run that shape its numbers.
type Settings struct {
	Reps        int     `json:"reps"`
	DurationSec float64 `json:"durationSeconds"`
	// IdleWaitSec bounds the wait before each measurement for the host's
	// CPU to drop to IdleBusyMax percent.
	IdleWaitSec float64 `json:"idleWaitSeconds"`
	IdleBusyMax float64 `json:"idleBusyMaxPercent"`
	// UDPRate is the highest rate, in datagrams per second, the UDP
	// search tries; 0 takes it from an unpaced probe.
	UDPRate float64 `json:"udpRate,omitempty"`
	// UDPTrialSec is the length of each trial of the UDP search,
	// UDPMaxLoss the loss in percent a trial may have and pass, and
	// UDPMaxTrials the most trials of one search.
	UDPTrialSec  float64 `json:"udpTrialSeconds,omitempty"`
	UDPMaxLoss   float64 `json:"udpMaxLossPercent,omitempty"`
	UDPMaxTrials int     `json:"udpMaxTrials,omitempty"`
	// PerfStat is set when perf stat counted during every single-flow TCP
	// measurement.
	PerfStat bool `json:"perfStat,omitempty"`
	// Topology says where the traffic runs.
	Topology string `json:"topology"`
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
	// KernelDataPath is set when the kernel carries the traffic, so that
	// no process's CPU can be attributed to it.
	KernelDataPath bool `json:"kernelDataPath,omitempty"`
	// TunnelMTU is the MTU of the tunnel's inner packets, 0 without one.
	TunnelMTU int `json:"tunnelMTU,omitempty"`
	// Version is the first line the tunnel binary prints for its version.
	Version string `json:"version,omitempty"`
	Prefix  string `json:"namespacePrefix,omitempty"`
	Client  string `json:"client,omitempty"`
	Server  string `json:"server,omitempty"`
	// Unavailable says why the system could not run on this machine;
	// such a system has no measurements.
	Unavailable string `json:"unavailable,omitempty"`
}

// Kinds of system.
const (
	KindSnorkel  = "snorkel"
	KindBaseline = "baseline"
)

// Measurement is one repetition of a workload on one system.
type Measurement struct {
	System   string `json:"system"`
	Workload string `json:"workload"`
	Rep      int    `json:"rep"`
	// Order is the measurement's position in the run, from 1.
	Order int       `json:"order"`
	Start time.Time `json:"start"`
	// Seconds is the wall-clock time the traffic ran.
	Seconds float64 `json:"seconds"`
	// Values maps metric names to values in the metric's unit.
	Values map[string]float64 `json:"values"`
	// Processes is the CPU and memory of each tunnel process.
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
	// PerfStat is what perf stat counted during the measurement.
	PerfStat *PerfStat `json:"perfStat,omitempty"`
	// Error says why the measurement failed; a failed measurement has no
	// values and is left out of the summaries.
	Error string `json:"error,omitempty"`
}

// ProcessCPU is one tunnel process's CPU use over a measurement and its
// peak memory until its end.
type ProcessCPU struct {
	Name    string  `json:"name"`
	PID     int     `json:"pid"`
	Percent float64 `json:"percentOfOneCore"`
	PeakRSS uint64  `json:"peakRSSBytes,omitempty"`
}

// Summary is the statistics of one metric of one workload on one system
// over its successful repetitions.
type Summary struct {
	System   string `json:"system"`
	Workload string `json:"workload"`
	Metric   string `json:"metric"`
	Stat
	// Failed counts repetitions that produced no value.
	Failed int `json:"failed,omitempty"`
}

// Comparison is the ratio of a system's median to a baseline's median for
// one metric of one workload.
type Comparison struct {
	Workload string  `json:"workload"`
	Metric   string  `json:"metric"`
	System   string  `json:"system"`
	Baseline string  `json:"baseline"`
	Ratio    float64 `json:"ratio"`
	// Target is the ratio the project aims for, when it has one.
	Target float64 `json:"target,omitempty"`
	// RoundMin and RoundMax are the lowest and highest ratio of the
	// system's repetition to the baseline's repetition of the same round,
	// over the rounds that measured both: how far one round's ratio
	// strays from the run's. Zero when fewer than two rounds did.
	RoundMin float64 `json:"roundMin,omitempty"`
	RoundMax float64 `json:"roundMax,omitempty"`
}

// Met reports whether the comparison reaches its target.
func (c Comparison) Met() bool {
	return c.Target > 0 && c.Ratio >= c.Target
}

// Shortfall is how far below its target the comparison is, as a fraction
// of the target; 0 when it is met or has none.
func (c Comparison) Shortfall() float64 {
	if c.Target <= 0 || c.Ratio >= c.Target {
		return 0
	}
	return 1 - c.Ratio/c.Target
}

// Workload returns the workload of that name.
func (r *Results) Workload(name string) (Workload, bool) {
	for _, w := range r.Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return Workload{}, false
}

// System returns the system of that name.
func (r *Results) System(name string) (SystemInfo, bool) {
	for _, s := range r.Systems {
		if s.Name == name {
			return s, true
		}
	}
	return SystemInfo{}, false
}

// summarize fills r.Summaries from r.Runs: per system, workload and
// metric, in r.Systems, r.Workloads and the workload's metric order, the
// cost metrics last.
func (r *Results) summarize() {
	r.Summaries = r.Summaries[:0]
	for _, s := range r.Systems {
		for _, w := range r.Workloads {
			for _, m := range append(w.Metrics, costMetrics...) {
				var vs []float64
				failed, any := 0, false
				for _, run := range r.Runs {
					if run.System != s.Name || run.Workload != w.Name {
						continue
					}
					any = true
					v, ok := run.Values[m.Name]
					if !ok {
						if run.Error != "" {
							failed++
						}
						continue
					}
					vs = append(vs, v)
				}
				if !any || len(vs) == 0 && failed == 0 {
					continue
				}
				r.Summaries = append(r.Summaries, Summary{System: s.Name, Workload: w.Name, Metric: m.Name, Stat: Summarize(vs), Failed: failed})
			}
		}
	}
}

// Summary returns the summary of a system's metric in a workload.
func (r *Results) Summary(system, workload, metric string) (Summary, bool) {
	for _, s := range r.Summaries {
		if s.System == system && s.Workload == workload && s.Metric == metric {
			return s, true
		}
	}
	return Summary{}, false
}

// compare adds a comparison of system to baseline on a workload's metric,
// if both have a median.
func (r *Results) compare(workload, metric, system, baseline string, target float64) {
	a, ok1 := r.Summary(system, workload, metric)
	b, ok2 := r.Summary(baseline, workload, metric)
	if !ok1 || !ok2 || a.N == 0 || b.N == 0 || b.Median == 0 {
		return
	}
	c := Comparison{Workload: workload, Metric: metric, System: system, Baseline: baseline, Ratio: a.Median / b.Median, Target: target}
	if rs := r.roundRatios(workload, metric, system, baseline); len(rs) > 1 {
		c.RoundMin, c.RoundMax = slices.Min(rs), slices.Max(rs)
	}
	r.Comparisons = append(r.Comparisons, c)
}

// roundRatios returns, per repetition that both system and baseline
// completed, the ratio of the system's value of a workload's metric to the
// baseline's: the two were measured in the same round (Schedule), minutes
// apart at most.
func (r *Results) roundRatios(workload, metric, system, baseline string) []float64 {
	base := map[int]float64{}
	for _, m := range r.Runs {
		if v, ok := m.Values[metric]; ok && m.System == baseline && m.Workload == workload && v != 0 {
			base[m.Rep] = v
		}
	}
	var out []float64
	for _, m := range r.Runs {
		if m.System != system || m.Workload != workload {
			continue
		}
		v, ok := m.Values[metric]
		if b, ok2 := base[m.Rep]; ok && ok2 {
			out = append(out, v/b)
		}
	}
	return out
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
