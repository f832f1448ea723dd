//go:build !linux

package natengine

// indexOnHeap tells BenchmarkMemoryPerFlow whether HeapAlloc already counts
// the index: here newIndex allocates it on the heap.
const indexOnHeap = true
