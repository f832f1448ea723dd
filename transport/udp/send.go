package udp

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxSegments is the most datagrams one GSO message carries (the kernel's
// UDP_MAX_SEGMENTS on the oldest kernels that have GSO).
const maxSegments = 64

// segmentCmsgSpace is the room of a UDP_SEGMENT control message: a header
// and a uint16, aligned.
var segmentCmsgSpace = unix.CmsgSpace(2)

// maxPayload is the most UDP payload one message to addr can carry: what an
// IP packet's length field leaves after the IP and UDP headers.
func maxPayload(addr netip.Addr) int {
	if addr.Is4() {
		return 65535 - 20 - 8
	}
	return 65535 - 8
}

// sendScratch is the memory of one Send: the message headers, an iovec
// entry per datagram (a message's entries are consecutive), the control
// messages, and the destination. It is
// pooled, and its write method is bound once so that handing it to the
// socket's RawConn does not allocate.
type sendScratch struct {
	msgs [BatchSize]unix.Mmsghdr
	iovs [BatchSize]unix.Iovec
	ctrl [BatchSize][ctrlWords]uint64
	sa4  unix.RawSockaddrInet4
	sa6  unix.RawSockaddrInet6
	name *byte
	nlen uint32

	n, sent int
	errno   unix.Errno
	writeFn func(fd uintptr) bool
}

var sendPool = sync.Pool{New: func() any {
	sc := new(sendScratch)
	sc.writeFn = sc.write
	return sc
}}

// setDest makes addr:port the destination of the messages prepare builds.
func (sc *sendScratch) setDest(addr netip.Addr, port uint16) {
	if addr.Is4() {
		sc.sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: addr.As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sc.sa4.Port))[:], port)
		sc.name, sc.nlen = (*byte)(unsafe.Pointer(&sc.sa4)), unix.SizeofSockaddrInet4
		return
	}
	sc.sa6 = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: addr.As16()}
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sc.sa6.Port))[:], port)
	sc.name, sc.nlen = (*byte)(unsafe.Pointer(&sc.sa6)), unix.SizeofSockaddrInet6
}

// prepare builds the messages that send bufs and returns their number. With
// gso, a run of datagrams of the size of its first, optionally ended by one
// shorter, becomes one message of up to maxSegments datagrams and max
// bytes whose iovec has one entry per datagram, and a UDP_SEGMENT control
// message tells the kernel where to cut: the kernel gathers the run as it
// copies it in, so nothing is copied here.
func (sc *sendScratch) prepare(bufs [][]byte, gso bool, max int) int {
	n := 0
	for i := 0; i < len(bufs); n++ {
		first := i
		size := len(bufs[i])
		total := size
		i++
		for gso && size > 0 && i < len(bufs) && i-first < maxSegments {
			l := len(bufs[i])
			if l == 0 || l > size || total+l > max {
				break
			}
			total += l
			i++
			if l < size {
				break
			}
		}
		for k := first; k < i; k++ {
			sc.iovs[k] = unix.Iovec{}
			if len(bufs[k]) > 0 {
				sc.iovs[k].Base = &bufs[k][0]
				sc.iovs[k].SetLen(len(bufs[k]))
			}
		}
		h := &sc.msgs[n].Hdr
		*h = unix.Msghdr{Name: sc.name, Namelen: sc.nlen, Iov: &sc.iovs[first]}
		h.SetIovlen(i - first)
		if i-first > 1 {
			c := unsafe.Slice((*byte)(unsafe.Pointer(&sc.ctrl[n])), segmentCmsgSpace)
			hdr := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			hdr.Level, hdr.Type = unix.SOL_UDP, unix.UDP_SEGMENT
			hdr.SetLen(unix.CmsgLen(2))
			*(*uint16)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = uint16(size)
			h.Control = &c[0]
			h.SetControllen(segmentCmsgSpace)
		}
	}
	return n
}

// send writes the first n prepared messages on s.
func (sc *sendScratch) send(s *socket, n int) error {
	sc.n, sc.sent, sc.errno = n, 0, 0
	if err := s.rc.Write(sc.writeFn); err != nil {
		return err
	}
	if sc.errno != 0 {
		return sc.errno
	}
	return nil
}

// write is the RawConn callback of send: it returns false to wait until the
// socket is writable again.
func (sc *sendScratch) write(fd uintptr) bool {
	for sc.sent < sc.n {
		r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&sc.msgs[sc.sent])), uintptr(sc.n-sc.sent), 0, 0, 0)
		switch e {
		case 0:
			sc.sent += int(r)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			sc.errno = e
			return true
		}
	}
	return true
}

// clear drops the references to the caller's buffers of a send of n
// datagrams, so that the pool does not keep them alive.
func (sc *sendScratch) clear(n int) {
	for i := range n {
		sc.iovs[i].Base = nil
	}
}
