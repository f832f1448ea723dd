package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
)

// keepRuntime puts the GC target and GOMAXPROCS back after a test of
// tuneRuntime, and starts it from Go's default GC target and the 4
// processors Go would give itself on 4 CPUs, so that the test sees a
// change on a machine of any size.
func keepRuntime(t *testing.T) {
	gc := debug.SetGCPercent(100)
	procs := runtime.GOMAXPROCS(4)
	t.Cleanup(func() {
		debug.SetGCPercent(gc)
		runtime.GOMAXPROCS(procs)
	})
}

func TestTuneRuntimeSetsTheDataPlaneTargets(t *testing.T) {
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	t.Setenv("GOMAXPROCS", "")
	os.Unsetenv("GOMAXPROCS")
	keepRuntime(t)
	procs := runtime.GOMAXPROCS(0)
	tuneRuntime()
	if got := debug.SetGCPercent(100); got != dataPlaneGCPercent {
		t.Errorf("GC percent after tuneRuntime with GOGC unset: %d, want %d", got, dataPlaneGCPercent)
	}
	if got, want := runtime.GOMAXPROCS(0), dataPlaneProcs(procs); got != want {
		t.Errorf("GOMAXPROCS after tuneRuntime with GOMAXPROCS unset, from %d: %d, want %d", procs, got, want)
	}
}

func TestTuneRuntimeLeavesExplicitSettings(t *testing.T) {
	t.Setenv("GOGC", "100")
	t.Setenv("GOMAXPROCS", "2")
	keepRuntime(t)
	procs := runtime.GOMAXPROCS(0)
	tuneRuntime()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent after tuneRuntime with GOGC=100: %d, want 100 (GOGC is the user's)", got)
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS after tuneRuntime with GOMAXPROCS set: %d, want it left at %d (GOMAXPROCS is the user's)", got, procs)
	}
}

func TestDataPlaneProcsLeavesOneCPU(t *testing.T) {
	for _, tt := range []struct{ n, want int }{{1, 1}, {2, 1}, {3, 2}, {8, 7}, {64, 63}} {
		if got := dataPlaneProcs(tt.n); got != tt.want {
			t.Errorf("dataPlaneProcs(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}
