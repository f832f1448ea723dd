package wireguard

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/snorkel-net/snorkel/transport"
)

// TestKernelDropsFollowsAFullReceiveQueue shrinks a UDP socket's receive
// queue to its minimum and sends it more than it holds: each datagram is
// then either queued or dropped by the kernel, so the drops read from
// /proc/net/udp and the datagrams left in the queue must add up to those
// sent.
func TestKernelDropsFollowsAFullReceiveQueue(t *testing.T) {
	if _, err := os.Stat(procUDP[0]); err != nil {
		t.Skipf("no %s: %v", procUDP[0], err)
	}
	in, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := in.SetReadBuffer(1); err != nil {
		t.Fatal(err)
	}
	port := uint16(in.LocalAddr().(*net.UDPAddr).Port)
	var k kernelDrops
	if n := k.read(port); n != 0 {
		t.Fatalf("read = %d before any datagram", n)
	}
	out, err := net.DialUDP("udp4", nil, in.LocalAddr().(*net.UDPAddr))
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
	drops := k.read(port)
	rc, err := in.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	queued := 0
	var rerr error
	if err := rc.Control(func(fd uintptr) {
		buf := make([]byte, 2048)
		for {
			_, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			if errors.Is(err, unix.EAGAIN) {
				return
			}
			if err != nil {
				rerr = err
				return
			}
			queued++
		}
	}); err != nil || rerr != nil {
		t.Fatal(err, rerr)
	}
	if drops == 0 || drops+uint64(queued) != sent {
		t.Fatalf("%d counted as dropped and %d queued, of %d sent", drops, queued, sent)
	}
	if n := k.read(port); n != drops {
		t.Fatalf("read = %d after the queue was read, was %d: reading is no drop", n, drops)
	}
}

// fakeProcUDP points read at a file holding a /proc/net/udp listing of
// sockets, each given as port, inode and drops, until the test ends.
func fakeProcUDP(t *testing.T) func(sockets ...[3]uint64) {
	file := filepath.Join(t.TempDir(), "udp")
	saved := procUDP
	procUDP = []string{file}
	t.Cleanup(func() { procUDP = saved })
	return func(sockets ...[3]uint64) {
		listing := "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n"
		for i, s := range sockets {
			listing += fmt.Sprintf("%4d: 00000000:%04X 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 %d 2 0000000000000000 %d\n", i, s[0], s[1], s[2])
		}
		if err := os.WriteFile(file, []byte(listing), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKernelDropsWidensAndKeepsReplacedSockets feeds read listings in which
// a socket's 32-bit count wraps and another socket replaces it.
func TestKernelDropsWidensAndKeepsReplacedSockets(t *testing.T) {
	list := fakeProcUDP(t)
	var k kernelDrops
	for _, step := range []struct {
		sockets [][3]uint64 // port, inode, drops
		want    uint64
	}{
		{[][3]uint64{{4500, 7, 4294967290}, {4501, 8, 99}}, 4294967290},
		{[][3]uint64{{4500, 7, 5}, {4501, 8, 120}}, 4294967290 + 11},
		{[][3]uint64{{4500, 9, 3}}, 4294967290 + 11 + 3},
		{nil, 4294967290 + 11 + 3},
	} {
		list(step.sockets...)
		if got := k.read(4500); got != step.want {
			t.Fatalf("sockets %v: read = %d, want %d", step.sockets, got, step.want)
		}
	}
}

// TestDropsReportsTheKernelsDiscards has Drops read a listing in which the
// transport's own port has lost datagrams, and another port more.
func TestDropsReportsTheKernelsDiscards(t *testing.T) {
	p := newPair(t, nil, nil)
	fakeProcUDP(t)([3]uint64{uint64(p.a.Port()), 41, 7}, [3]uint64{uint64(p.b.Port()), 42, 9})
	if n := dropCount(p.a.Drops(), transport.PeerAny, transport.KernelDropReason); n != 7 {
		t.Fatalf("A's Drops() %v: %s = %d, want 7", p.a.Drops(), transport.KernelDropReason, n)
	}
}
