package perf

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/perf/udpsearch"
)

// sampleResults is a run of four systems, three reps each of the
// single-flow TCP and RR workloads, one of which failed, and a baseline
// that could not run, as Run would record it.
func sampleResults() *Results {
	r := &Results{
		Benchmark: BenchmarkAll,
		Command:   "snorkel benchmark all --reps 3",
		Started:   time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
		Finished:  time.Date(2026, 11, 22, 10, 2, 0, 0, time.UTC),
		Machine:   Machine{CPUs: 2, CPUModel: "AMD EPYC", Kernel: "6.18"},
		Settings:  Settings{Reps: 3, DurationSec: 10},
		Workloads: []Workload{WorkloadsOf(BenchmarkThroughput)[0], WorkloadsOf(BenchmarkLatency)[0]},
		Systems: []SystemInfo{
			{Name: "snorkel-wireguard", Kind: KindSnorkel, Transport: "wireguard"},
			{Name: "wireguard-go", Kind: KindBaseline, Transport: "wireguard"},
			{Name: "veth", Kind: KindBaseline, KernelDataPath: true},
			{Name: "strongswan", Kind: KindBaseline, Unavailable: "strongSwan's charon with kernel-libipsec is not installed"},
		},
	}
	add := func(sys string, rep int, gbps, cpu, p50 float64) {
		procs := []ProcessCPU{{Name: "gw-c1", PID: 10, Percent: cpu / 2, PeakRSS: 20 << 20}, {Name: "gw-c2", PID: 11, Percent: cpu / 2, PeakRSS: 24 << 20}}
		if sys == "veth" {
			procs = nil
		}
		m := Measurement{System: sys, Workload: WorkloadTCP1, Rep: rep, Order: len(r.Runs) + 1,
			Values: map[string]float64{MetricThroughput.Name: gbps * 1e9, MetricRetransmits.Name: 2}, Processes: procs}
		m.addCost()
		r.Runs = append(r.Runs, m)
		rr := Measurement{System: sys, Workload: WorkloadRR, Rep: rep, Order: len(r.Runs) + 1,
			Values: map[string]float64{MetricP50.Name: p50, MetricP99.Name: 2 * p50, MetricP999.Name: 4 * p50, MetricTransactions.Name: 1e6 / p50}}
		r.Runs = append(r.Runs, rr)
	}
	add("snorkel-wireguard", 1, 1.9, 150, 100)
	add("wireguard-go", 1, 2.0, 140, 90)
	add("veth", 1, 12, 0, 30)
	add("wireguard-go", 2, 2.1, 141, 95)
	add("veth", 2, 11, 0, 31)
	add("snorkel-wireguard", 2, 1.7, 152, 110)
	add("snorkel-wireguard", 3, 1.8, 151, 105)
	add("veth", 3, 13, 0, 29)
	r.Runs = append(r.Runs, Measurement{System: "wireguard-go", Workload: WorkloadTCP1, Rep: 3, Order: len(r.Runs) + 1, Error: "iperf3 failed: connection reset"})
	r.summarize()
	for _, c := range comparisons(r.Systems, r.Workloads) {
		r.compare(c.Workload, c.Metric, c.System, c.Baseline, c.Target)
	}
	return r
}

