package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
)

// The clusterset IP fixtures: c1 serves vipRemote from c2's pod and
// vipLocal from its own (preferred) and c2's; snat1 is c1's SNAT address.
// c1's backend is its client pod itself, so that the pod has one address
// to dial from.
var (
	localBackend = pod1
	vipRemote    = netip.MustParseAddr("243.0.0.10")
	vipLocal     = netip.MustParseAddr("243.0.0.11")
	vipLater     = netip.MustParseAddr("243.0.0.12")
	snat1        = netip.MustParseAddr("243.0.255.254")
)

const vipPort = 8080

func clustersetIP(vips ...netip.Addr) *gateway.ClustersetIP {
	cs := &gateway.ClustersetIP{SNATAddress: snat1.String()}
	for _, v := range vips {
		backends := []gateway.ClustersetIPBackend{{Cluster: "c2", Address: pod2.String()}}
		if v == vipLocal {
			backends = append([]gateway.ClustersetIPBackend{{Cluster: "c1", Address: localBackend.String()}}, backends...)
		}
		cs.Services = append(cs.Services, gateway.ClustersetIPService{VIP: v.String(),
			Ports: []gateway.ClustersetIPPort{{Protocol: "TCP", Port: vipPort}}, Backends: backends})
	}
	return cs
}

// whoAmIServer accepts connections on addr; to each it writes the peer
// address it sees, a line, then echoes lines back.
func whoAmIServer(t *testing.T, c *cluster, addr netip.Addr) {
	t.Helper()
	ln, err := c.net.ListenTCPAddrPort(netip.AddrPortFrom(addr, vipPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				fmt.Fprintf(conn, "%s\n", conn.RemoteAddr())
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					conn.Write([]byte(line))
				}
			}()
		}
	}()
}

// vipConn is a client connection to a VIP and what the server saw.
type vipConn struct {
	net.Conn
	r      *bufio.Reader
	seenAs netip.Addr
}

// dialVIP connects c's client pod to vip, which it must see as its peer,
// and reads the address the server saw it from.
func dialVIP(t *testing.T, c *cluster, vip netip.Addr) *vipConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	conn, err := c.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(vip, vipPort))
	if err != nil {
		t.Fatalf("dial %s: %v", vip, err)
	}
	t.Cleanup(func() { conn.Close() })
	if got := netip.MustParseAddrPort(conn.RemoteAddr().String()); got.Addr() != vip {
		t.Fatalf("the client's peer is %s, want the VIP %s", got, vip)
	}
	conn.SetDeadline(time.Now().Add(settle))
	vc := &vipConn{Conn: conn, r: bufio.NewReader(conn)}
	line, err := vc.r.ReadString('\n')
	if err != nil {
		t.Fatalf("read from %s: %v", vip, err)
	}
	vc.seenAs = netip.MustParseAddrPort(strings.TrimSpace(line)).Addr()
	return vc
}

// roundTrip sends a line and waits for its echo.
func (vc *vipConn) roundTrip(t *testing.T, msg string) {
	t.Helper()
	vc.SetDeadline(time.Now().Add(settle))
	if _, err := fmt.Fprintf(vc, "%s\n", msg); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	got, err := vc.r.ReadString('\n')
	if err != nil || got != msg+"\n" {
		t.Fatalf("echo of %q: %q, %v", msg, got, err)
	}
}

// apply makes c's gateway serve its configuration with cs in place.
func apply(t *testing.T, c *cluster, cs *gateway.ClustersetIP) {
	t.Helper()
	cfg := c.cfg
	cfg.ClustersetIP = cs
	s, err := cfg.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.gw.Update(s); err != nil {
		t.Fatal(err)
	}
}

// waitStatus waits until c's clusterset IP status satisfies ok.
func waitStatus(t *testing.T, c *cluster, what string, ok func(*gateway.ClustersetIPStatus) bool) {
	t.Helper()
	for deadline := time.Now().Add(settle); ; {
		st := c.gw.Stats().ClustersetIP
		if st != nil && ok(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; status %+v", what, settle, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInProcessClustersetIP connects c1's pod to clusterset IPs: one
// backed in c2 alone, reached through the tunnel with the client's own
// address, and one backed in c1 too, reached locally from the SNAT
// address. The client sees the VIP as its peer both ways. Then VIPs come
// and go while a connection to another runs on.
func TestInProcessClustersetIP(t *testing.T) {
	for _, tr := range transport.Kinds {
		t.Run(tr, func(t *testing.T) { testInProcessClustersetIP(t, tr) })
	}
}

func testInProcessClustersetIP(t *testing.T, kind string) {
	c1, c2 := startPairWith(t, kind, []netip.Addr{pod1}, []netip.Addr{pod2}, func(cfg1, _ *gateway.Config) {
		cfg1.ClustersetIP = clustersetIP(vipRemote, vipLocal)
	})
	whoAmIServer(t, c2, pod2)
	whoAmIServer(t, c1, localBackend)

	remote := dialVIP(t, c1, vipRemote)
	if remote.seenAs != pod1 {
		t.Errorf("the backend in c2 saw the client as %s, want the client's own %s", remote.seenAs, pod1)
	}
	remote.roundTrip(t, "through the tunnel")

	local := dialVIP(t, c1, vipLocal)
	if local.seenAs != snat1 {
		t.Errorf("the backend in c1 saw the client as %s, want the SNAT address %s", local.seenAs, snat1)
	}
	local.roundTrip(t, "back through the TUN")

	st := c1.gw.Stats().ClustersetIP
	if st.LocalFlows != 1 || st.RemoteFlows != 1 || st.Connections != 2 {
		t.Fatalf("status %+v, want one local and one remote connection", st)
	}

	apply(t, c1, clustersetIP(vipRemote, vipLocal, vipLater))
	remote.roundTrip(t, "after a VIP came")
	later := dialVIP(t, c1, vipLater)
	later.roundTrip(t, "to the new VIP")

	apply(t, c1, clustersetIP(vipRemote, vipLater))
	waitStatus(t, c1, "the removed VIP's connection ends", func(s *gateway.ClustersetIPStatus) bool { return s.Retired >= 1 })
	remote.roundTrip(t, "after a VIP went")
	later.roundTrip(t, "to the VIP that came, after another went")

	// The removed VIP is refused now.
	before := c1.gw.Stats().ClustersetIP.Drops["unknown_vip"]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c1.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(vipLocal, vipPort))
	waitStatus(t, c1, "a SYN to the removed VIP is dropped", func(s *gateway.ClustersetIPStatus) bool { return s.Drops["unknown_vip"] > before })
}
