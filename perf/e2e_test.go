package perf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/perf/topo"
)

// TestThroughputEndToEnd runs the whole benchmark briefly: Snorkel over
// WireGuard against wireguard-go, one 2 s rep each, with real gateways,
// iperf3 and wireguard-go processes in network namespaces.
func TestThroughputEndToEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and TUN devices")
	}
	wgGo, err := FindWireGuardGo()
	if errors.Is(err, ErrNoWireGuardGo) {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := topo.BuildSnorkel(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	prefix := fmt.Sprintf("t%d", os.Getpid()%100000)
	res, err := RunThroughput(ctx, ThroughputOptions{
		Transports:  []string{"wireguard"},
		Baselines:   []string{BaselineWireGuardGo},
		Reps:        1,
		Duration:    2 * time.Second,
		OutDir:      out,
		StateDir:    filepath.Join(t.TempDir(), "state"),
		Prefix:      prefix,
		Binary:      bin,
		WireGuardGo: wgGo,
		IdleWait:    5 * time.Second,
		Command:     "go test -run TestThroughputEndToEnd",
		Progress:    testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"snorkel-wireguard", "wireguard-go"} {
		s, ok := res.Summary(name, MetricThroughput.Name)
		if !ok || s.N != 1 || s.Median <= 0 {
			t.Errorf("%s: throughput summary %+v, want one non-zero value", name, s)
		}
		if c, ok := res.Summary(name, MetricTunnelCPU.Name); !ok || c.Median <= 0 {
			t.Errorf("%s: no tunnel CPU measured: %+v", name, c)
		}
	}
	if len(res.Comparisons) != 1 || res.Comparisons[0].Ratio <= 0 {
		t.Errorf("comparisons %+v", res.Comparisons)
	}
	back, err := ReadResults(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Runs) != 2 || back.Runs[0].Raw == "" {
		t.Errorf("results.json holds %+v", back.Runs)
	}
	if st, err := os.Stat(filepath.Join(out, "report.md")); err != nil || st.Size() == 0 {
		t.Errorf("report.md: %v", err)
	}
	if left, _ := topo.List(prefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s", b)
	return len(b), nil
}