func TestSummariesSkipFailedRepsAndCountThem(t *testing.T) {
	r := sampleResults()
	s, ok := r.Summary("snorkel-wireguard", WorkloadTCP1, MetricThroughput.Name)
	if !ok || s.N != 3 || s.Median != 1.8e9 || s.Min != 1.7e9 || s.Max != 1.9e9 || s.Failed != 0 {
		t.Errorf("snorkel summary %+v", s)
	}
	w, ok := r.Summary("wireguard-go", WorkloadTCP1, MetricThroughput.Name)
	if !ok || w.N != 2 || w.Median != 2.05e9 || w.Failed != 1 {
		t.Errorf("wireguard-go summary %+v, want 2 values, median 2.05e9, 1 failed", w)
	}
	if rr, ok := r.Summary("wireguard-go", WorkloadRR, MetricP50.Name); !ok || rr.N != 2 || rr.Failed != 0 {
		t.Errorf("wireguard-go's RR summary %+v: the failed TCP rep must not count against it", rr)
	}
	if _, ok := r.Summary("veth", WorkloadTCP1, MetricCPUPerGbit.Name); ok {
		t.Error("veth has a CPU cost although the kernel carries its traffic")
	}
	if len(r.Comparisons) != 2 {
		t.Fatalf("comparisons %+v, want snorkel-wireguard against veth and wireguard-go", r.Comparisons)
	}
	c := r.Comparisons[0]
	if want := 1.8 / 2.05; c.Baseline != "wireguard-go" || c.Ratio < want-1e-9 || c.Ratio > want+1e-9 || c.Met() {
		t.Errorf("comparison %+v, want ratio %v against wireguard-go, target not met", c, want)
	}
	if got := c.Shortfall(); got < 0.12 || got > 0.13 {
		t.Errorf("shortfall %v, want about 12%%", got)
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
	if back.Runs[len(back.Runs)-1].Error == "" || back.Runs[0].Values[MetricThroughput.Name] != 1.9e9 || back.Runs[0].Processes[1].PeakRSS != 24<<20 {
		t.Errorf("measurements changed on the way: %+v", back.Runs)
	}
	if s, _ := back.Summary("wireguard-go", WorkloadTCP1, MetricThroughput.Name); s.Failed != 1 || s.N != 2 {
		t.Errorf("summary changed on the way: %+v", s)
	}
	if w, ok := back.Workload(WorkloadRR); !ok || w.Primary != MetricP50.Name || len(w.Metrics) == 0 {
		t.Errorf("workload changed on the way: %+v", w)
	}
	if s, _ := back.System("strongswan"); s.Unavailable == "" {
		t.Error("the unavailable system lost its reason")
	}
}

func TestReportsShowTablesRatiosCostsAndUnavailableSystems(t *testing.T) {
	r := sampleResults()
	r.Runs[0].Values[MetricHostSteal.Name] = 12.5
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
	for _, want := range []string{"snorkel-wireguard", "1.80 (1.70–1.90)", "2.05 (2.00–2.10) [1 failed]", "12.00 (11.00–13.00)",
		"0.84 (0.79–0.89)", // 151% of a core for 1.8 Gb/s
		kernelCPU, "24 MiB", "0.88× (0.81–0.95) MISSED by 12%", "≥ 1.00×",
		"strongswan unavailable: strongSwan's charon", "105", "210", "420"} {
		if !strings.Contains(term.String(), want) {
			t.Errorf("terminal table lacks %q:\n%s", want, term.String())
		}
	}
	for _, want := range []string{"| snorkel-wireguard | 1.80 (1.70–1.90) |", "snorkel benchmark all --reps 3", "AMD EPYC", "kernel 6.18",
		"2026-11-22T10:00:00Z", "failed: iperf3 failed: connection reset", "gw-c1 75%", "| strongswan | unavailable |",
		"unavailable on this machine: strongSwan's charon", "NOT met, 12% short", "## Ratios and targets", "## Latency", "## Cost",
		"| host busy | stolen | busy before |", "| 12.5% |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
}

func TestPlotsAreWellFormedSVGWithABarPerSystemAndSeries(t *testing.T) {
	r := sampleResults()
	dir := t.TempDir()
	plots, err := r.WritePlots(dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(plots, ",") != "throughput.svg,latency.svg,cpu.svg" {
		t.Fatalf("plots %v, want throughput, latency and cpu", plots)
	}
	for _, tc := range []struct {
		file  string
		bars  int
		texts []string
	}{
		// Three available systems, one TCP workload.
		{"throughput.svg", 3, []string{"Gb/s of payload received", "snorkel-wireguard", "wireguard-go", "veth", "TCP 1 flow, c1→c2"}},
		// Three systems, three RR percentiles.
		{"latency.svg", 9, []string{"µs", "TCP RR p50", "TCP RR p99.9"}},
		// veth's bar is a note instead.
		{"cpu.svg", 2, []string{"CPU seconds per Gb", kernelCPU}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			bars, texts := parseSVG(t, b)
			if bars != tc.bars {
				t.Errorf("%d bars, want %d", bars, tc.bars)
			}
			for _, want := range tc.texts {
				if !strings.Contains(texts, want) {
					t.Errorf("no text %q in %s", want, tc.file)
				}
			}
			if strings.Contains(texts, "strongswan") {
				t.Error("the unavailable system has a group")
			}
		})
	}
}

// parseSVG checks that b is well-formed XML with an svg root and returns
// the number of bars and all text it shows.
func parseSVG(t *testing.T, b []byte) (bars int, texts string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(b)))
	var sb strings.Builder
	first := true
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if first && e.Name.Local != "svg" {
				t.Fatalf("root element %s, want svg", e.Name.Local)
			}
			first = false
			for _, a := range e.Attr {
				if e.Name.Local == "rect" && a.Name.Local == "class" && a.Value == "bar" {
					bars++
				}
			}
		case xml.CharData:
			sb.Write(e)
			sb.WriteString("\n")
		}
	}
	return bars, sb.String()
}

