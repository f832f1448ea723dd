//go:build linux

package vxlan

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/internal/netnstest"
)

// Kernel interop topology, all inside two namespaces of the test's own:
//
//	near: veth0 198.18.0.1/30, the userspace transport on UDP 4500,
//	      "owning" 198.19.2.0/24 behind it
//	far:  veth1 198.18.0.2/30, vx0 (kernel vxlan, VNI 1000, dstport 4500,
//	      remote 198.18.0.1) 198.19.1.1/24, route 198.19.2.0/24 dev vx0
var (
	kUnderNear = netip.MustParseAddr("198.18.0.1")
	kUnderFar  = netip.MustParseAddr("198.18.0.2")
	kFarInner  = netip.MustParseAddr("198.19.1.1")
	kPingedIP  = netip.MustParseAddr("198.19.2.7") // the far side pings this
	kOurIP     = netip.MustParseAddr("198.19.2.9") // we ping from this
)

const kEchoID = 0x5e5e

func run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// echoPeer is the test's Deliverer: it answers echo requests for kPingedIP
// by hand and reports echo replies addressed to kOurIP.
type echoPeer struct {
	tr       atomic.Pointer[Transport]
	requests atomic.Int32
	mu       sync.Mutex
	replies  []uint16 // sequence numbers
	got      chan struct{}
	bad      atomic.Pointer[string]
}

func (e *echoPeer) fail(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	e.bad.CompareAndSwap(nil, &s)
}

func (e *echoPeer) Deliver(peer int, bufs [][]byte, offset int) {
	for _, b := range bufs {
		p := b[offset:]
		if len(p) < 28 || p[0] != 0x45 || p[9] != 1 {
			continue // IPv6 chatter from vx0, options: not ours
		}
		src, dst := netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
		icmp := p[20:]
		switch {
		case dst == kPingedIP && icmp[0] == 8:
			e.requests.Add(1)
			reply := ipv4(dst, src, 1, icmpEcho(0, binary.BigEndian.Uint16(icmp[4:]), binary.BigEndian.Uint16(icmp[6:]), icmp[8:]))
			if err := e.tr.Load().Send(peer, [][]byte{withHeadroom(reply)}, transport.Headroom); err != nil {
				e.fail("sending echo reply: %v", err)
			}
		case dst == kOurIP && src == kFarInner && icmp[0] == 0:
			if checksum(p[:20]) != 0 || checksum(icmp) != 0 {
				e.fail("echo reply with a bad checksum: % x", p)
				continue
			}
			if binary.BigEndian.Uint16(icmp[4:]) != kEchoID || !bytes.Equal(icmp[8:], pattern(56, 0x5e)) {
				e.fail("echo reply does not match the request: % x", icmp)
				continue
			}
			e.mu.Lock()
			e.replies = append(e.replies, binary.BigEndian.Uint16(icmp[6:]))
			e.mu.Unlock()
			select {
			case e.got <- struct{}{}:
			default:
			}
		}
	}
}

