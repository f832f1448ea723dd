package natengine

import (
	"sync/atomic"
	"syscall"
	"unsafe"
)

// newIndex returns n zeroed index slots in an anonymous private mapping,
// outside the Go heap, and the function that unmaps them. The collector's
// pacer grows its goal with the live heap, so a 32 MiB index on the heap
// would let a quarter as much again of garbage (at GOGC=25) pile up before
// each collection; and a mapping stays unbacked until a flow touches its
// page, where a heap allocation may be recycled memory, zeroed in full.
func newIndex(n int) ([]atomic.Uint64, func(), error) {
	m, err := syscall.Mmap(-1, 0, n*8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, nil, err
	}
	return unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(unsafe.SliceData(m))), n), func() { _ = syscall.Munmap(m) }, nil
}
