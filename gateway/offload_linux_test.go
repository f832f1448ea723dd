package gateway

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/snorkel-net/snorkel/packet"
	"github.com/snorkel-net/snorkel/transport"
)

// hairpin turns the device's traffic back into the host: a packet to
// 10.9.0.11 returns as if 10.9.0.12 had sent it to the TUN's own address,
// and a packet to 10.9.0.12 as if from 10.9.0.11. A TCP connection to
// 10.9.0.11 thus reaches a local listener, and both directions cross the
// device's reads and writes. It counts the reads that brought a
// super-packet, and those that filled every buffer, and stops when the
// device closes.
func hairpin(dev tun.Device, local netip.Addr, c *readCounts, done chan<- error) {
	a11, a12 := netip.MustParseAddr("10.9.0.11"), netip.MustParseAddr("10.9.0.12")
	as16 := func(a netip.Addr) (b [16]byte) { // IPv4 in the first 4 bytes
		copy(b[:], a.AsSlice())
		return b
	}
	const off = transport.Headroom
	n := dev.BatchSize()
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, transport.BufSize)
	}
	sizes := make([]int, n)
	var p packet.Parsed
	stop := func(err error) {
		if errors.Is(err, os.ErrClosed) {
			err = nil
		}
		done <- err
	}
	for {
		cnt, err := dev.Read(bufs, sizes, off)
		if err != nil {
			stop(err)
			return
		}
		if cnt > 1 {
			c.supers.Add(1)
		}
		if cnt == n {
			c.full.Add(1)
		}
		var out [][]byte
		for i := range cnt {
			pkt := bufs[i][off : off+sizes[i]]
			if p.Decode(pkt) != packet.DropNone || p.Version != 4 {
				continue
			}
			src := a12
			if p.DstAddr() == a12 {
				src = a11
			} else if p.DstAddr() != a11 {
				continue
			}
			packet.SetSrcAddr(pkt, &p, as16(src))
			packet.SetDstAddr(pkt, &p, as16(local))
			out = append(out, bufs[i][:off+sizes[i]])
		}
		if len(out) > 0 {
			if _, err := dev.Write(out, off); err != nil {
				stop(err)
				return
			}
		}
	}
}

// openOffloadTUN opens the test TUN, with the remote CIDRs routed into it,
// and checks that the gateway does its own I/O on it. It returns nil after
// reporting why not.
func openOffloadTUN(t *testing.T) (tun.Device, *System) {
	c := validConfig()
	c.TUN = TUN{Name: "snk-test0", Address: "10.8.255.254"}
	if err := c.Validate(); err != nil {
		t.Error(err)
		return nil, nil
	}
	dev, sys, err := OpenTUN(&c, 1440)
	if err != nil {
		t.Error(err)
		return nil, nil
	}
	if _, ok := dev.(*offloadTUN); !ok {
		dev.Close()
		sys.Undo()
		t.Errorf("OpenTUN gave a %T, want the gateway's own I/O on a TUN with offloads", dev)
		return nil, nil
	}
	return dev, sys
}

// readCounts is what hairpin counts of the device's reads.
type readCounts struct {
	supers atomic.Int64 // reads that returned more than one packet
	full   atomic.Int64 // reads that filled every buffer
}

// inHairpin runs f in a fresh network namespace with the test TUN and a
// hairpin on it, and closes both when f returns.
func inHairpin(t *testing.T, f func(reads *readCounts)) {
	inFreshNetns(t, func() {
		dev, sys := openOffloadTUN(t)
		if dev == nil {
			return
		}
		defer sys.Undo()
		var reads readCounts
		defer startHairpin(t, dev, &reads)()
		f(&reads)
	})
}

// startHairpin runs hairpin on dev until the returned function closes it.
func startHairpin(t *testing.T, dev tun.Device, c *readCounts) (stop func()) {
	done := make(chan error, 1)
	go hairpin(dev, netip.MustParseAddr("10.8.255.254"), c, done)
	return func() {
		dev.Close()
		if err := <-done; err != nil {
			t.Errorf("hairpin: %v", err)
		}
	}
}

