package perf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sampleResults is a run of two systems, three reps each, one of which
// failed, as RunThroughput would record it.
func sampleResults() *Results {
	r := &Results{
		Benchmark: "throughput",
		Command:   "snorkel benchmark throughput --reps 3",
		Started:   time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
		Finished:  time.Date(2026, 11, 22, 10, 2, 0, 0, time.UTC),
		Machine:   Machine{CPUs: 2, CPUModel: "AMD EPYC", Kernel: "6.18"},
		Settings:  Settings{Reps: 3, DurationSec: 10},
		Metrics:   []Metric{MetricThroughput, MetricRetransmits, MetricTunnelCPU},
		Systems: []SystemInfo{
			{Name: "snorkel-wireguard", Kind: KindSnorkel, Transport: "wireguard"},
			{Name: "wireguard-go", Kind: KindBaseline, Transport: "wireguard"},
		},
	}
	add := func(sys string, rep int, gbps, cpu float64) {
		r.Runs = append(r.Runs, Measurement{System: sys, Rep: rep, Order: len(r.Runs) + 1, Values: map[string]float64{
			MetricThroughput.Name: gbps * 1e9, MetricRetransmits.Name: 2, MetricTunnelCPU.Name: cpu,
		}, Processes: []ProcessCPU{{Name: "gw-c1", PID: 10, Percent: cpu / 2}, {Name: "gw-c2", PID: 11, Percent: cpu / 2}}})
	}
	add("snorkel-wireguard", 1, 1.9, 150)
	add("wireguard-go", 1, 2.0, 140)
	add("wireguard-go", 2, 2.1, 141)
	add("snorkel-wireguard", 2, 1.7, 152)
	add("snorkel-wireguard", 3, 1.8, 151)
	r.Runs = append(r.Runs, Measurement{System: "wireguard-go", Rep: 3, Order: 6, Error: "iperf3 failed: connection reset"})
	r.summarize()
	r.compare(MetricThroughput.Name, "snorkel-wireguard", "wireguard-go", WireGuardTarget)
	return r
}

func TestSummariesSkipFailedRepsAndCountThem(t *testing.T) {
	r := sampleResults()
	s, ok := r.Summary("snorkel-wireguard", MetricThroughput.Name)
	if !ok || s.N != 3 || s.Median != 1.8e9 || s.Min != 1.7e9 || s.Max != 1.9e9 || s.Failed != 0 {
		t.Errorf("snorkel summary %+v", s)
	}
	w, ok := r.Summary("wireguard-go", MetricThroughput.Name)
	if !ok || w.N != 2 || w.Median != 2.05e9 || w.Failed != 1 {
		t.Errorf("wireguard-go summary %+v, want 2 values, median 2.05e9, 1 failed", w)
	}
	if len(r.Comparisons) != 1 {
		t.Fatalf("comparisons %+v", r.Comparisons)
	}
	c := r.Comparisons[0]
	if want := 1.8 / 2.05; c.Ratio < want-1e-9 || c.Ratio > want+1e-9 || c.Met() {
		t.Errorf("comparison %+v, want ratio %v, target not met", c, want)
	}
}

func TestResultsJSONRoundTrips(t *testing.T) {
	dir := t.TempDir()
	r := sampleResults()
	path, err := r.WriteJSON(dir)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadResults(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Runs) != len(r.Runs) || len(back.Summaries) != len(r.Summaries) || back.Comparisons[0] != r.Comparisons[0] {
		t.Errorf("read back %+v", back)
	}
	if back.Runs[5].Error == "" || back.Runs[0].Values[MetricThroughput.Name] != 1.9e9 {
		t.Errorf("measurements changed on the way: %+v", back.Runs)
	}
	if s, _ := back.Summary("wireguard-go", MetricThroughput.Name); s.Failed != 1 || s.N != 2 {
		t.Errorf("summary changed on the way: %+v", s)
	}
}

func TestReportsShowTableRatioCommandAndMachine(t *testing.T) {
	r := sampleResults()
	var term strings.Builder
	if err := r.WriteTable(&term); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := r.WriteMarkdown(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"snorkel-wireguard", "1.80", "1.70", "1.90", "2.05", "151%", "0.88×", "NOT met", "2 (1 failed)"} {
		if !strings.Contains(term.String(), want) {
			t.Errorf("terminal table lacks %q:\n%s", want, term.String())
		}
	}
	for _, want := range []string{"| snorkel-wireguard | 1.80 | 1.70 | 1.90 |", "snorkel benchmark throughput --reps 3", "AMD EPYC", "kernel 6.18",
		"2026-11-22T10:00:00Z", "failed: iperf3 failed: connection reset", "gw-c1 75%"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
}

func TestThroughputOptionsNameEveryBadFlag(t *testing.T) {
	o := ThroughputOptions{Transports: []string{"ipsec"}, Baselines: []string{"strongswan"}, Reps: -1, Duration: 1500 * time.Millisecond, Prefix: "much-too-long-"}
	o.applyDefaults()
	err := o.validate()
	if err == nil {
		t.Fatal("validate accepted bad options")
	}
	for _, want := range []string{`transport "ipsec"`, `baseline "strongswan"`, "reps -1", "duration 1.5s", "out:", "prefix"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	good := ThroughputOptions{Transports: []string{"wireguard", "vxlan"}, Baselines: []string{BaselineWireGuardGo}, OutDir: "x"}
	good.applyDefaults()
	if err := good.validate(); err != nil {
		t.Errorf("validate refused good options: %v", err)
	}
	var names []string
	for _, s := range good.setups() {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "snorkel-wireguard,snorkel-vxlan,wireguard-go" {
		t.Errorf("setups %s", got)
	}
}