func TestKernelVXLANInterop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping kernel interop: needs root to create network namespaces and a vxlan device")
	}
	for _, tool := range []string{"ip", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping kernel interop: %s not found", tool)
		}
	}
	near := fmt.Sprintf("snkvx-n%d", os.Getpid())
	far := fmt.Sprintf("snkvx-f%d", os.Getpid())
	t.Cleanup(func() {
		for _, ns := range []string{near, far} {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Logf("ip netns del %s: %v %s", ns, err, out)
			}
		}
	})
	run(t, "ip", "netns", "add", near)
	run(t, "ip", "netns", "add", far)
	run(t, "ip", "-n", near, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1", "netns", far)
	run(t, "ip", "-n", near, "addr", "add", kUnderNear.String()+"/30", "dev", "veth0")
	run(t, "ip", "-n", near, "link", "set", "veth0", "up")
	run(t, "ip", "-n", far, "addr", "add", kUnderFar.String()+"/30", "dev", "veth1")
	run(t, "ip", "-n", far, "link", "set", "veth1", "up")
	run(t, "ip", "-n", far, "link", "add", "vx0", "type", "vxlan", "id", "1000", "dstport", "4500",
		"remote", kUnderNear.String(), "local", kUnderFar.String(), "dev", "veth1")
	run(t, "ip", "-n", far, "addr", "add", kFarInner.String()+"/24", "dev", "vx0")
	run(t, "ip", "-n", far, "link", "set", "vx0", "up")
	run(t, "ip", "-n", far, "route", "add", "198.19.2.0/24", "dev", "vx0")
	farMAC, err := net.ParseMAC(strings.TrimSpace(run(t, "ip", "netns", "exec", far, "cat", "/sys/class/net/vx0/address")))
	if err != nil {
		t.Fatal(err)
	}

	peer := &echoPeer{got: make(chan struct{}, 1)}
	var tr *Transport
	netnstest.In(t, near, func() {
		tr, err = New(Config{Port: 4500, VNI: 1000, Peers: []Peer{{Endpoint: netip.AddrPortFrom(kUnderFar, 4500)}}}, peer)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	peer.tr.Store(tr)
	diagnose := func() {
		t.Logf("drops: %v", tr.Drops())
		for _, args := range [][]string{
			{"ip", "-n", far, "neigh", "show", "dev", "vx0"},
			{"bridge", "-n", far, "fdb", "show", "dev", "vx0"},
		} {
			out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
			t.Logf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	// (b) first, while the far MAC is unknown: our echo request goes out
	// with a broadcast destination MAC, and the kernel must resolve
	// kOurIP through our ARP answer before it can reply.
	if m, _ := tr.PeerMAC(0); m != broadcast {
		t.Fatalf("peer MAC before any frame is %v, want broadcast", mac(m))
	}
	deadline := time.After(settle)
	for seq := uint16(1); ; seq++ {
		req := ipv4(kOurIP, kFarInner, 1, icmpEcho(8, kEchoID, seq, pattern(56, 0x5e)))
		if err := tr.Send(0, [][]byte{withHeadroom(req)}, transport.Headroom); err != nil {
			t.Fatal(err)
		}
		select {
		case <-peer.got:
		case <-time.After(300 * time.Millisecond):
			continue
		case <-deadline:
			diagnose()
			t.Fatal("(b) no echo reply from the kernel vxlan device")
		}
		break
	}
	peer.mu.Lock()
	t.Logf("(b) kernel answered our echo requests, sequence numbers %v", peer.replies)
	peer.mu.Unlock()
	if m, _ := tr.PeerMAC(0); !bytes.Equal(m[:], farMAC) {
		t.Fatalf("learned peer MAC %v, want vx0's %v", mac(m), farMAC)
	}

	// (a) the kernel pings an address behind the transport. -W bounds
	// the wait for a first reply; ping ends soon after the third.
	ctx, cancel := context.WithTimeout(context.Background(), 2*settle)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", far,
		"ping", "-c", "3", "-i", "0.2", "-W", strconv.Itoa(int(settle/time.Second)), kPingedIP.String()).CombinedOutput()
	if err != nil {
		diagnose()
		t.Fatalf("(a) ping %v from the kernel side: %v\n%s", kPingedIP, err, out)
	}
	// ping ends two round trips after its last request once some reply
	// came: on a slow machine the last request may still be on its way.
	for end := time.Now().Add(settle); peer.requests.Load() < 3 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := peer.requests.Load(); n < 3 {
		t.Fatalf("(a) Deliverer saw %d echo requests, want 3", n)
	}
	t.Logf("(a) %s", summary(string(out)))
	if s := peer.bad.Load(); s != nil {
		t.Fatal(*s)
	}
	neigh := run(t, "ip", "-n", far, "neigh", "show", kPingedIP.String(), "dev", "vx0")
	if ours := mac(tr.MAC()).String(); !strings.Contains(neigh, ours) {
		t.Fatalf("kernel resolved %v to %q, want our MAC %s", kPingedIP, neigh, ours)
	}
	for _, d := range tr.Drops() {
		if d.Reason != "arp_ignored" {
			t.Errorf("unexpected drop %+v", d)
		}
	}
}

func summary(ping string) string {
	for _, line := range strings.Split(ping, "\n") {
		if strings.Contains(line, "packets transmitted") {
			return line
		}
	}
	return ping
}
