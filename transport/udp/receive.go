package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/snorkel-net/snorkel/transport"
)

// Handler takes one received batch. Datagram i is
// bufs[i][offset:offset+sizes[i]], where offset is the one given to Start;
// srcs[i] is its sender. Entries with sizes[i] == 0 carry nothing and are
// to be skipped. The segments of a coalesced datagram lie where the kernel
// wrote them, end to end in one buffer, so the bytes of bufs[i] before
// offset may be the end of the datagram before it: the handler writes only
// within its datagrams. It may reslice the entries of bufs, but must not
// keep any of them after it returns.
type Handler func(bufs [][]byte, sizes []int, srcs []netip.AddrPort)

// ctrlWords is the size, in 8-byte words so that the kernel's control
// message headers land aligned, of each message's control buffer: room for
// one UDP_GRO or UDP_SEGMENT message.
const ctrlWords = 4

// batch is the memory of one receive loop: a buffer and a message header
// per datagram a call may read, and what the handler is given. It lives as
// long as the loop and returns to batchPool when the loop ends.
type batch struct {
	bufs  [BatchSize][]byte // whole buffers, len transport.BufSize
	msgs  [BatchSize]unix.Mmsghdr
	iovs  [BatchSize]unix.Iovec
	names [BatchSize]unix.RawSockaddrInet6
	ctrl  [BatchSize][ctrlWords]uint64

	out   [BatchSize][]byte
	sizes [BatchSize]int
	srcs  [BatchSize]netip.AddrPort

	offset int
	n      int // datagrams the last read returned
	errno  unix.Errno
	readFn func(fd uintptr) bool
}

var batchPool = sync.Pool{New: func() any {
	b := new(batch)
	for i := range b.bufs {
		b.bufs[i] = make([]byte, transport.BufSize)
	}
	b.readFn = b.read
	return b
}}

// setOffset points every message at its buffer from offset on.
func (b *batch) setOffset(offset int) {
	b.offset = offset
	for i := range b.msgs {
		b.iovs[i] = unix.Iovec{Base: &b.bufs[i][offset]}
		b.iovs[i].SetLen(transport.BufSize - offset)
		h := &b.msgs[i].Hdr
		*h = unix.Msghdr{
			Name:    (*byte)(unsafe.Pointer(&b.names[i])),
			Iov:     &b.iovs[i],
			Control: (*byte)(unsafe.Pointer(&b.ctrl[i])),
		}
		h.SetIovlen(1)
	}
	b.n = BatchSize
	b.reset()
}

// reset restores what the last read changed in its messages' headers.
func (b *batch) reset() {
	for i := range b.n {
		h := &b.msgs[i].Hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.SetControllen(ctrlWords * 8)
		h.Flags = 0
		b.msgs[i].Len = 0
	}
	b.n = 0
}

// read is the RawConn callback of the loop: it returns false to wait until
// the socket is readable.
func (b *batch) read(fd uintptr) bool {
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.msgs[0])), BatchSize, 0, 0, 0)
		switch e {
		case 0:
			b.n, b.errno = int(r), 0
			return true
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			b.errno = e
			return true
		}
	}
}

// dispatch gives h the datagrams the last read returned, in order, with each
// coalesced datagram cut into its segments, none copied: segment j is
// handed as its buffer from j segment sizes on, so that it lies at offset.
// A call takes at most BatchSize datagrams, so a batch whose segments
// exceed it takes more calls. (The kernel coalesces at most 64 segments,
// but nothing here relies on it.)
func (b *batch) dispatch(h Handler) {
	k := 0
	for i := range b.n {
		m := &b.msgs[i]
		size := int(m.Len)
		src, ok := sockaddr(&b.names[i], m.Hdr.Namelen)
		if !ok {
			size = 0
		}
		seg := groSize(b.ctrlBytes(i, int(m.Hdr.Controllen)))
		segs := 1
		if seg > 0 && size > seg {
			segs = (size + seg - 1) / seg
		} else {
			seg = size
		}
		// A datagram's segments go in one call where they fit, so that
		// the handler sees its run whole (the gateway joins it again).
		if k > 0 && k+segs > BatchSize {
			h(b.out[:k], b.sizes[:k], b.srcs[:k])
			k = 0
		}
		for j := range segs {
			if k == BatchSize {
				h(b.out[:k], b.sizes[:k], b.srcs[:k])
				k = 0
			}
			b.out[k], b.sizes[k], b.srcs[k] = b.bufs[i][j*seg:], min(seg, size-j*seg), src
			k++
		}
	}
	if k > 0 {
		h(b.out[:k], b.sizes[:k], b.srcs[:k])
	}
}

// ctrlBytes is the control data the kernel returned with message i.
func (b *batch) ctrlBytes(i, n int) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&b.ctrl[i])), ctrlWords*8)[:min(n, ctrlWords*8)]
}

// groSize returns the segment size of a UDP_GRO control message in c, or 0
// when the datagram was not coalesced.
func groSize(c []byte) int {
	for len(c) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(c) {
			return 0
		}
		data := c[unix.CmsgLen(0):l]
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO {
			// The kernel writes an int; a uint16 is all a segment needs.
			switch {
			case len(data) >= 4:
				return int(*(*int32)(unsafe.Pointer(&data[0])))
			case len(data) >= 2:
				return int(*(*uint16)(unsafe.Pointer(&data[0])))
			}
			return 0
		}
		c = c[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(c)):]
	}
	return 0
}

// sockaddr reads the sender's address that the kernel wrote into sa.
func sockaddr(sa *unix.RawSockaddrInet6, n uint32) (netip.AddrPort, bool) {
	switch {
	case sa.Family == unix.AF_INET && n >= unix.SizeofSockaddrInet4:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port), true
	case sa.Family == unix.AF_INET6 && n >= unix.SizeofSockaddrInet6:
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		// Callers key peers on plain IPv4.
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port), true
	}
	return netip.AddrPort{}, false
}

// receiveBackoff bounds how long a loop sleeps after a run of read errors
// that are not the socket closing, so a persistent error does not spin.
const receiveBackoff = 100 * time.Millisecond

// logInterval is the least time between two logged read errors of a loop.
const logInterval = time.Second

// Start runs one receive loop per socket family, each calling h with the
// batches it reads. Datagrams are written at offset into their buffers, so
// that a caller can strip its headers and leave room before the payload;
// offset is at most transport.Headroom. Start may be called once.
func (c *Conn) Start(offset int, h Handler) error {
	if offset < 0 || offset > transport.Headroom {
		return fmt.Errorf("udp: receive offset %d: must be within 0..%d", offset, transport.Headroom)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return ErrClosed
	}
	if c.started {
		return errors.New("udp: receive loops already started")
	}
	c.started = true
	for _, s := range c.socks {
		c.loops.Add(1)
		go c.receive(s, offset, h)
	}
	return nil
}

func (c *Conn) receive(s *socket, offset int, h Handler) {
	defer c.loops.Done()
	b := batchPool.Get().(*batch)
	defer batchPool.Put(b)
	b.setOffset(offset)
	var streak int
	var logged time.Time
	for {
		b.reset()
		err := s.rc.Read(b.readFn)
		if err == nil && b.errno != 0 {
			err = b.errno
		}
		if err != nil {
			if c.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			if now := time.Now(); now.Sub(logged) >= logInterval {
				logged = now
				slog.Warn("udp: receive failed; retrying", "port", c.port, "ipv6", s.v6, "err", err)
			}
			streak++
			time.Sleep(min(time.Duration(streak)*10*time.Millisecond, receiveBackoff))
			continue
		}
		streak = 0
		b.dispatch(h)
	}
}
