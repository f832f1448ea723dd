package topo

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestValidPrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"snk-", true},
		{"t12345-", true},
		{"a", true},
		{"", false},
		{"-snk", false},
		{"Snk-", false},
		{"snk/", false},
		{"snk lab", false},
		{"abcdefghijklmnopq", false},
	} {
		if err := ValidPrefix(tc.prefix); (err == nil) != tc.ok {
			t.Errorf("ValidPrefix(%q) = %v, want ok=%v", tc.prefix, err, tc.ok)
		}
	}
}

func TestRouteStringNamesGatewayAndDevice(t *testing.T) {
	for _, tc := range []struct {
		r    Route
		want string
	}{
		{Route{Dst: netip.MustParsePrefix("10.9.0.0/16"), Via: netip.MustParseAddr("198.18.0.2")}, "10.9.0.0/16 via 198.18.0.2"},
		{Route{Dst: netip.MustParsePrefix("10.8.0.11/32"), Dev: "v-c1-pod-1"}, "10.8.0.11/32 dev v-c1-pod-1"},
		{Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: netip.MustParseAddr("10.8.0.1"), Dev: "eth0"}, "0.0.0.0/0 via 10.8.0.1 dev eth0"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestProcStatReadsOwnProcess(t *testing.T) {
	st, state, err := procStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st == 0 || state == 'Z' {
		t.Errorf("procStat(self) = start %d state %c; want a running process with a start time", st, state)
	}
}

func TestLoadedProcessWithOtherStartTimeIsNotAlive(t *testing.T) {
	st, _, err := procStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	self := &Process{Name: "self", PID: os.Getpid(), StartTime: st}
	if !self.Alive() {
		t.Error("a loaded process with the right start time should be alive")
	}
	reused := &Process{Name: "reused", PID: os.Getpid(), StartTime: st + 1}
	if reused.Alive() {
		t.Error("a PID whose start time differs from the record must count as a different process")
	}
	// Stop must not signal a process whose PID was reused: this test
	// process would die if it did.
	if err := reused.Stop(0); err != nil {
		t.Error(err)
	}
}

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "state.json")
	tp, err := New(Options{Prefix: "tstate-", LogDir: dir, StateFile: file, Binary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	// Recorded without creating anything: a namespace that does not exist
	// and a process that is not running, as after a crash.
	tp.nss = append(tp.nss, &NS{name: "tstate-gone", topo: tp, handle: -1})
	tp.procs = append(tp.procs, &Process{Name: "gw", NS: "tstate-gone", PID: 1 << 30, StartTime: 7, Log: tp.LogPath("gw")})
	if err := tp.save(); err != nil {
		t.Fatal(err)
	}
	got, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	want := tp.State()
	gs := got.State()
	if gs.Prefix != want.Prefix || gs.Binary != want.Binary || len(gs.Namespaces) != 1 || gs.Namespaces[0] != "tstate-gone" ||
		len(gs.Processes) != 1 || gs.Processes[0] != want.Processes[0] {
		t.Fatalf("loaded state %+v, want %+v", gs, want)
	}
	if err := got.Close(); err != nil {
		t.Fatalf("Close of a topology whose namespaces and processes are gone: %v", err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("state file still there after a clean Close: %v", err)
	}
}

// TestConcurrentSaves saves from many goroutines at once, as processes
// started in parallel do: every save succeeds and the file holds the last
// state.
func TestConcurrentSaves(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "state.json")
	tp, err := New(Options{Prefix: "tsave-", LogDir: dir, StateFile: file, Binary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Go(func() {
			tp.mu.Lock()
			tp.procs = append(tp.procs, &Process{Name: fmt.Sprintf("p%d", i), NS: "tsave-x", PID: 1 << 30})
			tp.mu.Unlock()
			errs <- tp.save()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.State().Processes); n != 32 {
		t.Errorf("the state file records %d processes, want 32", n)
	}
}
