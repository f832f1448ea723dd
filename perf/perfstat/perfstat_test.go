package perfstat

import (
	"math"
	"slices"
	"testing"

	"github.com/snorkel-net/snorkel/perf/internal/fixture"
)

// The fixtures are real outputs of perf 6.1 `perf stat -x,` in a VM without
// hardware counters: over the whole host, attached to a process that slept
// through the window, and the file the harness saved for Snorkel's two
// VXLAN gateways, a heading before each.
func TestParseReadsCountsAndWhatIsNotSupported(t *testing.T) {
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
		cs, err := Parse(fixture.Read(t, tc.file))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		got := map[string]float64{}
		var unsupported []string
		for _, c := range cs {
			if c.Supported {
				got[c.Event] += c.Value
			} else {
				unsupported = append(unsupported, c.Event)
			}
		}
		if !sameCounts(got, tc.counts) || !slices.Equal(unsupported, tc.unsupported) {
			t.Errorf("%s: counts %v, unsupported %v; want %v, %v", tc.file, got, unsupported, tc.counts, tc.unsupported)
		}
	}
}

// sameCounts compares counts to a part in a million: the fixtures' sums
// are of decimal fractions.
func sameCounts(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || math.Abs(v-w) > 1e-6*math.Max(1, math.Abs(w)) {
			return false
		}
	}
	return true
}

func TestParseRefusesOutputWithoutCounters(t *testing.T) {
	for name, in := range map[string]string{
		"bad event":       "event syntax error: 'bogus'\n                     \\___ parser error\nRun 'perf list' for a list of valid events\n",
		"no such process": "Problems finding threads of monitor\n\nUsage: perf stat [<options>] [<command>]\n",
		"empty":           "",
		"a negative":      "-5,,context-switches,100,100.00,,\n",
	} {
		if cs, err := Parse([]byte(in)); err == nil {
			t.Errorf("%s: parsed %+v, want an error", name, cs)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"perfstat-host.txt", "perfstat-idle-process.txt", "perfstat-gateways.txt"} {
		f.Add(fixture.Read(f, name))
	}
	f.Add([]byte("event syntax error: 'bogus'\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := Parse(b)
		if err != nil {
			return
		}
		if len(cs) == 0 {
			t.Fatal("no counters and no error")
		}
		for _, c := range cs {
			if c.Event == "" || c.Value < 0 || math.IsNaN(c.Value) || math.IsInf(c.Value, 0) || !c.Supported && c.Value != 0 {
				t.Fatalf("%q gave %+v", b, c)
			}
		}
	})
}
