package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/tun/netstack"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
)

// handoffDevice is the pods' device as one gateway sees it: its Close ends
// that gateway's reads and leaves the pods' stack for the next gateway, as
// a node's pods stay when the gateway on another node dies. A packet read
// after Close is lost, as one in flight through a dying gateway is.
type handoffDevice struct {
	tun.Device
	once   sync.Once
	closed chan struct{}
}

func newHandoffDevice(dev tun.Device) *handoffDevice {
	return &handoffDevice{Device: dev, closed: make(chan struct{})}
}

func (d *handoffDevice) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	select {
	case <-d.closed:
		return 0, os.ErrClosed
	default:
	}
	n, err := d.Device.Read(bufs, sizes, offset)
	select {
	case <-d.closed:
		return 0, os.ErrClosed
	default:
	}
	return n, err
}

func (d *handoffDevice) Write(bufs [][]byte, offset int) (int, error) {
	select {
	case <-d.closed:
		return 0, os.ErrClosed
	default:
	}
	return d.Device.Write(bufs, offset)
}

func (d *handoffDevice) Close() error {
	d.once.Do(func() { close(d.closed) })
	return nil
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// runOn runs a gateway built from s on dev until the test ends, and
// returns a function that stops it early.
func runOn(t *testing.T, s *gateway.Spec, opts gateway.Options, dev tun.Device) (*gateway.Gateway, func()) {
	t.Helper()
	gw, err := gateway.NewFromSpec(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx, dev) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); dev.Close() }) }
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("%s: Run: %v", s.Cluster.ID, err)
		}
	})
	return gw, stop
}

