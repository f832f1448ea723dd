package dnsperf

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseStats(t *testing.T) {
	st, err := ParseStats(read(t, "throughput.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{
		Sent: 71354, Completed: 71354, Lost: 0,
		Rcodes:  map[string]int{"NOERROR": 47570, "NXDOMAIN": 23784},
		RunTime: 2003291 * time.Microsecond, QPS: 35618.389939,
		AvgLatency: 1192 * time.Microsecond, MinLatency: 23 * time.Microsecond, MaxLatency: 50833 * time.Microsecond,
		StdDevLatency: 1585 * time.Microsecond,
	}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("got  %+v\nwant %+v", st, want)
	}

	// Everything lost: no rcodes, no standard deviation line.
	st, err = ParseStats(read(t, "timeouts.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != 3 || st.Lost != 3 || st.Completed != 0 || st.QPS != 0 || len(st.Rcodes) != 0 {
		t.Errorf("all lost: %+v", st)
	}

	if _, err := ParseStats("DNS Performance Testing Tool\nError: could not open datafile\n"); err == nil || !strings.Contains(err.Error(), "could not open") {
		t.Errorf("output without statistics: %v; want an error quoting the output", err)
	}
}

func TestParseVerbose(t *testing.T) {
	l, err := ParseVerbose(strings.NewReader(read(t, "verbose.txt")))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{999, 144, 125, 132, 133, 9662}
	for i := range want {
		want[i] *= time.Microsecond
	}
	if !reflect.DeepEqual(l.Each, want) || l.Lost != 0 || l.Rcodes["NOERROR"] != 4 || l.Rcodes["NXDOMAIN"] != 2 {
		t.Errorf("got %+v, want latencies %v, 4 NOERROR, 2 NXDOMAIN", l, want)
	}
	l, err = ParseVerbose(strings.NewReader(read(t, "timeouts.txt")))
	if err != nil || l.Lost != 3 || len(l.Each) != 0 {
		t.Errorf("timeouts: %+v %v, want 3 lost", l, err)
	}
	if _, err := ParseVerbose(strings.NewReader("> NOERROR a.b A soon\n")); err == nil {
		t.Error("a latency that is not a number was accepted")
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i)*time.Microsecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 500 * time.Microsecond}, {99, 990 * time.Microsecond}, {99.9, 999 * time.Microsecond}, {100, 1000 * time.Microsecond}} {
		if got := percentile(d, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if percentile(nil, 99) != 0 {
		t.Error("percentile of nothing")
	}
}
