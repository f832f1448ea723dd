package gateway

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/snorkel-net/snorkel/packet"
)

// virtioNetHdrLen is the size of struct virtio_net_hdr, which a TUN device
// opened with IFF_VNET_HDR puts before every packet in both directions.
const virtioNetHdrLen = 10

// errBadOffload is what Read returns for a super-packet whose virtio-net
// header or headers it cannot cut: the packet is dropped, the device stays.
var errBadOffload = errors.New("gateway: TUN super-packet with a header that cannot be segmented")

// offloadTUN is a kernel TUN device with TCP (and, where the kernel has it,
// UDP) segmentation offload whose reads and writes the gateway makes
// itself. A read brings up to 64 KiB of one flow, which Read cuts into
// packets, the first in place; Write joins a flow's consecutive TCP
// segments back into one super-packet per write. The system calls are raw:
// the runtime's scheduler is not told of them, so a call that returns at
// once (nearly all of them) hands no processor to another thread, and a
// read with nothing to return waits in the poller. The embedded device,
// made by wireguard-go, keeps the name, MTU, events and closing.
type offloadTUN struct {
	tun.Device
	rc     syscall.RawConn
	closed atomic.Bool

	// Read's state; only the read loop reads.
	rhdr   [virtioNetHdrLen]byte
	riov   [2]unix.Iovec
	rn     int
	rerrno unix.Errno
	readFn func(fd uintptr) bool
	rest   superPacket // the segments of the last read not returned yet

	wmu     sync.Mutex // Write's state: the read loop and receivers write
	gro     packet.Coalescer
	wbufs   [][]byte
	wsizes  []int
	wcur    []byte
	werrno  unix.Errno
	writeFn func(fd uintptr) bool
}

// superPacket is a super-packet with more segments than a read's buffers:
// a TCP flow whose segment size is small (Linux sends with an MSS down to
// 48 bytes) still brings up to 64 KiB per read. It is kept, in memory of
// its own, and handed out over the following reads.
type superPacket struct {
	pkt            []byte
	proto          uint8
	l4, size, next int
	segments       int
}

// take cuts the next segments of s into bufs and reports how many.
func (s *superPacket) take(bufs [][]byte, sizes []int, offset int) int {
	n := packet.SegmentFrom(s.pkt, s.proto, s.l4, s.size, s.next, bufs, sizes, offset)
	s.next += n
	if n == 0 || s.next >= s.segments {
		s.pkt = s.pkt[:0]
	}
	return n
}

// withOffloads returns dev with the gateway's own I/O when dev is a kernel
// TUN with the virtio-net header, and dev itself otherwise.
func withOffloads(dev tun.Device) (tun.Device, error) {
	nt, ok := dev.(*tun.NativeTun)
	if !ok || dev.BatchSize() <= 1 {
		return dev, nil
	}
	rc, err := nt.File().SyscallConn()
	if err != nil {
		return nil, err
	}
	d := &offloadTUN{Device: dev, rc: rc}
	d.readFn = d.read
	d.writeFn = d.write
	return d, nil
}

// Read reads one packet or super-packet into bufs[0][offset:] and cuts a
// super-packet into bufs[0:n], one segment per buffer. Segments that do
// not fit come from the following calls, before the device is read again.
func (d *offloadTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(d.rest.pkt) > 0 {
		if n := d.rest.take(bufs, sizes, offset); n > 0 {
			return n, nil
		}
		return 0, errBadOffload
	}
	buf := bufs[0][offset:]
	d.riov[0] = unix.Iovec{Base: &d.rhdr[0]}
	d.riov[0].SetLen(virtioNetHdrLen)
	d.riov[1] = unix.Iovec{Base: &buf[0]}
	d.riov[1].SetLen(len(buf))
	if err := d.rc.Read(d.readFn); err != nil {
		return 0, d.closedErr(err)
	}
	d.riov[1].Base = nil
	if d.rerrno != 0 {
		return 0, d.closedErr(d.rerrno)
	}
	if d.rn < virtioNetHdrLen {
		return 0, errBadOffload
	}
	pkt := buf[:d.rn-virtioNetHdrLen]
	h := &d.rhdr
	flags, gsoType := h[0], h[1]
	gsoSize := int(binary.NativeEndian.Uint16(h[4:]))
	csumStart := int(binary.NativeEndian.Uint16(h[6:]))
	csumOffset := int(binary.NativeEndian.Uint16(h[8:]))
	var proto uint8
	switch gsoType {
	case unix.VIRTIO_NET_HDR_GSO_NONE:
		if flags&unix.VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 && !packet.CompleteChecksum(pkt, csumStart, csumOffset) {
			return 0, errBadOffload
		}
		sizes[0] = len(pkt)
		return 1, nil
	case unix.VIRTIO_NET_HDR_GSO_TCPV4, unix.VIRTIO_NET_HDR_GSO_TCPV6:
		proto = packet.ProtoTCP
	case unix.VIRTIO_NET_HDR_GSO_UDP_L4:
		proto = packet.ProtoUDP
	default:
		return 0, errBadOffload
	}
	segments := packet.Segments(pkt, proto, csumStart, gsoSize)
	if segments > min(len(bufs), len(sizes)) {
		d.rest = superPacket{pkt: append(d.rest.pkt[:0], pkt...), proto: proto, l4: csumStart, size: gsoSize, segments: segments}
		if n := d.rest.take(bufs, sizes, offset); n > 0 {
			return n, nil
		}
		return 0, errBadOffload
	}
	n := packet.Segment(pkt, proto, csumStart, gsoSize, bufs, sizes, offset)
	if n == 0 {
		return 0, errBadOffload
	}
	return n, nil
}

