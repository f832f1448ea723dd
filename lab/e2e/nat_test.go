package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"sigs.k8s.io/yaml"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// The NAT test's networks. Each gateway sits in a private network behind
// its cloud's router; the routers share the "internet" and know nothing of
// each other's private network.
var (
	natGW     = [2]netip.Addr{netip.MustParseAddr("192.168.1.2"), netip.MustParseAddr("192.168.2.2")}
	natLAN    = [2]netip.Addr{netip.MustParseAddr("192.168.1.1"), netip.MustParseAddr("192.168.2.1")}
	natPublic = [2]netip.Addr{netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("203.0.113.2")}
	natPods   = [2]netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.2.0.0/16")}
	natTUN    = [2]netip.Addr{netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1")}
)

// natRouters are the routers' rulesets. Cloud 1 is a NAT gateway that
// gives each new mapping a random port and lets nothing in that its
// gateway did not open; cloud 2 gives its gateway a public address, as an
// elastic IP does: the tunnel port is forwarded to it, and what it sends
// keeps its port where it can.
var natRouters = [2]string{`
table ip nat {
	chain postrouting {
		type nat hook postrouting priority srcnat;
		oifname "inet" ip saddr 192.168.1.0/24 masquerade random
	}
}`, `
table ip nat {
	chain prerouting {
		type nat hook prerouting priority dstnat;
		iifname "inet" udp dport 4500 dnat to 192.168.2.2
	}
	chain postrouting {
		type nat hook postrouting priority srcnat;
		oifname "inet" ip saddr 192.168.2.0/24 masquerade
	}
}`}

// TestNATRebinding is the proof that gateways behind NATs find each other
// and keep their flows when a NAT forgets its mappings. c1's gateway sits
// behind a masquerading router with no port forwarded, c2's behind one
// that forwards the tunnel port; there is no route between their private
// networks, and each gateway knows the other only by its router's public
// address. c2 reaches c1 only through the mapping c1's packets open. TCP
// streams run both ways between the gateways' TUN addresses; then both
// routers' connection tracking is flushed, so that c1's router maps c1's
// next packets to a new port. Every byte of both streams must arrive,
// with no reset.
func TestNATRebinding(t *testing.T) {
	needRoot(t)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			e := upNAT(t, tr.name, "t"+tr.name[:1])
			e.run()
		})
	}
}

// natEnv is the running NAT topology: gw and router by cloud (0 and 1).
type natEnv struct {
	t         *testing.T
	transport string
	gw        [2]*topo.NS
	router    [2]*topo.NS
}

func upNAT(t *testing.T, kind, tag string) *natEnv {
	t.Helper()
	tp := newTopology(t, tag)
	e := &natEnv{t: t, transport: kind}
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		e.gw[i], e.router[i], err = behindRouter(tp, i)
		must(err)
	}
	must(topo.Veth(e.router[0], "inet", e.router[1], "inet"))
	for i := range 2 {
		must(e.router[i].AddAddr("inet", netip.PrefixFrom(natPublic[i], 24)))
		must(e.router[i].Nft(t.Context(), natRouters[i]))
	}
	// No route between the private networks: each router knows its own and
	// the internet only.
	for i := range 2 {
		if out, err := e.router[i].Run(t.Context(), "ip", "route", "get", natGW[1-i].String()); err == nil {
			t.Fatalf("router %d has a route to the other cloud's gateway: %s", i+1, out)
		}
	}

	dir := t.TempDir()
	var pub [2]wireguard.Key
	for i := range 2 {
		if kind == transport.WireGuard {
			_, pub[i], err = wireguard.LoadOrCreateKey(filepath.Join(dir, fmt.Sprintf("c%d.key", i+1)))
			must(err)
		}
	}
	for i := range 2 {
		cfg := e.config(kind, i, dir, pub[1-i])
		must(cfg.Validate())
		b, err := yaml.Marshal(e.config(kind, i, dir, pub[1-i]))
		must(err)
		file := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i+1))
		must(os.WriteFile(file, b, 0o600))
		_, err = e.gw[i].Start(fmt.Sprintf("gateway-c%d", i+1), snorkelBin, "gateway", "--config", file, "--debug-address", lab.DebugAddress)
		must(err)
	}
	for i := range 2 {
		e.waitConnected(i)
	}
	return e
}

// config is the gateway config of cloud i: the remote is at its router's
// public address and across a NAT, with keepalives every 5s.
func (e *natEnv) config(kind string, i int, dir string, remoteKey wireguard.Key) gateway.Config {
	cfg := gateway.Config{
		Cluster:   gateway.Cluster{ID: fmt.Sprintf("c%d", i+1), PodCIDRs: []string{natPods[i].String()}},
		TUN:       gateway.TUN{Name: "snk0", Address: natTUN[i].String()},
		Transport: gateway.TransportConfig{Type: kind, Keepalive: "5s"},
		Remotes: []gateway.Remote{{
			ID:            fmt.Sprintf("c%d", 2-i),
			PodCIDRs:      []string{natPods[1-i].String()},
			Endpoint:      netip.AddrPortFrom(natPublic[1-i], gateway.DefaultPort).String(),
			HealthCheckIP: natTUN[1-i].String(),
			NAT:           true,
		}},
	}
	switch kind {
	case transport.WireGuard:
		// The UAPI socket's directory is the host's, not the namespace's.
		cfg.Transport.WireGuard = &gateway.WireGuardConfig{PrivateKeyFile: filepath.Join(dir, fmt.Sprintf("c%d.key", i+1)), UAPIName: e.gw[i].Name()}
		cfg.Remotes[0].WireGuard = &gateway.WireGuardRemoteConfig{PublicKey: remoteKey.String()}
	case transport.ESP:
		cfg.Transport.ESP = &gateway.ESPConfig{PSK: "snorkel-nat-test-psk-0123456789"}
	}
	return cfg
}

