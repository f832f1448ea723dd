package udp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// KernelDrops is how many datagrams the kernel discarded at the port's
// sockets before a receive loop read them (transport.KernelDropReason). It
// is the sockets' own count (SO_MEMINFO's SK_MEMINFO_DROPS, the d of
// `ss -uam`), widened from the kernel's 32 bits, so it keeps counting past
// 2^32 if read at least once per 2^32 drops. A closed Conn keeps its last
// count.
func (c *Conn) KernelDrops() uint64 {
	c.dropsMu.Lock()
	defer c.dropsMu.Unlock()
	var n uint64
	for _, s := range c.socks {
		if d, ok := s.kernelDrops(); ok {
			s.drops += uint64(d - s.lastDrops)
			s.lastDrops = d
		}
		n += s.drops
	}
	return n
}

// kernelDrops reads the socket's 32-bit drop count; false if the socket is
// closed.
func (s *socket) kernelDrops() (uint32, bool) {
	var mi [unix.SK_MEMINFO_VARS]uint32
	l := uint32(unsafe.Sizeof(mi))
	var e unix.Errno
	err := s.rc.Control(func(fd uintptr) {
		_, _, e = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mi[0])), uintptr(unsafe.Pointer(&l)), 0)
	})
	if err != nil || e != 0 || l < (unix.SK_MEMINFO_DROPS+1)*4 {
		return 0, false
	}
	return mi[unix.SK_MEMINFO_DROPS], true
}