func TestNiceScaleCoversTheMaximumWithRoundTicks(t *testing.T) {
	for _, tc := range []struct{ in, top, step float64 }{
		{12.3, 15, 5},
		{1.9, 2, 0.5},
		{420, 500, 100},
		{0, 1, 0.2},
		{5, 5, 1},
	} {
		top, step := niceScale(tc.in)
		if top != tc.top || step != tc.step {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", tc.in, top, step, tc.top, tc.step)
		}
	}
}

func TestLogRangeSpansWholeDecades(t *testing.T) {
	series := []barSeries{{bars: []bar{{median: 37, min: 30, max: 45, ok: true}, {median: 7207, min: 5000, max: 12000, ok: true}, {}}}}
	if lo, hi := logRange(series); lo != 10 || hi != 100000 {
		t.Errorf("logRange = %v, %v; want 10, 100000", lo, hi)
	}
	if lo, hi := logRange([]barSeries{{bars: []bar{{}}}}); lo != 1 || hi != 10 {
		t.Errorf("logRange of nothing = %v, %v; want 1, 10", lo, hi)
	}
}

// axisTicks returns the tick labels of a chart's value axis, bottom up.
func axisTicks(svg []byte) []string {
	var out []string
	for _, m := range tickLabel.FindAllSubmatch(svg, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

var tickLabel = regexp.MustCompile(`<text x="\d+" y="[-\d.]+" text-anchor="end">([^<]*)</text>`)

func TestAxisTicksReadAsAPersonWritesThem(t *testing.T) {
	one := func(vs ...float64) []barSeries {
		s := barSeries{name: "s"}
		for _, v := range vs {
			s.bars = append(s.bars, bar{median: v, min: v, max: v, ok: true})
		}
		return []barSeries{s}
	}
	for _, tc := range []struct {
		name  string
		chart barChart
		ticks []string
	}{
		{"halves", barChart{series: one(1.9, 0.4), format: "%.2f"}, []string{"0", "0.5", "1", "1.5", "2"}},
		{"fifths", barChart{series: one(0.55), format: "%.2f"}, []string{"0", "0.2", "0.4", "0.6"}},
		{"two and a half", barChart{series: one(12.3), format: "%.1f"}, []string{"0", "5", "10", "15"}},
		{"hundreds", barChart{series: one(420), format: "%.0f"}, []string{"0", "100", "200", "300", "400", "500"}},
		{"decades", barChart{series: one(37, 7207), format: "%.0f", log: true}, []string{"10", "100", "1000", "10000"}},
		{"decades below one", barChart{series: one(0.37, 4), format: "%.2f", log: true}, []string{"0.1", "1", "10"}},
	} {
		tc.chart.groups = make([]string, len(tc.chart.series[0].bars))
		if got := axisTicks(tc.chart.svg()); !slices.Equal(got, tc.ticks) {
			t.Errorf("%s: ticks %q, want %q", tc.name, got, tc.ticks)
		}
	}
	for v, want := range map[float64]string{0: "0", 0.1 * 3: "0.3", 2.5: "2.5", 1e6: "1000000", 0.001: "0.001", 0.2 * 7: "1.4"} {
		if got := tick(v); got != want {
			t.Errorf("tick(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestReportsShowTheUDPRateFoundAndTheLossAtIt(t *testing.T) {
	udp, _ := workloadNamed(WorkloadUDP)
	r := &Results{
		Benchmark: BenchmarkThroughput,
		Settings:  Settings{Reps: 1, DurationSec: 2, UDPMaxLoss: udpsearch.MaxLoss},
		Workloads: []Workload{udp},
		Systems: []SystemInfo{
			{Name: "snorkel-vxlan", Kind: KindSnorkel, Transport: "vxlan"},
			{Name: "kernel-vxlan", Kind: KindBaseline, KernelDataPath: true},
			{Name: "lossy", Kind: KindBaseline},
		},
	}
	for _, rep := range []struct {
		sys    string
		report udpsearch.Report
	}{
		{"snorkel-vxlan", udpsearch.Report{BoundFrom: udpsearch.BoundProbe, Found: true, Rate: 21563, Loss: 0.02,
			Trials: []udpsearch.Trial{{Sent: 71680, Received: 22286, Seconds: 0.5}, {Rate: 21563, Sent: 10782, Received: 10780, Seconds: 0.5}}}},
		{"kernel-vxlan", udpsearch.Report{BoundFrom: udpsearch.BoundProbe, Found: true, AtBound: true, Rate: 30563,
			Trials: []udpsearch.Trial{{Sent: 15282, Received: 15282, Seconds: 0.5}}}},
		{"lossy", udpsearch.Report{BoundFrom: udpsearch.BoundFlag, Bound: 1000, Trials: []udpsearch.Trial{{Rate: 1000, Sent: 1000, Received: 900, Seconds: 1}}}},
	} {
		r.Runs = append(r.Runs, Measurement{System: rep.sys, Workload: WorkloadUDP, Rep: 1, Order: len(r.Runs) + 1, Values: udpValues(rep.report)})
	}
	r.summarize()
	dir := t.TempDir()
	plots, err := r.WritePlots(dir)
	if err != nil {
		t.Fatal(err)
	}
	r.Plots = plots
	if err := r.WriteMarkdown(dir); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"UDP 64 B, kpps at ≤ 0.1% loss (loss at it)",
		"| snorkel-vxlan | 21.6, 0.020% lost |", "| kernel-vxlan | ≥ 30.6, 0.000% lost |", "| lossy | 0.0 |",
		"21.6 kpps at 0.020% loss, 2 trials (unpaced probe: 44.6 kpps received)", "every rate tried lost more than tolerated, 1 trial"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "udp.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"21.6, 0.02%", "≥ 30.6, 0.00%", "none with ≤ 0.1% lost", "highest rate with ≤ 0.1% loss; labels: loss at it"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("udp.svg lacks %q", want)
		}
	}
}

func workloadNamed(name string) (Workload, bool) {
	for _, w := range AllWorkloads {
		if w.Name == name {
			return w, true
		}
	}
	return Workload{}, false
}

func TestReportsSummarisePerfStatPerSystemAndSayWhyOneHasNone(t *testing.T) {
	r := sampleResults()
	for i := range r.Runs {
		m := &r.Runs[i]
		if m.Workload != WorkloadTCP1 || m.Error != "" {
			continue
		}
		switch m.System {
		case "snorkel-wireguard":
			m.addPerfStat(&PerfStat{Scope: PerfScopeProcesses, Counters: map[string]float64{"task-clock": 15000, "context-switches": 2e5}, Unsupported: []string{"cycles", "instructions"}}, 10)
		case "veth":
			m.addPerfStat(&PerfStat{Scope: PerfScopeHost, Counters: map[string]float64{"task-clock": 20000, "context-switches": 1e5}}, 10)
		case "wireguard-go":
			m.addPerfStat(&PerfStat{Scope: PerfScopeProcesses, Error: "perf stat for wireguard-go-c1 (pid 12): no counters in perf's output: Problems finding threads of monitor"}, 10)
		}
	}
	r.summarize()
	var term strings.Builder
	if err := r.WriteTable(&term); err != nil {
		t.Fatal(err)
	}
	// snorkel-wireguard: 2e4 switches a second over 1.7 to 1.9 Gb/s.
	for _, want := range []string{"Counters (perf stat)", "context switches/GB", "CPU s/Gb (task-clock)", "whole host (not attributable)",
		"88889 (84211–94118)", "Not supported on this machine (no hardware counters): cycles, instructions.",
		"wireguard-go: perf stat for wireguard-go-c1 (pid 12): no counters"} {
		if !strings.Contains(term.String(), want) {
			t.Errorf("terminal table lacks %q:\n%s", want, term.String())
		}
	}
	if strings.Contains(term.String(), "instructions/B") {
		t.Errorf("a column for instructions, which no system counted:\n%s", term.String())
	}
	if _, ok := sampleResults().perfStatTable(); ok {
		t.Error("a perf stat table for a run without perf stat")
	}
}

func TestVerdictsNeverRoundAMissOntoItsTarget(t *testing.T) {
	for _, tc := range []struct {
		ratio, target float64
		verdict       string
	}{
		{0.9486, 0.95, "0.949× MISSED by under 1%"},
		{0.9449, 0.95, "0.94× MISSED by 1%"},
		{0.93, 0.95, "0.93× MISSED by 2%"},
		{0.95, 0.95, "0.95× met"},
		{1.734, 1, "1.73× met"},
		{0.54, 0, "0.54×"},
	} {
		c := Comparison{System: "s", Baseline: "b", Workload: "tcp-1", Metric: "throughput", Ratio: tc.ratio, Target: tc.target}
		if got := c.verdict(); got != tc.verdict {
			t.Errorf("verdict of %v against %v: %q, want %q", tc.ratio, tc.target, got, tc.verdict)
		}
	}
	c := Comparison{System: "s", Baseline: "b", Workload: "tcp-1", Metric: "throughput", Ratio: 0.9486, Target: 0.95}
	if got, want := c.String(), "s / b, tcp-1 (median throughput): 0.949× (target ≥ 0.95×: NOT met, under 1% short)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestComparisonsRangeOverTheRoundsBothSystemsCompleted(t *testing.T) {
	r := sampleResults()
	c := r.Comparisons[0]
	// Round 3 of wireguard-go failed: rounds 1 (1.9/2.0) and 2 (1.7/2.1)
	// are left.
	if c.Baseline != "wireguard-go" || !near(c.RoundMin, 1.7/2.1) || !near(c.RoundMax, 1.9/2.0) {
		t.Errorf("comparison %+v, want rounds from %.4f to %.4f", c, 1.7/2.1, 1.9/2.0)
	}
	if got, want := c.verdict(), "0.88× (0.81–0.95) MISSED by 12%"; got != want {
		t.Errorf("verdict %q, want %q", got, want)
	}
	if got := c.String(); !strings.Contains(got, "one round's 0.81–0.95") {
		t.Errorf("String() = %q, want the rounds' range", got)
	}
	v := r.Comparisons[1]
	if v.Baseline != "veth" || !near(v.RoundMin, 1.8/13) || !near(v.RoundMax, 1.9/12) {
		t.Errorf("comparison %+v, want rounds from %.4f to %.4f", v, 1.8/13, 1.9/12)
	}

	// One round is no range.
	r.Runs = slices.DeleteFunc(r.Runs, func(m Measurement) bool { return m.System == "wireguard-go" && m.Rep == 2 })
	r.summarize()
	r.Comparisons = nil
	r.compare(WorkloadTCP1, MetricThroughput.Name, "snorkel-wireguard", "wireguard-go", WireGuardTarget)
	if c := r.Comparisons[0]; c.RoundMin != 0 || c.RoundMax != 0 || strings.Contains(c.verdict(), "(") {
		t.Errorf("comparison over one round %+v, verdict %q: want no range", c, c.verdict())
	}
}