// read is the RawConn callback of Read: false waits for the device to
// become readable.
func (d *offloadTUN) read(fd uintptr) bool {
	for {
		r, _, e := unix.RawSyscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&d.riov[0])), 2)
		switch e {
		case 0:
			d.rn, d.rerrno = int(r), 0
			return true
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			d.rerrno = e
			return true
		}
	}
}

// Write joins what it can of bufs[i][offset:] and writes each resulting
// packet with its virtio-net header in the offset bytes before it. The
// joined payloads go into the first segment's buffer, up to its capacity.
func (d *offloadTUN) Write(bufs [][]byte, offset int) (int, error) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	d.wbufs, d.wsizes = d.wbufs[:0], d.wsizes[:0]
	for _, b := range bufs {
		d.wbufs = append(d.wbufs, b[:cap(b)])
		d.wsizes = append(d.wsizes, len(b)-offset)
	}
	var errs error
	for _, s := range d.gro.Coalesce(d.wbufs, d.wsizes, offset) {
		b := d.wbufs[s.Index][offset-virtioNetHdrLen : offset+s.Len]
		h := b[:virtioNetHdrLen]
		clear(h)
		if s.Segments > 1 {
			pkt := b[virtioNetHdrLen:]
			h[0] = unix.VIRTIO_NET_HDR_F_NEEDS_CSUM
			h[1] = unix.VIRTIO_NET_HDR_GSO_TCPV4
			if pkt[0]>>4 == 6 {
				h[1] = unix.VIRTIO_NET_HDR_GSO_TCPV6
			}
			binary.NativeEndian.PutUint16(h[2:], uint16(s.L4+int(pkt[s.L4+12]>>4)*4))
			binary.NativeEndian.PutUint16(h[4:], uint16(s.SegmentSize))
			binary.NativeEndian.PutUint16(h[6:], uint16(s.L4))
			binary.NativeEndian.PutUint16(h[8:], 16) // the TCP checksum field
		}
		d.wcur, d.werrno = b, 0
		err := d.rc.Write(d.writeFn)
		if err == nil && d.werrno != 0 {
			err = d.werrno
		}
		if err != nil {
			if err = d.closedErr(err); errors.Is(err, os.ErrClosed) {
				d.wcur = nil
				return 0, err
			}
			errs = errors.Join(errs, err)
		}
	}
	d.wcur = nil
	clear(d.wbufs)
	return len(bufs), errs
}

// write is the RawConn callback of Write.
func (d *offloadTUN) write(fd uintptr) bool {
	for {
		_, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&d.wcur[0])), uintptr(len(d.wcur)))
		switch e {
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			d.werrno = e
			return true
		}
	}
}

// Close closes the device; reads and writes then return os.ErrClosed.
func (d *offloadTUN) Close() error {
	d.closed.Store(true)
	return d.Device.Close()
}

// closedErr turns what a read or write of a closed device returns, a
// closed file's error or EBADFD from a TUN whose interface is gone, into
// os.ErrClosed.
func (d *offloadTUN) closedErr(err error) error {
	if d.closed.Load() || errors.Is(err, unix.EBADFD) || errors.Is(err, os.ErrClosed) {
		return os.ErrClosed
	}
	return err
}
