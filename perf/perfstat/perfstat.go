// Package perfstat reads what the Linux perf tool's `perf stat -x,` prints:
// the counters the benchmark harness attaches to each tunnel process. It
// only parses; package perf runs perf.
package perfstat

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// Counter is one line of `perf stat -x,`.
type Counter struct {
	Event string
	// Value is the count, 0 for an event that is not Supported; task-clock
	// is in milliseconds.
	Value     float64
	Supported bool
}

// Parse reads the CSV lines of `perf stat -x,`: value, unit, event, then
// run time, share and derived metrics. "<not supported>" marks an event
// perf cannot count here; "<not counted>" one that never ran, as a
// process's software counters never do while it sleeps through the whole
// window: nothing happened, a count of 0. Other lines (comments, perf's
// messages) are skipped; output with no counter line is an error.
func Parse(b []byte) ([]Counter, error) {
	var out []Counter
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 4 || f[2] == "" {
			continue
		}
		c := Counter{Event: f[2]}
		switch v := f[0]; v {
		case "<not supported>":
		case "<not counted>":
			c.Supported = true
		default:
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
				continue
			}
			c.Value, c.Supported = x, true
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no counters in perf's output")
	}
	return out, nil
}
