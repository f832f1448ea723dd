package perf

import (
	"math"
	"testing"
)

func TestParseHostCPUCountsIdleAndIowaitAsIdleReadsStealAndSkipsGuestTime(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	c, err := parseHostCPU([]byte("cpu  100 5 50 800 20 3 2 7 40 1\ncpu0 1 2 3 4 5 6 7 8 9 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.total != 987 || c.idle != 820 || c.steal != 7 {
		t.Errorf("got total %d idle %d steal %d, want 987, 820 and 7", c.total, c.idle, c.steal)
	}
	later := hostCPU{total: c.total + 200, idle: c.idle + 50, steal: c.steal + 30}
	if got := later.busySince(c); math.Abs(got-75) > 1e-9 {
		t.Errorf("busy %v%%, want 75%%", got)
	}
	if got := later.stealSince(c); math.Abs(got-15) > 1e-9 {
		t.Errorf("steal %v%%, want 15%%", got)
	}
	if got, st := c.busySince(c), c.stealSince(c); got != 0 || st != 0 {
		t.Errorf("busy and steal over no time = %v, %v, want 0", got, st)
	}
}

func TestParseHostCPURefusesOtherLines(t *testing.T) {
	for _, in := range []string{"", "intr 1 2 3 4 5 6", "cpu 1 2 x 4 5"} {
		if _, err := parseHostCPU([]byte(in)); err == nil {
			t.Errorf("%q parsed, want an error", in)
		}
	}
}

func TestParseProcessTicksCountsFromTheLastParenthesis(t *testing.T) {
	// A command name may hold spaces and parentheses; utime is 1234 and
	// stime 566 here.
	stat := "4242 (wg (a) b) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 566 0 0 20 0 9 0 139932 3133440 417 18446744073709551615\n"
	got, err := parseProcessTicks([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if got != 1800 {
		t.Errorf("ticks %d, want 1800", got)
	}
	for _, bad := range []string{"", "4242 (x) S 1 2", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 u s"} {
		if _, err := parseProcessTicks([]byte(bad)); err == nil {
			t.Errorf("%q parsed, want an error", bad)
		}
	}
}

func TestCPUModelReadsTheFirstModelName(t *testing.T) {
	in := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: other\n"
	if got := cpuModel([]byte(in)); got != "AMD EPYC 7B13" {
		t.Errorf("got %q", got)
	}
	if got := cpuModel([]byte("processor : 0\n")); got != "" {
		t.Errorf("got %q from cpuinfo without a model name", got)
	}
}

func TestParsePeakRSSReadsVmHWMInBytes(t *testing.T) {
	status := "Name:\tsnorkel\nVmPeak:\t 1269180 kB\nVmSize:\t 1269180 kB\nVmHWM:\t   21504 kB\nVmRSS:\t   20480 kB\n"
	got, err := parsePeakRSS([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if got != 21504*1024 {
		t.Errorf("peak RSS %d, want %d", got, 21504*1024)
	}
	for _, bad := range []string{"", "Name:\tkthreadd\nVmRSS:\t1 kB\n", "VmHWM:\t12 MB\n", "VmHWM:\tx kB\n"} {
		if _, err := parsePeakRSS([]byte(bad)); err == nil {
			t.Errorf("%q parsed, want an error", bad)
		}
	}
}
