package main

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestTuneGCSetsTheDataPlaneTarget(t *testing.T) {
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	tuneGC()
	if got := debug.SetGCPercent(100); got != dataPlaneGCPercent {
		t.Fatalf("GC percent after tuneGC with GOGC unset: %d, want %d", got, dataPlaneGCPercent)
	}
}

func TestTuneGCLeavesAnExplicitGOGC(t *testing.T) {
	t.Setenv("GOGC", "100")
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	tuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent after tuneGC with GOGC=100: %d, want 100 (GOGC is the user's)", got)
	}
}
