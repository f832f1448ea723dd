package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
)

// settle bounds a wait for something that takes milliseconds on an idle
// machine, a process to start or a request to be answered: beside the rest
// of `go test ./...` on two busy cores it can take seconds. A passing run
// never waits it out.
const settle = 60 * time.Second

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces, TUN devices and nftables rules; run the tests as root")
	}
}

// testPrefix is a namespace prefix unique to this test process and tag, so
// that tests run beside a user's lab and beside each other.
func testPrefix(tag string) string {
	return fmt.Sprintf("t%d%s-", os.Getpid()%100000, tag)
}

// checkNoLeftovers fails the test if namespaces with prefix remain, or,
// unless stateDir is empty, anything in stateDir: a lab torn down and
// cleaned leaves neither.
func checkNoLeftovers(t *testing.T, prefix, stateDir string) {
	t.Helper()
	left, err := topo.List(prefix)
	if err != nil {
		t.Error(err)
	}
	if len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
		for _, n := range left {
			if out, err := exec.Command("ip", "netns", "delete", n).CombinedOutput(); err != nil {
				t.Errorf("ip netns delete %s: %v: %s", n, err, out)
			}
		}
	}
	if stateDir == "" {
		return
	}
	var files []string
	err = filepath.WalkDir(stateDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != stateDir {
			files = append(files, strings.TrimPrefix(path, stateDir+"/"))
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Error(err)
	}
	switch {
	case len(files) > 0:
		t.Errorf("left behind in the state dir %s: %s", stateDir, strings.Join(files, ", "))
	case err == nil:
		t.Errorf("state dir %s left behind, empty", stateDir)
	}
}

// TestTopologyWithKernelRouting builds the basic scenario with plain kernel
// routes between the gateway nodes and in-process pods: the topology, pod
// routing and the nftables service are checked without any gateway.
func TestTopologyWithKernelRouting(t *testing.T) {
	needRoot(t)
	prefix := testPrefix("k")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	l, err := Up(ctx, Options{
		Transport:     TransportKernel,
		StateDir:      dir,
		Prefix:        prefix,
		PodsInProcess: true,
		DNS:           true,
		Progress:      &progress,
		ReadyTimeout:  settle,
	})
	if err != nil {
		t.Fatalf("Up: %v\n%s", err, progress.String())
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			if err := l.Close(); err != nil {
				t.Error(err)
			}
		}
		checkNoLeftovers(t, prefix, "")
	})

	var out bytes.Buffer
	checks := l.Demo(ctx, &out)
	t.Logf("demo:\n%s", out.String())
	kinds := map[string]int{}
	for _, c := range checks {
		kinds[c.Kind]++
		if !c.OK {
			t.Errorf("check failed: %s", c)
		}
	}
	// dns: web, c2.web and a missing name; the http checks include one to
	// web by its name.
	if kinds["ping"] != 2 || kinds["http"] < shownRequests+2 || kinds["balance"] != 1 || kinds["bulk"] != 1 || kinds["dns"] != 3 {
		t.Errorf("checks by kind = %v; want 2 ping, at least %d http, 1 balance, 1 bulk, 3 dns", kinds, shownRequests+2)
	}

	// Every backend must answer the ClusterIP: the DNAT spreads, it does
	// not just pick one.
	pod, src, err := l.Pod("c1-pod-1")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := 0; i < 60 && len(seen) < 3; i++ {
		r, err := getWhereami(ctx, pod.HTTPClient(), "http://10.99.0.10:80/")
		if err != nil {
			t.Fatalf("request %d to the ClusterIP: %v", i, err)
		}
		if clientHost(r.Client) != src.IP.String() {
			t.Errorf("backend %s saw client %s, want %s", r.Pod, r.Client, src.IP)
		}
		seen[r.Pod] = true
	}
	if len(seen) != 3 {
		t.Errorf("backends that answered in 60 requests: %v, want c2-web-1, c2-web-2 and c2-web-3", seen)
	}

	// The pods' only way out is their node: with c1's route to c2 gone,
	// nothing crosses.
	gw, err := l.Gateway("c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gw.Run(ctx, "ip", "route", "del", "10.9.0.0/16"); err != nil {
		t.Fatal(err)
	}
	if _, err := pod.Run(ctx, "ping", "-c", "1", "-W", "1", "10.9.0.11"); err == nil {
		t.Error("c1-pod-1 reached c2-web-1 with no route on c1's node")
	}

	nss := l.Topo.Namespaces()
	closed = true
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range nss {
		if topo.Exists(n.Name()) {
			t.Errorf("namespace %s survived Close", n.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, labFile)); !os.IsNotExist(err) {
		t.Errorf("%s still records the lab after Close", labFile)
	}
	if err := l.Clean(); err != nil {
		t.Error(err)
	}
	checkNoLeftovers(t, prefix, dir)
}

func TestUpRefusesASecondLabInTheSameStateDir(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, labFile), []byte(`{"scenario":{"name":"basic"},"transport":"kernel","prefix":"x-"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Up(context.Background(), Options{Transport: TransportKernel, StateDir: dir, Prefix: testPrefix("d"), PodsInProcess: true})
	if err == nil || !strings.Contains(err.Error(), "lab down") {
		t.Errorf("Up over a recorded lab: %v, want ErrAlreadyUp with a hint to run lab down", err)
	}
	checkNoLeftovers(t, testPrefix("d"), "")
}

// TestUpFailureTearsDownAndNamesTheLog starts "gateways" that exit at once:
// Up must fail, say which gateway and where its log is, and leave nothing.
func TestUpFailureTearsDownAndNamesTheLog(t *testing.T) {
	needRoot(t)
	prefix := testPrefix("f")
	dir := t.TempDir()
	// Up must see the gateways exit, not time out waiting for them.
	ctx, cancel := context.WithTimeout(context.Background(), 3*settle)
	defer cancel()
	_, err := Up(ctx, Options{
		Transport:     "vxlan",
		StateDir:      dir,
		Prefix:        prefix,
		Binary:        "/bin/false",
		PodsInProcess: true,
		ReadyTimeout:  settle,
	})
	if err == nil {
		t.Fatal("Up succeeded with gateways that exit at once")
	}
	msg := err.Error()
	t.Logf("Up: %v", err)
	for _, want := range []string{"gateway of c1", "exited", filepath.Join(dir, logDir, "gateway-c1.log")} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	checkNoLeftovers(t, prefix, "")
	if _, err := os.Stat(filepath.Join(dir, labFile)); !os.IsNotExist(err) {
		t.Errorf("%s still records a lab after a failed Up", labFile)
	}
}
