package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/topo"
)

// settle bounds a wait for something that takes milliseconds, or a few
// seconds, on an idle machine: a process to start or stop, a tunnel to come
// up, a packet to cross. `go test ./...` runs these tests beside other
// packages' gateways, API servers and iperf runs on as few as two cores,
// where that can take many times as long; the deadline is there to stop a
// hang, not to time the code, so a passing run never waits it out.
const settle = 60 * time.Second

// snorkelBin is the binary built from this tree for the package's run, so
// that the gateways under test run the code under test; empty when not root.
var snorkelBin string

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	if os.Geteuid() == 0 {
		dir, err := os.MkdirTemp("", "snorkel-e2e")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		snorkelBin, err = topo.BuildSnorkel(ctx, dir)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and TUN devices; run the tests as root (CI does)")
	}
}

// Pods of lab.Basic the tests use.
const (
	c1PodName  = "c1-pod-1"
	c1Pod2Name = "c1-pod-2"
	c2PodName  = "c2-web-1"
)

// env is a running lab and the parts of it the checks use.
type env struct {
	lab       *lab.Lab
	transport string
	c1, c2    *topo.NS // gateway node namespaces
	c1Pod     *topo.NS
	c1Pod2    *topo.NS
	c2Pod     *topo.NS
	c1IP      netip.Addr
	c2IP      netip.Addr
}

// upLab brings up lab.Basic over transport with a namespace prefix unique
// to this process and tag, and tears it down when the test ends.
func upLab(t *testing.T, transport, tag string) *env {
	t.Helper()
	l := upScenario(t, lab.Basic(), transport, tag)
	e := &env{lab: l, transport: transport}
	e.c1 = mustGateway(t, l, "c1")
	e.c2 = mustGateway(t, l, "c2")
	e.c1Pod, e.c1IP = mustPod(t, l, c1PodName)
	e.c1Pod2, _ = mustPod(t, l, c1Pod2Name)
	e.c2Pod, e.c2IP = mustPod(t, l, c2PodName)
	return e
}

// upScenario brings up a scenario over transport with a namespace prefix
// unique to this process and tag, and tears it down when the test ends.
func upScenario(t *testing.T, sc lab.Scenario, transport, tag string) *lab.Lab {
	t.Helper()
	prefix := fmt.Sprintf("e2%d%s-", os.Getpid()%100000, tag)
	state := filepath.Join(t.TempDir(), "state")
	// Up waits for each gateway and pod in turn, each for up to settle.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	l, err := lab.Up(ctx, lab.Options{
		Scenario:     sc,
		Transport:    transport,
		StateDir:     state,
		Prefix:       prefix,
		Binary:       snorkelBin,
		ReadyTimeout: settle,
		// The checks bring their own servers; in-process whereami spares
		// a process per pod.
		PodsInProcess: true,
		Progress:      &progress,
	})
	if err != nil {
		t.Fatalf("lab up (%s, %s): %v\n%s", sc.Name, transport, err, progress.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			// A restarted process writes the log of the one it replaced.
			shown := map[string]bool{}
			for _, p := range l.Topo.Processes() {
				if shown[p.Log] {
					continue
				}
				shown[p.Log] = true
				if b, err := os.ReadFile(p.Log); err == nil {
					t.Logf("log of %s:\n%s", p.Name, b)
				}
			}
		}
		if err := l.Close(); err != nil {
			t.Errorf("lab down: %v", err)
		}
		if err := l.Clean(); err != nil {
			t.Errorf("lab clean: %v", err)
		}
		left, err := topo.List(prefix)
		if err != nil || len(left) > 0 {
			t.Errorf("namespaces left behind: %v %v", left, err)
		}
	})
	if transport != lab.TransportKernel {
		waitConnected(t, l)
	}
	return l
}

func mustGateway(t *testing.T, l *lab.Lab, cluster string) *topo.NS {
	t.Helper()
	ns, err := l.Gateway(cluster)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func mustPod(t *testing.T, l *lab.Lab, name string) (*topo.NS, netip.Addr) {
	t.Helper()
	ns, p, err := l.Pod(name)
	if err != nil {
		t.Fatal(err)
	}
	return ns, p.IP
}

// tun returns the name of a cluster's TUN device.
func (e *env) tun(cluster string) string {
	return e.lab.Plan.Cluster(cluster).Gateway.TUN
}

// status fetches a gateway's /status from inside its node's namespace,
// where it listens.
func (e *env) status(t *testing.T, gw *topo.NS) gateway.Stats {
	t.Helper()
	var st gateway.Stats
	if err := getJSON(t.Context(), gw, "/status", &st); err != nil {
		t.Fatalf("status of the gateway in %s: %v", gw, err)
	}
	return st
}

// waitConnected waits until every gateway of l reports every remote
// connected on its health probes, so that the first packet of a check does
// not race the tunnel's setup (a WireGuard handshake on a loaded host).
func waitConnected(t *testing.T, l *lab.Lab) {
	t.Helper()
	deadline := time.Now().Add(settle)
	for _, c := range l.Plan.Clusters {
		gw, err := l.Gateway(c.Spec.ID)
		if err != nil {
			t.Fatal(err)
		}
		for {
			var st gateway.Stats
			err := getJSON(t.Context(), gw, "/status", &st)
			up := err == nil && len(st.Remotes) == len(l.Plan.Remotes(&c))
			for _, r := range st.Remotes {
				up = up && r.Status == "connected"
			}
			if up {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's gateway has not connected every remote within %v: %+v (%v)", c.Spec.ID, settle, st.Remotes, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
