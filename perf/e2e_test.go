package perf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/perf/topo"
)

// TestThroughputEndToEnd runs the whole benchmark briefly: Snorkel over
// WireGuard, with and without Globalnet, against wireguard-go, one 2 s rep
// each, with real gateways, iperf3 and wireguard-go processes in network
// namespaces.
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
	prefix := fmt.Sprintf("sgt%d-", os.Getpid()%10000)
	res, err := RunThroughput(ctx, ThroughputOptions{
		Transports:  []string{"wireguard"},
		Globalnet:   true,
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
	for _, name := range []string{"snorkel-wireguard", "snorkel-wireguard-globalnet", "wireguard-go"} {
		s, ok := res.Summary(name, MetricThroughput.Name)
		if !ok || s.N != 1 || s.Median <= 0 {
			t.Errorf("%s: throughput summary %+v, want one non-zero value", name, s)
		}
		if c, ok := res.Summary(name, MetricTunnelCPU.Name); !ok || c.Median <= 0 {
			t.Errorf("%s: no tunnel CPU measured: %+v", name, c)
		}
	}
	if len(res.Comparisons) != 2 || res.Comparisons[0].Ratio <= 0 || res.Comparisons[1].Ratio <= 0 ||
		res.Comparisons[1].System != "snorkel-wireguard-globalnet" || res.Comparisons[1].Baseline != "snorkel-wireguard" {
		t.Errorf("comparisons %+v, want snorkel-wireguard against wireguard-go and its Globalnet system against it", res.Comparisons)
	}
	if gn := res.Systems[1]; !strings.Contains(gn.Server, "global IP 242.2.") {
		t.Errorf("Globalnet system's server %q, want one reached at a global IP", gn.Server)
	}
	back, err := ReadResults(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Runs) != 3 || back.Runs[0].Raw == "" {
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