// TestInProcessTCPSurvivesGatewayFailover runs a TCP connection from
// cluster c1's pod to c2's headless pod through c1's active gateway, while
// c1's standby follows the active's flows. The active dies; the standby
// starts from its replica, c2 is pointed at it, and the same connection
// carries on: c2's pod sees the same global source address and port.
func TestInProcessTCPSurvivesGatewayFailover(t *testing.T) {
	pActive, pStandby, p2 := gateway.FreeUDPPort(t), gateway.FreeUDPPort(t), gateway.FreeUDPPort(t)
	syncAddr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(freeTCPPort(t)))
	key := []byte("in-process test clusterset key")
	mk := func(id, global string, port int, remote, remoteGlobal string, remotePort int) gateway.Config {
		return gateway.Config{
			Cluster:   gateway.Cluster{ID: id, PodCIDRs: []string{"10.7.0.0/16"}, ServiceCIDRs: []string{"10.77.0.0/16"}},
			TUN:       gateway.TUN{Name: "snk-" + id},
			Transport: gateway.TransportConfig{Type: transport.VXLAN, Port: port},
			Globalnet: &gateway.Globalnet{GlobalCIDR: global},
			Remotes:   []gateway.Remote{{ID: remote, GlobalCIDR: remoteGlobal, Endpoint: fmt.Sprintf("127.0.0.1:%d", remotePort)}},
		}
	}
	cfg2 := mk("c2", "242.2.0.0/16", p2, "c1", "242.1.0.0/16", pActive)
	cfg2.Globalnet.Ingress = []gateway.GlobalIngress{{Name: "db-0", Kind: gateway.IngressKindHeadlessPod, GlobalIP: dbGlobal.String(), LocalIP: samePod.String()}}
	c2 := start(t, cfg2, []netip.Addr{samePod})
	compile := func(c gateway.Config) *gateway.Spec {
		s, err := c.Compile()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	pods, podNet, err := netstack.CreateNetTUN([]netip.Addr{samePod}, nil, 1500)
	if err != nil {
		t.Fatal(err)
	}
	active := compile(mk("c1", "242.1.0.0/16", pActive, "c2", "242.2.0.0/16", p2))
	active.Sync = &gateway.SyncSpec{Listen: syncAddr, Key: key}
	_, stopActive := runOn(t, active, gateway.Options{}, newHandoffDevice(pods))
	follower, err := gateway.NewFollower(gateway.SyncSpec{Follow: syncAddr, Key: key}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitSync(t, "the standby connects to the active", follower, func(st gateway.SyncStatus) bool { return st.Connected })

	ln, err := c2.net.ListenTCPAddrPort(netip.AddrPortFrom(samePod, 8080))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type turn struct {
		from netip.AddrPort
		got  string
	}
	turns := make(chan turn, 2)
	// The server holds the connection open until the test is over, so
	// that its state stays established.
	hold := make(chan struct{})
	defer close(hold)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			close(turns)
			return
		}
		defer conn.Close()
		from := netip.MustParseAddrPort(conn.RemoteAddr().String())
		conn.SetDeadline(time.Now().Add(bulk))
		for range 2 {
			b := make([]byte, 5)
			if _, err := io.ReadFull(conn, b); err != nil {
				close(turns)
				return
			}
			conn.Write([]byte("pong"))
			turns <- turn{from, string(b)}
		}
		<-hold
	}()
	ctx, cancel := context.WithTimeout(t.Context(), settle)
	defer cancel()
	conn, err := podNet.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(dbGlobal, 8080))
	if err != nil {
		t.Fatalf("dial c2's headless pod through the active gateway: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(bulk))
	exchange := func(msg string) turn {
		t.Helper()
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatalf("write %s: %v", msg, err)
		}
		reply := make([]byte, 4)
		if _, err := io.ReadFull(conn, reply); err != nil {
			t.Fatalf("read the answer to %s: %v", msg, err)
		}
		tr, ok := <-turns
		if !ok || tr.got != msg {
			t.Fatalf("c2's pod read %q (ok %v), want %q", tr.got, ok, msg)
		}
		return tr
	}
	before := exchange("ping1")
	// The SYN, the SYN-ACK and the ACK each leave a record.
	waitSync(t, "the standby holds the established flow", follower, func(st gateway.SyncStatus) bool {
		return st.Replica == 1 && st.RecordsReceived >= 3
	})

	stopActive()
	standbySpec := compile(mk("c1", "242.1.0.0/16", pStandby, "c2", "242.2.0.0/16", p2))
	standby, _ := runOn(t, standbySpec, gateway.Options{Takeover: follower}, newHandoffDevice(pods))
	// Closing the pods' stack, first of the cleanups, ends every read of it.
	t.Cleanup(func() { pods.Close() })
	// Before any packet of the new term, the standby holds the flow with
	// the active's translation: a flow picked up afresh could not show it.
	dbg := httptest.NewServer(standby.DebugHandler())
	defer dbg.Close()
	flowsNow := func() []gateway.FlowStatus {
		var flows []gateway.FlowStatus
		getJSON(t, dbg.URL+"/flows", &flows)
		return flows
	}
	if fl := flowsNow(); len(fl) != 1 || fl[0].Reply.Dst != before.from || fl[0].State != "established" {
		t.Fatalf("standby's /flows before any packet = %+v; want the established flow, replies to %s", fl, before.from)
	}
	moved := cfg2
	moved.Remotes = []gateway.Remote{cfg2.Remotes[0]}
	moved.Remotes[0].Endpoint = fmt.Sprintf("127.0.0.1:%d", pStandby)
	if err := c2.gw.Update(compile(moved)); err != nil {
		t.Fatal(err)
	}

	after := exchange("ping2")
	if after.from != before.from {
		t.Errorf("c2's pod saw the connection from %s, then %s", before.from, after.from)
	}
	if fl := flowsNow(); len(fl) != 1 || fl[0].Reply.Dst != before.from || fl[0].State != "established" {
		t.Errorf("standby's /flows after the exchange = %+v; want the one established flow, replies to %s", fl, before.from)
	}
}

func waitSync(t *testing.T, what string, f *gateway.Follower, ok func(gateway.SyncStatus) bool) {
	t.Helper()
	for deadline := time.Now().Add(settle); ; {
		st := f.Status()
		if ok(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; sync status %+v", what, settle, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
