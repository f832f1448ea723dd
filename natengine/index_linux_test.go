package natengine

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// indexOnHeap tells BenchmarkMemoryPerFlow whether HeapAlloc already counts
// the index: here it is mapped outside the heap (newIndex).
const indexOnHeap = false

// TestIndexIsMappedOutsideTheHeap checks that a default engine's 32 MiB
// index is not on the Go heap, where it would raise the collector's goal,
// and that dropped engines unmap theirs.
func TestIndexIsMappedOutsideTheHeap(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	base := vmSize(t)
	const engines = 64
	var keep []*Engine
	for range engines {
		e, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, e)
	}
	runtime.ReadMemStats(&after)
	index := uint64(len(keep[0].t.index)) * 8
	if index != 32<<20 {
		t.Fatalf("a default engine's index is %d bytes, want 32 MiB", index)
	}
	if grew := after.HeapAlloc - before.HeapAlloc; grew > engines*index/8 {
		t.Errorf("%d engines grew the heap by %d MiB: their indexes (%d MiB each) are on it", engines, grew>>20, index>>20)
	}
	if grew := vmSize(t) - base; grew < engines*index/2 {
		t.Errorf("%d engines grew the address space by %d MiB, want about %d", engines, grew>>20, engines*index>>20)
	}
	runtime.KeepAlive(keep)
	deadline := time.Now().Add(time.Minute)
	for vmSize(t) > base+engines*index/2 {
		if time.Now().After(deadline) {
			t.Fatalf("a minute after %d engines were dropped, the address space is %d MiB over what it was before them", engines, (vmSize(t)-base)>>20)
		}
		runtime.GC()
		runtime.Gosched()
	}
}

// vmSize is the process's virtual memory size, VmSize in /proc/self/status.
func vmSize(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmSize:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmSize in /proc/self/status")
	return 0
}
