package perf

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snorkel-net/snorkel/lab/topo"
)

func TestPerfStatCountsPerByteOfPayload(t *testing.T) {
	m := Measurement{Values: map[string]float64{MetricThroughput.Name: 8e9}} // 1 GB/s
	m.addPerfStat(&PerfStat{Scope: PerfScopeProcesses, Counters: map[string]float64{
		"task-clock": 3000, "context-switches": 40000, "page-faults": 200, "instructions": 6e9,
	}}, 2)
	for metric, want := range map[string]float64{
		MetricPerfCPUPerGbit.Name:      (3.0 / 2) / 8, // 1.5 CPUs over 8 Gb/s
		MetricCtxSwitchesPerGB.Name:    20000,
		MetricPageFaultsPerGB.Name:     100,
		MetricInstructionsPerByte.Name: 3,
	} {
		if got, ok := m.Values[metric]; !ok || !near(got, want) {
			t.Errorf("%s = %v, want %v", metric, got, want)
		}
	}
	for _, metric := range []string{MetricMigrationsPerGB.Name, MetricCyclesPerByte.Name} {
		if v, ok := m.Values[metric]; ok {
			t.Errorf("%s = %v without its counter", metric, v)
		}
	}

	failed := Measurement{Values: map[string]float64{MetricThroughput.Name: 8e9}}
	failed.addPerfStat(&PerfStat{Error: "perf stat: refused"}, 2)
	if len(failed.Values) != 1 || failed.PerfStat == nil {
		t.Errorf("perf stat failed, values %v; want none added and the error kept", failed.Values)
	}
}

func TestPerfStatAttachesToProcessesAndSavesItsOutput(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach perf to a process")
	}
	if _, err := exec.LookPath("perf"); err != nil {
		t.Skip("the perf tool is not installed")
	}
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	run, err := startPerfStat(t.Context(), []*topo.Process{{Name: "sleeper", PID: sleeper.Process.Pid}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ps := run.stop(dir, filepath.Join("perfstat", "x.txt"))
	if ps.Error != "" || ps.Scope != PerfScopeProcesses {
		t.Fatalf("%+v: want counters of the process", ps)
	}
	if _, ok := ps.Counters["context-switches"]; !ok {
		t.Errorf("counters %v: no context switches", ps.Counters)
	}
	raw, err := os.ReadFile(filepath.Join(dir, ps.Raw))
	if err != nil || !strings.Contains(string(raw), "# sleeper (pid ") || !strings.Contains(string(raw), "context-switches") {
		t.Errorf("raw output %q (%v): want a heading per process and perf's lines", raw, err)
	}
}

func TestPerfStatWithoutThePerfToolSaysSo(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := startPerfStat(t.Context(), nil); err == nil || !strings.Contains(err.Error(), "not installed") {
		t.Errorf("err %v, want one saying perf is not installed", err)
	}
}

func TestPerfStatThatFailsSaysWhy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach perf to a process")
	}
	if _, err := exec.LookPath("perf"); err != nil {
		t.Skip("the perf tool is not installed")
	}
	// A process that is gone: perf cannot attach and exits at once.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	run, err := startPerfStat(t.Context(), []*topo.Process{{Name: "gone", PID: gone.Process.Pid}})
	if err != nil {
		t.Fatal(err)
	}
	ps := run.stop(t.TempDir(), "x.txt")
	if ps.Error == "" || !strings.Contains(ps.Error, "gone (pid ") || ps.Counters != nil {
		t.Errorf("%+v: want an error naming the process and no counters", ps)
	}
	t.Log(ps.Error)
}

// FuzzParsePerfStat: any output is refused or yields named events with
// counts that are numbers of at least zero.
