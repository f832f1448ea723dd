package perf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/perf/udpsearch"
)

// TestBenchmarkEndToEnd runs the whole harness briefly: every workload on
// Snorkel over WireGuard and on the veth ceiling, one 2 s repetition each,
// with real gateways, iperf3, ping and perf-pod processes in network
// namespaces, and checks what it wrote.
func TestBenchmarkEndToEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and TUN devices; run the tests as root")
	}
	// The run takes about a minute on an idle machine; the bound only
	// stops a hang, and on two cores shared with the rest of the suite
	// the build and the setups take several times as long.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	bin, err := topo.BuildSnorkel(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	state := filepath.Join(t.TempDir(), "state")
	prefix := fmt.Sprintf("sgt%d-", os.Getpid()%10000)
	res, err := Run(ctx, Options{
		Benchmark:  BenchmarkAll,
		Transports: []string{"wireguard"},
		Baselines:  []string{BaselineVeth},
		Reps:       1,
		Duration:   2 * time.Second,
		OutDir:     out,
		StateDir:   state,
		Prefix:     prefix,
		Binary:     bin,
		IdleWait:   -1,
		PerfStat:   true,
		CPUProfile: true,
		Command:    "go test -run TestBenchmarkEndToEnd",
		Progress:   testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := topo.List(prefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state directory %s the run made is still there (%v)", state, err)
	}

	back, err := ReadResults(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * len(AllWorkloads); len(back.Runs) != want {
		t.Fatalf("results.json holds %d measurements, want %d", len(back.Runs), want)
	}
	for _, m := range back.Runs {
		if m.Error != "" {
			t.Errorf("%s %s failed: %s", m.System, m.Workload, m.Error)
		}
		if m.Raw == "" {
			t.Errorf("%s %s: no raw output saved", m.System, m.Workload)
		}
	}
	for _, sys := range []string{"snorkel-wireguard", "veth"} {
		get := func(w string, metric Metric) float64 {
			s, ok := back.Summary(sys, w, metric.Name)
			if !ok || s.N != 1 {
				t.Errorf("%s %s: no %s", sys, w, metric.Name)
			}
			return s.Median
		}
		for _, w := range []string{WorkloadTCP1, WorkloadTCP1Rev, WorkloadTCP10, WorkloadTCP10Rev} {
			if v := get(w, MetricThroughput); v <= 0 {
				t.Errorf("%s %s: throughput %v", sys, w, v)
			}
		}
		if n := get(WorkloadUDP, MetricUDPTrials); n < 1 || n > udpsearch.MaxTrials {
			t.Errorf("%s: UDP search ran %v trials, want 1 to %d", sys, n, udpsearch.MaxTrials)
		}
		if l, ok := back.Summary(sys, WorkloadUDP, MetricLoss.Name); get(WorkloadUDP, MetricUDPRate) > 0 && (!ok || l.Median > udpsearch.MaxLoss) {
			t.Errorf("%s: UDP rate found with loss %+v, want at most %g%%", sys, l, udpsearch.MaxLoss)
		}
		if p50, p99, p999 := get(WorkloadRR, MetricP50), get(WorkloadRR, MetricP99), get(WorkloadRR, MetricP999); !(0 < p50 && p50 <= p99 && p99 <= p999) {
			t.Errorf("%s: RR percentiles %v, %v, %v out of order", sys, p50, p99, p999)
		}
		if p50, p99 := get(WorkloadPing, MetricP50), get(WorkloadPing, MetricP99); !(0 < p50 && p50 <= p99) {
			t.Errorf("%s: ping percentiles %v, %v out of order", sys, p50, p99)
		}
	}
	if c, ok := back.Summary("snorkel-wireguard", WorkloadTCP1, MetricCPUPerGbit.Name); !ok || c.Median <= 0 {
		t.Errorf("snorkel-wireguard: no CPU per gigabit: %+v", c)
	}
	if m, ok := back.Summary("snorkel-wireguard", WorkloadTCP1, MetricPeakRSS.Name); !ok || m.Median < 1<<20 {
		t.Errorf("snorkel-wireguard: peak memory %+v, want at least 1 MiB", m)
	}
	if _, ok := back.Summary("veth", WorkloadTCP1, MetricCPUPerGbit.Name); ok {
		t.Error("veth has a CPU cost although the kernel carries its traffic")
	}
	if len(back.Comparisons) != 5 || back.Comparisons[0].Baseline != "veth" || back.Comparisons[0].Ratio <= 0 {
		t.Errorf("comparisons %+v, want snorkel-wireguard against veth on each throughput workload", back.Comparisons)
	}
	for _, m := range back.Runs {
		want := 0
		if m.System == "snorkel-wireguard" && (m.Workload == WorkloadTCP1 || m.Workload == WorkloadUDP) {
			want = 2 // c1's gateway and c2's
		}
		if len(m.Profiles) != want || m.ProfileError != "" {
			t.Errorf("%s %s: profiles %v (%s), want %d", m.System, m.Workload, m.Profiles, m.ProfileError, want)
		}
		for _, p := range m.Profiles {
			if fi, err := os.Stat(filepath.Join(out, p)); err != nil || fi.Size() == 0 {
				t.Errorf("%s %s: profile %s: %v", m.System, m.Workload, p, err)
			}
		}
	}
	_, perfErr := exec.LookPath("perf")
	for _, m := range back.Runs {
		if m.Workload != WorkloadTCP1 {
			if m.PerfStat != nil {
				t.Errorf("%s %s: perf stat outside the single-flow run", m.System, m.Workload)
			}
			continue
		}
		want := map[string]string{"snorkel-wireguard": PerfScopeProcesses, "veth": PerfScopeHost}[m.System]
		switch ps := m.PerfStat; {
		case ps == nil:
			t.Errorf("%s: no perf stat", m.System)
		case perfErr != nil:
			if !strings.Contains(ps.Error, "not installed") {
				t.Errorf("%s: perf missing, and perf stat says %q", m.System, ps.Error)
			}
		case ps.Error != "" || ps.Scope != want || ps.Raw == "":
			t.Errorf("%s: perf stat %+v, want counters of the %s and the raw output", m.System, ps, want)
		default:
			if _, ok := m.Values[MetricCtxSwitchesPerGB.Name]; !ok {
				t.Errorf("%s: no context switches per GB in %v", m.System, m.Values)
			}
		}
	}
	for _, f := range append([]string{"report.md"}, back.Plots...) {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if filepath.Ext(f) == ".svg" {
			if bars, _ := parseSVG(t, b); bars == 0 {
				t.Errorf("%s has no bars", f)
			}
		}
	}
	if len(back.Plots) != 4 {
		t.Errorf("plots %v, want throughput, udp, latency and cpu", back.Plots)
	}
	t.Logf("results: %d measurements; plots %v", len(res.Runs), res.Plots)
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s", b)
	return len(b), nil
}
