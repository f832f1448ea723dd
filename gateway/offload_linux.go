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
	wsizes  []int
	whdr    [virtioNetHdrLen]byte
	wiov    []unix.Iovec // the header and the pieces of the packet written
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

// tunPacket is what one read of the device brought: a packet, or, with
// size > 0, a super-packet of proto whose transport header starts at l4 and
// whose segments carry size payload bytes each. checked says the checksums
// of a packet are known to verify: the kernel verified them, or left them
// to the read, which computed them. Those of a super-packet's segments are
// computed by the cut.
type tunPacket struct {
	pkt      []byte
	proto    uint8
	l4, size int
	checked  bool
}

// Read reads one packet or super-packet into bufs[0][offset:] and cuts a
// super-packet into bufs[0:n], one segment per buffer. Segments that do
// not fit come from the following calls, before the device is read again.
func (d *offloadTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if d.pending() {
		return d.takeRest(bufs, sizes, offset)
	}
	tp, err := d.readPacket(bufs[0][offset:])
	if err != nil {
		return 0, err
	}
	return d.cut(tp, bufs, sizes, offset)
}

// pending reports whether segments of the last super-packet are still to
// be handed out.
func (d *offloadTUN) pending() bool { return len(d.rest.pkt) > 0 }

func (d *offloadTUN) takeRest(bufs [][]byte, sizes []int, offset int) (int, error) {
	if n := d.rest.take(bufs, sizes, offset); n > 0 {
		return n, nil
	}
	return 0, errBadOffload
}

// readPacket reads one packet or super-packet into buf, completing a
// packet's partial checksum; a super-packet's checksums are left to the
// cut.
func (d *offloadTUN) readPacket(buf []byte) (tunPacket, error) {
	d.riov[0], d.riov[1] = iovec(d.rhdr[:]), iovec(buf)
	if err := d.rc.Read(d.readFn); err != nil {
		return tunPacket{}, d.closedErr(err)
	}
	d.riov[1].Base = nil
	if d.rerrno != 0 {
		return tunPacket{}, d.closedErr(d.rerrno)
	}
	if d.rn < virtioNetHdrLen {
		return tunPacket{}, errBadOffload
	}
	pkt := buf[:d.rn-virtioNetHdrLen]
	h := &d.rhdr
	flags, gsoType := h[0], h[1]
	gsoSize := int(binary.NativeEndian.Uint16(h[4:]))
	csumStart := int(binary.NativeEndian.Uint16(h[6:]))
	csumOffset := int(binary.NativeEndian.Uint16(h[8:]))
	switch gsoType {
	case unix.VIRTIO_NET_HDR_GSO_NONE:
		if flags&unix.VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 && !packet.CompleteChecksum(pkt, csumStart, csumOffset) {
			return tunPacket{}, errBadOffload
		}
		return tunPacket{pkt: pkt, checked: flags&(unix.VIRTIO_NET_HDR_F_NEEDS_CSUM|unix.VIRTIO_NET_HDR_F_DATA_VALID) != 0}, nil
	case unix.VIRTIO_NET_HDR_GSO_TCPV4, unix.VIRTIO_NET_HDR_GSO_TCPV6:
		return tunPacket{pkt: pkt, proto: packet.ProtoTCP, l4: csumStart, size: gsoSize}, nil
	case unix.VIRTIO_NET_HDR_GSO_UDP_L4:
		return tunPacket{pkt: pkt, proto: packet.ProtoUDP, l4: csumStart, size: gsoSize}, nil
	}
	return tunPacket{}, errBadOffload
}

// cut puts tp, read into bufs[0][offset:], into bufs as packets: itself, or
// its segments. Segments that do not fit are kept, in memory of their own,
// for the following Reads.
func (d *offloadTUN) cut(tp tunPacket, bufs [][]byte, sizes []int, offset int) (int, error) {
	if tp.size == 0 {
		sizes[0] = len(tp.pkt)
		return 1, nil
	}
	segments := packet.Segments(tp.pkt, tp.proto, tp.l4, tp.size)
	if segments > min(len(bufs), len(sizes)) {
		d.rest = superPacket{pkt: append(d.rest.pkt[:0], tp.pkt...), proto: tp.proto, l4: tp.l4, size: tp.size, segments: segments}
		return d.takeRest(bufs, sizes, offset)
	}
	n := packet.Segment(tp.pkt, tp.proto, tp.l4, tp.size, bufs, sizes, offset)
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
// packet with its virtio-net header, gathered by the kernel from the
// buffers of its segments: nothing is copied, and nothing before offset is
// written.
func (d *offloadTUN) Write(bufs [][]byte, offset int) (int, error) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	d.wsizes = d.wsizes[:0]
	for _, b := range bufs {
		d.wsizes = append(d.wsizes, len(b)-offset)
	}
	err := d.writeLocked(bufs, d.wsizes, offset, d.gro.Coalesce(bufs, d.wsizes, offset))
	if errors.Is(err, os.ErrClosed) {
		return 0, err
	}
	return len(bufs), err
}

// writeSupers writes the packets supers of bufs[i][offset:offset+sizes[i]],
// as a Coalescer joined and finished them.
func (d *offloadTUN) writeSupers(bufs [][]byte, sizes []int, offset int, supers []packet.Super) error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	return d.writeLocked(bufs, sizes, offset, supers)
}

// writeLocked writes supers, one gathering write each; it goes on past a
// packet the device refuses, and stops when the device is closed.
func (d *offloadTUN) writeLocked(bufs [][]byte, sizes []int, offset int, supers []packet.Super) error {
	defer func() { clear(d.wiov[:cap(d.wiov)]) }()
	var errs error
	for _, s := range supers {
		h := &d.whdr
		clear(h[:])
		pkt := bufs[s.Index][offset : offset+sizes[s.Index]]
		if s.Segments > 1 {
			h[0] = unix.VIRTIO_NET_HDR_F_NEEDS_CSUM
			h[1] = unix.VIRTIO_NET_HDR_GSO_TCPV4
			if pkt[0]>>4 == 6 {
				h[1] = unix.VIRTIO_NET_HDR_GSO_TCPV6
			}
			binary.NativeEndian.PutUint16(h[2:], uint16(s.Header))
			binary.NativeEndian.PutUint16(h[4:], uint16(s.SegmentSize))
			binary.NativeEndian.PutUint16(h[6:], uint16(s.L4))
			binary.NativeEndian.PutUint16(h[8:], 16) // the TCP checksum field
		}
		d.wiov = append(d.wiov[:0], iovec(h[:]), iovec(pkt))
		for _, j := range s.Joined {
			d.wiov = append(d.wiov, iovec(bufs[j][offset+s.Header:offset+sizes[j]]))
		}
		d.werrno = 0
		err := d.rc.Write(d.writeFn)
		if err == nil && d.werrno != 0 {
			err = d.werrno
		}
		if err != nil {
			if err = d.closedErr(err); errors.Is(err, os.ErrClosed) {
				return err
			}
			errs = errors.Join(errs, err)
		}
	}
	return errs
}

// iovec is the entry of a gather list for b.
func iovec(b []byte) unix.Iovec {
	v := unix.Iovec{Base: unsafe.SliceData(b)}
	v.SetLen(len(b))
	return v
}

// write is the RawConn callback of Write.
func (d *offloadTUN) write(fd uintptr) bool {
	for {
		_, _, e := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&d.wiov[0])), uintptr(len(d.wiov)))
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
