package perf

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/snorkel-net/snorkel/lab/topo"
)

// The perfstat fixtures are real outputs of perf 6.1 `perf stat -x,` in a
// VM without hardware counters: over the whole host, attached to a
// process that slept through the window, and the file the harness saved
// for Snorkel's two VXLAN gateways, a heading before each.
func TestParsePerfStatReadsCountsAndWhatIsNotSupported(t *testing.T) {
	for _, tc := range []struct {
		file        string
		counts      map[string]float64
		unsupported []string
	}{
		{"perfstat-host.txt", map[string]float64{"task-clock": 989.93, "context-switches": 25577, "cpu-migrations": 855, "page-faults": 1664}, []string{"cycles", "instructions"}},
		{"perfstat-idle-process.txt", map[string]float64{"task-clock": 0, "context-switches": 0, "cpu-migrations": 0, "page-faults": 0}, []string{"cycles", "instructions"}},
		{"perfstat-gateways.txt", map[string]float64{"task-clock": 1318.33 + 1372.70, "context-switches": 30207 + 36198, "cpu-migrations": 138 + 204, "page-faults": 736 + 6398},
			[]string{"cycles", "instructions", "cycles", "instructions"}},
	} {
		cs, err := parsePerfStat(readFixture(t, tc.file))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		got := map[string]float64{}
		var unsupported []string
		for _, c := range cs {
			if c.supported {
				got[c.event] += c.value
			} else {
				unsupported = append(unsupported, c.event)
			}
		}
		if !mapsEqual(got, tc.counts) || !slices.Equal(unsupported, tc.unsupported) {
			t.Errorf("%s: counts %v, unsupported %v; want %v, %v", tc.file, got, unsupported, tc.counts, tc.unsupported)
		}
	}
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !near(v, w) {
			return false
		}
	}
	return true
}

func TestParsePerfStatRefusesOutputWithoutCounters(t *testing.T) {
	for name, in := range map[string]string{
		"bad event":       "event syntax error: 'bogus'\n                     \\___ parser error\nRun 'perf list' for a list of valid events\n",
		"no such process": "Problems finding threads of monitor\n\nUsage: perf stat [<options>] [<command>]\n",
		"empty":           "",
		"a negative":      "-5,,context-switches,100,100.00,,\n",
	} {
		if cs, err := parsePerfStat([]byte(in)); err == nil {
			t.Errorf("%s: parsed %+v, want an error", name, cs)
		}
	}
}

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
func FuzzParsePerfStat(f *testing.F) {
	for _, name := range []string{"perfstat-host.txt", "perfstat-idle-process.txt", "perfstat-gateways.txt"} {
		f.Add(readFixture(f, name))
	}
	f.Add([]byte("event syntax error: 'bogus'\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := parsePerfStat(b)
		if err != nil {
			return
		}
		if len(cs) == 0 {
			t.Fatal("no counters and no error")
		}
		for _, c := range cs {
			if c.event == "" || c.value < 0 || math.IsNaN(c.value) || math.IsInf(c.value, 0) || !c.supported && c.value != 0 {
				t.Fatalf("%q gave %+v", b, c)
			}
		}
	})
}
