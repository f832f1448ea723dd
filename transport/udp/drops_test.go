package udp

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKernelDropsCountsAFullReceiveQueue shrinks the IPv4 socket's receive
// queue to its minimum and sends more datagrams than it holds before any
// loop reads: each datagram is then either queued or dropped by the kernel
// when the send returns, so the drops counted and the datagrams delivered
// once the loop starts must add up to the datagrams sent.
func TestKernelDropsCountsAFullReceiveQueue(t *testing.T) {
	c, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var s *socket
	for _, x := range c.socks {
		if !x.v6 {
			s = x
		}
	}
	if s == nil {
		t.Skip("no IPv4 socket")
	}
	if err := s.rc.Control(func(fd uintptr) {
		if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if n := c.KernelDrops(); n != 0 {
		t.Fatalf("KernelDrops() = %d before any datagram", n)
	}
	out, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(loopback(c.Port())))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	const sent = 200
	msg := make([]byte, 1000)
	for range sent {
		if _, err := out.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	drops := c.KernelDrops()
	if drops == 0 || drops >= sent {
		t.Fatalf("KernelDrops() = %d after %d datagrams into a queue of the least size: want some dropped and some queued", drops, sent)
	}
	var delivered atomic.Int64
	if err := c.Start(0, func(bufs [][]byte, _ []int, _ []netip.AddrPort) { delivered.Add(int64(len(bufs))) }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(settle)
	for uint64(delivered.Load())+drops != sent {
		if time.Now().After(deadline) {
			t.Fatalf("%d datagrams delivered and %d counted as dropped, of %d sent", delivered.Load(), drops, sent)
		}
		time.Sleep(time.Millisecond)
	}
	if n := c.KernelDrops(); n != drops {
		t.Fatalf("KernelDrops() = %d after the loop read the queue, was %d: reading is no drop", n, drops)
	}
	c.Close()
	if n := c.KernelDrops(); n != drops {
		t.Fatalf("KernelDrops() = %d once closed, want the last count %d", n, drops)
	}
}
