package lab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
	binDir    string
)

// snorkelBinary builds the snorkel command once for the package's tests.
func snorkelBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "snorkel-lab-test")
		if buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		binary, buildErr = topo.BuildSnorkel(ctx, binDir)
	})
	if buildErr != nil {
		t.Fatalf("build snorkel: %v", buildErr)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// runSnorkel runs the binary and returns its combined output and error.
func runSnorkel(t *testing.T, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, snorkelBinary(t), args...).CombinedOutput()
	return string(out), err
}

// TestLabEndToEnd runs `snorkel lab` as `make lab` does, once per transport,
// with real gateway processes on TUN devices: every scenario in turn.
func TestLabEndToEnd(t *testing.T) {
	needRoot(t)
	for _, transport := range []string{"wireguard", "vxlan"} {
		t.Run(transport, func(t *testing.T) {
			prefix := testPrefix(transport[:2])
			state := filepath.Join(t.TempDir(), "state")
			out, err := runSnorkel(t, 5*time.Minute, "lab", "--transport", transport, "--state-dir", state, "--prefix", prefix)
			t.Logf("snorkel lab --transport %s:\n%s", transport, out)
			if err != nil {
				t.Errorf("snorkel lab failed: %v", err)
			}
			if strings.Contains(out, "✗") || strings.Count(out, "checks passed") != len(RunOrder) {
				t.Error("not every check passed")
			}
			for _, sc := range RunOrder {
				if !strings.Contains(out, "scenario "+sc+",") {
					t.Errorf("scenario %s did not run", sc)
				}
			}
			if !strings.Contains(out, fmt.Sprintf("all %d scenarios passed", len(RunOrder))) {
				t.Error("no summary of the scenarios")
			}
			if !strings.Contains(out, "snorkel gateway pid") {
				t.Error("the lab did not run gateway processes")
			}
			checkNoLeftovers(t, prefix, state)
		})
	}
}

// TestLabUpStatusDown keeps a lab running across commands, as a user
// exploring it does.
func TestLabUpStatusDown(t *testing.T) {
	needRoot(t)
	prefix := testPrefix("u")
	state := filepath.Join(t.TempDir(), "state")
	args := []string{"--state-dir", state}
	t.Cleanup(func() {
		// Tear down whatever a failure left running.
		if _, err := os.Stat(filepath.Join(state, labFile)); err == nil {
			runSnorkel(t, time.Minute, append([]string{"lab", "down"}, args...)...)
		}
		checkNoLeftovers(t, prefix, "")
	})
	out, err := runSnorkel(t, 2*time.Minute, append([]string{"lab", "up", "--prefix", prefix}, args...)...)
	if err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	if !strings.Contains(out, "wg show "+prefix+"c1") {
		t.Errorf("lab up does not say how to look at the tunnel:\n%s", out)
	}
	out, err = runSnorkel(t, time.Minute, append([]string{"lab", "up", "--prefix", prefix}, args...)...)
	if err == nil || !strings.Contains(out, "already up") {
		t.Errorf("a second lab up in the same state dir: %v\n%s", err, out)
	}

	out, err = runSnorkel(t, time.Minute, append([]string{"lab", "status"}, args...)...)
	t.Logf("lab status:\n%s", out)
	if err != nil {
		t.Errorf("lab status of a healthy lab: %v", err)
	}
	for _, want := range []string{prefix + "c1-gw", "gateway-c1", "gateway-c2", "10.9.0.0/16 dev " + prefix + "c1", "/status"} {
		if !strings.Contains(out, want) {
			t.Errorf("lab status lacks %q", want)
		}
	}
	if strings.Contains(out, "✗") {
		t.Error("lab status reports a problem right after up")
	}

	l, err := Attach(state)
	if err != nil {
		t.Fatal(err)
	}
	procs := l.Topo.Processes()
	if len(procs) != 8 {
		t.Errorf("the lab records %d processes, want 2 gateways, 5 pods and dnsd", len(procs))
	}
	out, err = runSnorkel(t, time.Minute, append([]string{"lab", "down"}, args...)...)
	if err != nil {
		t.Fatalf("lab down: %v\n%s", err, out)
	}
	for _, p := range procs {
		if p.Alive() {
			t.Errorf("%s (pid %d) still running after lab down", p.Name, p.PID)
		}
	}
	checkNoLeftovers(t, prefix, state)
	if out, err := runSnorkel(t, time.Minute, append([]string{"lab", "status"}, args...)...); err == nil {
		t.Errorf("lab status with no lab succeeded:\n%s", out)
	}
}

// TestLabInterrupted sends SIGINT once the gateways are up, as Ctrl-C
// does, and checks that everything is gone and the exit status says so.
func TestLabInterrupted(t *testing.T) {
	needRoot(t)
	prefix := testPrefix("i")
	state := filepath.Join(t.TempDir(), "state")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, snorkelBinary(t), "lab", "--state-dir", state, "--prefix", prefix)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "gateways up") {
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	rest, _ := io.ReadAll(stdout)
	out.Write(rest)
	err = cmd.Wait()
	t.Logf("output:\n%s", out.String())
	if err == nil {
		t.Error("an interrupted lab exited 0")
	}
	if !strings.Contains(out.String(), "interrupted") {
		t.Error("the output does not say the lab was interrupted")
	}
	checkNoLeftovers(t, prefix, "")
	if _, err := os.Stat(filepath.Join(state, labFile)); !os.IsNotExist(err) {
		t.Error("the state dir still records a lab after an interrupted run")
	}
}

// TestLabDownLeavesNothing brings up an esp lab, whose gateways share a
// pre-shared key file besides the files every lab writes, and takes it
// down: nothing of it may remain, in the namespaces or the state dir.
func TestLabDownLeavesNothing(t *testing.T) {
	needRoot(t)
	prefix := testPrefix("e")
	state := filepath.Join(t.TempDir(), "state")
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(state, labFile)); err == nil {
			runSnorkel(t, time.Minute, "lab", "down", "--state-dir", state)
		}
	})
	out, err := runSnorkel(t, 2*time.Minute, "lab", "up", "--transport", "esp", "--prefix", prefix, "--state-dir", state)
	if err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	if _, err := os.Stat(PSKFile(state)); err != nil {
		t.Errorf("the esp lab has no pre-shared key file, so this test does not hold what it should: %v", err)
	}
	out, err = runSnorkel(t, time.Minute, "lab", "down", "--state-dir", state)
	if err != nil {
		t.Fatalf("lab down: %v\n%s", err, out)
	}
	checkNoLeftovers(t, prefix, state)
}