func TestOffloadTUNCutsUDPSuperPackets(t *testing.T) {
	inHairpin(t, func(reads *readCounts) {

		ln, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 8, 255, 254), Port: 9})
		if err != nil {
			t.Error(err)
			return
		}
		defer ln.Close()
		conn, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 9, 0, 11), Port: 9})
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		rc, err := conn.SyscallConn()
		if err != nil {
			t.Error(err)
			return
		}
		var serr error
		rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, 1000) })
		if serr != nil {
			t.Errorf("set UDP_SEGMENT (Linux 4.18 and later): %v", serr)
			return
		}
		// One send of ten datagrams' worth, the last shorter: the kernel
		// hands the TUN one UDP super-packet.
		msg := make([]byte, 9500)
		for i := range msg {
			msg[i] = byte(i / 1000)
		}
		if _, err := conn.Write(msg); err != nil {
			t.Errorf("send with UDP_SEGMENT: %v", err)
			return
		}
		ln.SetReadDeadline(time.Now().Add(time.Minute))
		buf := make([]byte, 2000)
		for i := range 10 {
			n, _, err := ln.ReadFromUDP(buf)
			if err != nil {
				t.Errorf("datagram %d: %v", i, err)
				return
			}
			want := min(1000, len(msg)-i*1000)
			if n != want || !bytes.Equal(buf[:n], msg[i*1000:i*1000+want]) {
				t.Errorf("datagram %d: %d bytes starting %x, want %d bytes of %#x", i, n, buf[:min(n, 4)], want, i)
			}
		}
		if reads.supers.Load() == 0 {
			t.Error("no read brought a super-packet: the device's UDP segmentation offload is off")
		}
	})
}

func TestOffloadTUNCarriesTCPBothWays(t *testing.T) {
	for _, tc := range []struct {
		name string
		mss  int // 0: the route's
	}{
		{name: "full-sized segments"},
		// 64 KiB in 200-byte segments is more segments than a read has
		// buffers: the rest come from the next reads.
		{name: "a small MSS", mss: 200},
	} {
		t.Run(tc.name, func(t *testing.T) { checkTCPEcho(t, tc.mss) })
	}
}

// checkTCPEcho sends 16 MiB to an echo server through the hairpin, with
// the client's MSS set to mss unless it is 0, and checks what comes back.
func checkTCPEcho(t *testing.T, mss int) {
	inHairpin(t, func(reads *readCounts) {

		ln, err := net.Listen("tcp4", "10.8.255.254:7")
		if err != nil {
			t.Error(err)
			return
		}
		defer ln.Close()
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			io.Copy(conn, conn) // echo
		}()
		d := net.Dialer{Timeout: time.Minute}
		if mss > 0 {
			d.Control = func(_, _ string, c syscall.RawConn) error {
				var serr error
				if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG, mss) }); err != nil {
					return err
				}
				return serr
			}
		}
		conn, err := d.Dial("tcp4", "10.9.0.11:7")
		if err != nil {
			t.Errorf("dial through the hairpin: %v", err)
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(2 * time.Minute))

		sent := make([]byte, 16<<20)
		for i := range sent {
			sent[i] = byte(i*31 + i>>11)
		}
		werr := make(chan error, 1)
		go func() {
			_, err := conn.Write(sent)
			werr <- err
		}()
		got := make([]byte, len(sent))
		if _, err := io.ReadFull(conn, got); err != nil {
			t.Errorf("read the echo: %v", err)
			return
		}
		if err := <-werr; err != nil {
			t.Errorf("write: %v", err)
		}
		if !bytes.Equal(got, sent) {
			t.Error("the echo differs from what was sent")
		}
		if reads.supers.Load() == 0 {
			t.Error("no read brought a super-packet: the device's segmentation offload is off")
		}
		if mss > 0 && reads.full.Load() == 0 {
			t.Error("no read filled every buffer: no super-packet had more segments than a read takes")
		}
	})
}