// waitConnected waits until cloud i's gateway reports its remote connected
// on its health probes.
func (e *natEnv) waitConnected(i int) {
	e.t.Helper()
	deadline := time.Now().Add(settle)
	for {
		var st gateway.Stats
		err := getJSON(e.t.Context(), e.gw[i], "/status", &st)
		if err == nil && len(st.Remotes) == 1 && st.Remotes[0].Status == "connected" {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("c%d's gateway has not connected within %v: %+v (%v)", i+1, settle, st.Remotes, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *natEnv) run() {
	t := e.t
	streams := []*liveStream{
		startStream(t, "c1→c2", e.gw[0], e.gw[1], netip.AddrPortFrom(natTUN[1], liveStreamPort), 1),
		startStream(t, "c2→c1", e.gw[1], e.gw[0], netip.AddrPortFrom(natTUN[0], liveStreamPort+1), 2),
	}
	e.waitMoved(streams, "before the flush")
	before := e.mapping(t)
	if !before.IsValid() {
		t.Fatal("c1's router has no mapping of c1's tunnel port towards c2's router")
	}
	for i := range 2 {
		if err := e.router[i].Do(func() error { return netlink.ConntrackTableFlush(netlink.ConntrackTable) }); err != nil {
			t.Fatalf("flush router %d's connection tracking: %v", i+1, err)
		}
	}
	deadline := time.Now().Add(settle)
	for {
		after := e.mapping(t)
		if after.IsValid() && after != before {
			t.Logf("c1's router mapped c1's tunnel port to %v, then %v after the flush", before, after)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c1's router still maps c1's tunnel port to %v (was %v) after the flush", after, before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.waitMoved(streams, "after the flush")
	for _, s := range streams {
		t.Logf("stream %s: longest stall %v", s.name, s.stall())
		s.finish()
	}
	for _, s := range streams {
		if err := s.result(); err != nil {
			t.Errorf("stream %s: %v", s.name, err)
		}
	}
}

// waitMoved waits until data has arrived on every stream, failing if one
// of them broke.
func (e *natEnv) waitMoved(streams []*liveStream, when string) {
	e.t.Helper()
	deadline := time.Now().Add(settle)
	left := slices.Clone(streams)
	for len(left) > 0 {
		for _, s := range streams {
			if err := s.failed(); err != nil {
				e.t.Fatalf("stream %s %s: %v", s.name, when, err)
			}
		}
		left = slices.DeleteFunc(left, func(s *liveStream) bool { return s.moved() })
		if time.Now().After(deadline) {
			e.t.Fatalf("no data on %d streams %s within %v", len(left), when, settle)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mapping is the public address and port c1's router gives the tunnel
// port of c1's gateway towards c2's router, invalid while it has none.
func (e *natEnv) mapping(t *testing.T) netip.AddrPort {
	t.Helper()
	var flows []*netlink.ConntrackFlow
	err := e.router[0].Do(func() error {
		var err error
		flows, err = netlink.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
		return err
	})
	if err != nil {
		t.Fatalf("list router 1's connection tracking: %v", err)
	}
	gw, peer := net.IP(natGW[0].AsSlice()), net.IP(natPublic[1].AsSlice())
	for _, f := range flows {
		if f.Forward.Protocol == 17 && f.Forward.SrcIP.Equal(gw) && f.Forward.SrcPort == gateway.DefaultPort && f.Forward.DstIP.Equal(peer) {
			a, _ := netip.AddrFromSlice(f.Reverse.DstIP.To4())
			return netip.AddrPortFrom(a, f.Reverse.DstPort)
		}
	}
	return netip.AddrPort{}
}

// newTopology starts an empty topology whose names carry tag, logs its
// processes' output when the test fails, and closes it at the end.
func newTopology(t *testing.T, tag string) *topo.Topology {
	t.Helper()
	prefix := fmt.Sprintf("e2%d%s-", os.Getpid()%100000, tag)
	tp, err := topo.New(topo.Options{Prefix: prefix, LogDir: t.TempDir(), Binary: snorkelBin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range tp.Processes() {
				if b, err := os.ReadFile(p.Log); err == nil {
					t.Logf("log of %s:\n%s", p.Name, b)
				}
			}
		}
		if err := tp.Close(); err != nil {
			t.Errorf("topology down: %v", err)
		}
	})
	return tp
}

// behindRouter makes gateway i's namespace and its router's, joined on
// the gateway's private network, with the router as its default route
// and forwarding on; what the router does outside is the test's.
func behindRouter(tp *topo.Topology, i int) (gw, router *topo.NS, err error) {
	if gw, err = tp.NewNS(fmt.Sprintf("gw%d", i+1)); err != nil {
		return nil, nil, err
	}
	if router, err = tp.NewNS(fmt.Sprintf("r%d", i+1)); err != nil {
		return nil, nil, err
	}
	for _, step := range []func() error{
		func() error { return topo.Veth(gw, "eth0", router, "lan") },
		func() error { return gw.AddAddr("eth0", netip.PrefixFrom(natGW[i], 24)) },
		func() error { return router.AddAddr("lan", netip.PrefixFrom(natLAN[i], 24)) },
		func() error { return gw.AddRoute(topo.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: natLAN[i]}) },
		func() error { return router.Sysctl("net.ipv4.ip_forward", "1") },
	} {
		if err := step(); err != nil {
			return nil, nil, err
		}
	}
	return gw, router, nil
}
