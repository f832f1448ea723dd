package topo

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// settle bounds a wait for something that takes milliseconds on an idle
// machine, a process to start or a packet to cross: beside the rest of
// `go test ./...` on two busy cores it can take seconds. A passing run
// never waits it out.
const settle = 60 * time.Second

// needRoot skips a test that creates namespaces when the process cannot.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (CAP_SYS_ADMIN and CAP_NET_ADMIN); run the tests as root")
	}
}

// testTopology returns a topology with a prefix unique to this test process,
// closed and checked for leftovers at the end of the test.
func testTopology(t *testing.T, tag string) *Topology {
	t.Helper()
	needRoot(t)
	dir := t.TempDir()
	prefix := fmt.Sprintf("t%d%s-", os.Getpid()%100000, tag)
	tp, err := New(Options{Prefix: prefix, LogDir: dir, StateFile: filepath.Join(dir, "state.json"), StopTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tp.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		left, err := List(prefix)
		if err != nil {
			t.Error(err)
		}
		if len(left) > 0 {
			t.Errorf("namespaces left after Close: %v", left)
		}
	})
	return tp
}

func mustNS(t *testing.T, tp *Topology, name string) *NS {
	t.Helper()
	n, err := tp.NewNS(name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestRoutedThroughRouter builds a - r - b with a bridge on the b side and
// checks ping, TCP from Go in both directions, and that the router forwards
// only once forwarding is on.
func TestRoutedThroughRouter(t *testing.T) {
	before, err := net.Interfaces()
	must(t, err)
	tp := testTopology(t, "r")
	ctx, cancel := context.WithTimeout(context.Background(), 2*settle)
	defer cancel()
	a, r, b := mustNS(t, tp, "a"), mustNS(t, tp, "r"), mustNS(t, tp, "b")
	p := netip.MustParsePrefix

	must(t, Veth(a, "eth0", r, "to-a"))
	must(t, r.Bridge("br0"))
	must(t, Veth(b, "eth0", r, "to-b"))
	must(t, r.SetMaster("to-b", "br0"))
	must(t, a.AddAddr("eth0", p("10.1.0.2/24")))
	must(t, r.AddAddr("to-a", p("10.1.0.1/24")))
	must(t, r.AddAddr("br0", p("10.2.0.1/24")))
	must(t, b.AddAddr("eth0", p("10.2.0.2/24")))
	must(t, a.AddRoute(Route{Dst: p("0.0.0.0/0"), Via: netip.MustParseAddr("10.1.0.1")}))
	must(t, b.AddRoute(Route{Dst: p("10.1.0.0/16"), Via: netip.MustParseAddr("10.2.0.1"), Dev: "eth0"}))

	must(t, r.Sysctl("net.ipv4.ip_forward", "0"))
	if _, err := a.Run(ctx, "ping", "-c", "1", "-W", "1", "10.2.0.2"); err == nil {
		t.Fatal("ping crossed a router with forwarding off; the sysctl did not reach the namespace")
	}
	must(t, r.Sysctl("net.ipv4.ip_forward", "1"))
	// With -w, ping waits for the replies however late they come, where
	// with -c alone it gives the last one as little as 0.2 s; each
	// request must have its reply.
	if out, err := a.Run(ctx, "ping", "-c", "2", "-i", "0.2", "-w", fmt.Sprint(int(settle/time.Second)), "10.2.0.2"); err != nil {
		t.Fatalf("ping a -> b: %v", err)
	} else if !strings.Contains(string(out), " icmp_seq=1 ") || !strings.Contains(string(out), " icmp_seq=2 ") {
		t.Fatalf("ping a -> b: %s", out)
	}

	ln, err := b.Listen("tcp", "10.2.0.2:7000")
	must(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		fmt.Fprintf(c, "%s\n", c.RemoteAddr())
		c.Close()
	}()
	c, err := a.DialContext(ctx, "tcp", "10.2.0.2:7000")
	must(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	must(t, err)
	if host, _, _ := net.SplitHostPort(strings.TrimSpace(line)); host != "10.1.0.2" {
		t.Errorf("b saw the connection from %q, want 10.1.0.2 (routed, not translated)", line)
	}

	pc, err := b.ListenPacket("udp", "10.2.0.2:7001")
	must(t, err)
	defer pc.Close()
	uc, err := a.DialContext(ctx, "udp", "10.2.0.2:7001")
	must(t, err)
	defer uc.Close()
	if _, err := uc.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	must(t, pc.SetReadDeadline(time.Now().Add(settle)))
	buf := make([]byte, 16)
	n, from, err := pc.ReadFrom(buf)
	must(t, err)
	if host, _, _ := net.SplitHostPort(from.String()); string(buf[:n]) != "hello" || host != "10.1.0.2" {
		t.Errorf("UDP from a: %q from %v; want \"hello\" from 10.1.0.2", buf[:n], from)
	}

	must(t, a.SetMTU("eth0", 1280))
	if out, err := a.Run(ctx, "ip", "link", "show", "eth0"); err != nil || !strings.Contains(string(out), "mtu 1280") {
		t.Errorf("SetMTU: %s %v", out, err)
	}
	if !r.HasLink("br0") || r.HasLink("nope") {
		t.Error("HasLink does not tell existing from missing links")
	}

	routes, err := b.Routes("eth0")
	must(t, err)
	found := false
	for _, rt := range routes {
		if rt.Dst == p("10.1.0.0/16") && rt.Via == netip.MustParseAddr("10.2.0.1") && rt.Dev == "eth0" {
			found = true
		}
	}
	if !found {
		t.Errorf("Routes(eth0) = %v, want 10.1.0.0/16 via 10.2.0.1 dev eth0", routes)
	}
	after, err := net.Interfaces()
	must(t, err)
	if len(after) != len(before) {
		t.Errorf("the test's own namespace went from %d to %d interfaces: the topology leaked into it", len(before), len(after))
	}
}

func TestNftDNAT(t *testing.T) {
	tp := testTopology(t, "n")
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	a, b := mustNS(t, tp, "a"), mustNS(t, tp, "b")
	p := netip.MustParsePrefix
	must(t, Veth(a, "eth0", b, "eth0"))
	must(t, a.AddAddr("eth0", p("10.3.0.1/24")))
	must(t, b.AddAddr("eth0", p("10.3.0.2/24")))
	must(t, a.AddRoute(Route{Dst: p("10.33.0.0/16"), Via: netip.MustParseAddr("10.3.0.2")}))
	must(t, b.Nft(ctx, `table ip t {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr 10.33.0.10 tcp dport 80 dnat to 10.3.0.2:8080
	}
}
`))
	ln, err := b.Listen("tcp", ":8080")
	must(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := a.DialContext(ctx, "tcp", "10.33.0.10:80")
	if err != nil {
		t.Fatalf("dial through DNAT: %v", err)
	}
	c.Close()
	if err := b.Nft(ctx, "this is not nft syntax\n"); err == nil {
		t.Error("a bad ruleset was accepted")
	}
}

// TestCloseStopsProcessesByRecord starts processes, then tears the topology
// down through its state file, as `lab down` does from another process.
func TestCloseStopsProcessesByRecord(t *testing.T) {
	tp := testTopology(t, "p")
	a := mustNS(t, tp, "a")
	// A process that ignores SIGTERM, so that Stop has to escalate.
	stubborn, err := a.Start("stubborn", "sh", "-c", "trap '' TERM; echo ready; sleep 60")
	must(t, err)
	plain, err := a.Start("plain", "sleep", "60")
	must(t, err)
	if !stubborn.Alive() || !plain.Alive() {
		t.Fatal("processes not running after Start")
	}
	deadline := time.Now().Add(settle)
	for {
		b, _ := os.ReadFile(stubborn.Log)
		if strings.Contains(string(b), "ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stubborn process never wrote to its log %s", stubborn.Log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// `ip netns exec` enters the namespace a moment after it starts: wait
	// for it rather than catch it before.
	self, err := os.Readlink("/proc/self/ns/net")
	must(t, err)
	for {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", plain.PID))
		must(t, err)
		if ns != self {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("process started in the test's namespace, not in the topology's")
		}
		time.Sleep(10 * time.Millisecond)
	}

	loaded, err := Load(tp.opts.StateFile)
	must(t, err)
	loaded.opts.StopTimeout = 300 * time.Millisecond
	if err := loaded.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Process{stubborn, plain} {
		select {
		case <-p.Exited():
		case <-time.After(settle):
			t.Errorf("%s (pid %d) still running after Close through the state file", p.Name, p.PID)
		}
	}
	if Exists(a.Name()) {
		t.Errorf("namespace %s still exists", a.Name())
	}
}

// TestForgetDropsExitedProcessesOfANamespace kills one of two processes
// and forgets the exited ones: the record, and the state file a later
// `lab status` or `lab down` reads, keep only the live one.
func TestForgetDropsExitedProcessesOfANamespace(t *testing.T) {
	tp := testTopology(t, "f")
	a := mustNS(t, tp, "a")
	killed, err := a.Start("killed", "sleep", "60")
	must(t, err)
	kept, err := a.Start("kept", "sleep", "60")
	must(t, err)
	must(t, killed.Kill())
	must(t, tp.Forget(a))
	if ps := tp.Processes(); len(ps) != 1 || ps[0] != kept {
		t.Fatalf("after Forget, processes %v; want only %s", ps, kept.Name)
	}
	loaded, err := Load(tp.opts.StateFile)
	must(t, err)
	defer loaded.Release()
	if ps := loaded.Processes(); len(ps) != 1 || ps[0].Name != "kept" {
		t.Errorf("the state file lists %d processes; want only kept", len(ps))
	}
}
