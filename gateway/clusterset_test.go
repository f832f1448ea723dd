package gateway

import (
	"context"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/packet"
)

// clustersetConfig is validConfig serving VIP 243.1.0.5 (TCP 80, UDP 53)
// from both clusters and 243.1.0.6 from c2 alone.
func clustersetConfig() Config {
	c := validConfig()
	c.ClustersetIP = &ClustersetIP{
		SNATAddress: "243.1.255.254",
		Services: []ClustersetIPService{
			{VIP: "243.1.0.5", Ports: []ClustersetIPPort{{Port: 80}, {Protocol: "UDP", Port: 53}},
				Backends: []ClustersetIPBackend{{Cluster: "c1", Address: "10.88.0.10"}, {Cluster: "c2", Address: "10.99.0.10"}}},
			{VIP: "243.1.0.6", Ports: []ClustersetIPPort{{Protocol: "SCTP", Port: 9000}},
				Backends: []ClustersetIPBackend{{Cluster: "c2", Address: "10.99.0.11"}}},
		},
	}
	return c
}

func TestClustersetIPConfigCompilesAndRendersBack(t *testing.T) {
	c := clustersetConfig()
	s, err := c.Compile()
	if err != nil {
		t.Fatal(err)
	}
	cs := s.ClustersetIP
	if cs.CIDR != netip.MustParsePrefix(DefaultClustersetIPCIDR) {
		t.Errorf("cidr %s, want the default %s", cs.CIDR, DefaultClustersetIPCIDR)
	}
	want := []ClustersetPort{{Proto: 6, Port: 80}, {Proto: 17, Port: 53}}
	if !slices.Equal(cs.Services[0].Ports, want) || cs.Services[1].Ports[0].Proto != 132 {
		t.Errorf("ports %v and %v, want %v and SCTP", cs.Services[0].Ports, cs.Services[1].Ports, want)
	}
	back := s.Config()
	again, err := back.Compile()
	if err != nil {
		t.Fatalf("the rendered config does not compile: %v", err)
	}
	if !reflect.DeepEqual(again.ClustersetIP, s.ClustersetIP) {
		t.Errorf("round trip changed the section:\n got %+v\nwant %+v", again.ClustersetIP, s.ClustersetIP)
	}
	if back.ClustersetIP.Services[0].Ports[0].Protocol != "TCP" {
		t.Errorf("rendered protocol %q, want TCP", back.ClustersetIP.Services[0].Ports[0].Protocol)
	}
}

func TestClustersetIPValidateNamesFieldAndFix(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*ClustersetIP)
		want   []string
	}{
		{"cidr not a CIDR", func(c *ClustersetIP) { c.CIDR = "243/8" }, []string{"clustersetIP.cidr", "243.0.0.0/8"}},
		{"cidr overlaps a cluster", func(c *ClustersetIP) { c.CIDR = "10.0.0.0/8" }, []string{"clustersetIP.cidr", "overlaps", "no cluster's pods or services"}},
		{"no SNAT address", func(c *ClustersetIP) { c.SNATAddress = "" }, []string{"clustersetIP.snatAddress", "is required"}},
		{"SNAT address outside the range", func(c *ClustersetIP) { c.SNATAddress = "10.1.2.3" }, []string{"clustersetIP.snatAddress", "not in clustersetIP.cidr"}},
		{"VIP outside the range", func(c *ClustersetIP) { c.Services[1].VIP = "244.0.0.1" }, []string{"clustersetIP.services[1].vip", "not in clustersetIP.cidr"}},
		{"VIP is the SNAT address", func(c *ClustersetIP) { c.Services[1].VIP = c.SNATAddress }, []string{"clustersetIP.services[1].vip", "snatAddress"}},
		{"duplicate VIP", func(c *ClustersetIP) { c.Services[1].VIP = c.Services[0].VIP }, []string{"clustersetIP.services[1].vip", "already the VIP of clustersetIP.services[0]"}},
		{"unknown protocol", func(c *ClustersetIP) { c.Services[0].Ports[1].Protocol = "QUIC" }, []string{"clustersetIP.services[0].ports[1].protocol", "TCP, UDP or SCTP"}},
		{"port out of range", func(c *ClustersetIP) { c.Services[0].Ports[0].Port = 0 }, []string{"clustersetIP.services[0].ports[0].port", "1 to 65535"}},
		{"duplicate port", func(c *ClustersetIP) { c.Services[0].Ports[1] = c.Services[0].Ports[0] }, []string{"clustersetIP.services[0].ports[1]", "list each port once"}},
		{"backend names no cluster", func(c *ClustersetIP) { c.Services[0].Backends[1].Cluster = "c9" }, []string{"clustersetIP.services[0].backends[1].cluster", `"c9"`, "cluster.id"}},
		{"cluster backs a VIP twice", func(c *ClustersetIP) { c.Services[0].Backends[1].Cluster = "c1" }, []string{"clustersetIP.services[0].backends[1].cluster", "already backends[0]"}},
		{"backend outside its cluster", func(c *ClustersetIP) { c.Services[0].Backends[1].Address = "10.88.0.10" }, []string{"clustersetIP.services[0].backends[1].address", `cluster "c2"`, "ClusterIP"}},
		{"backend not an address", func(c *ClustersetIP) { c.Services[1].Backends[0].Address = "svc" }, []string{"clustersetIP.services[1].backends[0].address", "not an IP address"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clustersetConfig()
			tc.mutate(c.ClustersetIP)
			wantInvalid(t, c, tc.want)
		})
	}
}

func TestClustersetIPRefusedWithGlobalnet(t *testing.T) {
	c := globalnetConfig()
	c.ClustersetIP = &ClustersetIP{SNATAddress: "243.1.255.254"}
	wantInvalid(t, c, []string{"clustersetIP", "globalnet", "remove the clustersetIP section, or turn Globalnet off"})
}

// TestClustersetIPSpecValidateNamesFieldAndFix checks the Spec the agent
// builds is judged with the file's field names.
func TestClustersetIPSpecValidateNamesFieldAndFix(t *testing.T) {
	c := clustersetConfig()
	s, err := c.Compile()
	if err != nil {
		t.Fatal(err)
	}
	s.ClustersetIP.Services[1].Backends[0].Cluster = "nowhere"
	s.ClustersetIP.Services[0].Ports[0].Proto = 47
	err = s.Validate()
	for _, want := range []string{"clustersetIP.services[1].backends[0].cluster", "clustersetIP.services[0].ports[0].protocol: 47"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to say %q", err, want)
		}
	}
}

// TestUpdateCarriesClustersetIPsInPlace checks that the clusterset IP
// section comes, changes and goes without a restart, and that a remote
// leaving with the VIPs it backed is taken in place too.
func TestUpdateCarriesClustersetIPsInPlace(t *testing.T) {
	c := threeRemotes()
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(s, Options{})
	g.attach(&nullTransport{}, "")
	serving := func() int {
		if g.clusterset.Load() == nil {
			return -1
		}
		return g.clustersetStatus().Services
	}

	with := clustersetConfig()
	with.Remotes = c.Remotes
	with.ClustersetIP.Services[1].Backends = append(with.ClustersetIP.Services[1].Backends, ClustersetIPBackend{Cluster: "c3", Address: "10.7.0.11"})
	updated(t, g, with)
	if got := serving(); got != 2 {
		t.Fatalf("serving %d VIPs after the section came, want 2", got)
	}

	gone := with
	gone.Remotes = with.Remotes[:1]
	cs := *with.ClustersetIP
	cs.Services = slices.Clone(cs.Services)
	cs.Services[1].Backends = cs.Services[1].Backends[:1]
	gone.ClustersetIP = &cs
	updated(t, g, gone)
	if got := serving(); got != 2 {
		t.Fatalf("serving %d VIPs after c3 left, want 2", got)
	}

	updated(t, g, c)
	if got := serving(); got != -1 {
		t.Fatalf("still serving clusterset IPs after the section went")
	}
}

// TestRunnerRoutesTheClustersetIPRange checks that a running gateway
// routes the clusterset IP range into its TUN, guarded, when the section
// comes, in place, and takes both away when it goes.
func TestRunnerRoutesTheClustersetIPRange(t *testing.T) {
	inFreshNetns(t, func() {
		ctx := context.Background()
		r := NewRunner(nil)
		defer r.Close()
		key := filepath.Join(t.TempDir(), "key")
		plain := validConfig()
		plain.TUN.Name = "snk-csip0"
		plain.Transport.WireGuard.PrivateKeyFile = key
		if err := r.Apply(ctx, mustCompile(t, plain)); err != nil {
			t.Error(err)
			return
		}
		first := linkIndex(t, "snk-csip0")
		if routed(t, "snk-csip0", DefaultClustersetIPCIDR) {
			t.Error("the clusterset IP range is routed without the section")
		}

		with := clustersetConfig()
		with.TUN, with.Transport = plain.TUN, plain.Transport
		if err := r.Apply(ctx, mustCompile(t, with)); err != nil {
			t.Error(err)
			return
		}
		if got := linkIndex(t, "snk-csip0"); got != first {
			t.Errorf("adding clusterset IPs recreated the TUN device (index %d, was %d)", got, first)
		}
		if !routed(t, "snk-csip0", DefaultClustersetIPCIDR) {
			t.Error("the clusterset IP range is not routed into the TUN")
		}
		if got := guardedNow(t); !slices.Contains(got, DefaultClustersetIPCIDR) {
			t.Errorf("guarded %v, want the clusterset IP range among them", got)
		}
		if st, _ := r.Stats(); st.ClustersetIP == nil || st.ClustersetIP.Services != 2 {
			t.Errorf("/status clusterset IPs %+v, want 2 services", st.ClustersetIP)
		}

		if err := r.Apply(ctx, mustCompile(t, plain)); err != nil {
			t.Error(err)
			return
		}
		if got := linkIndex(t, "snk-csip0"); got != first {
			t.Errorf("removing clusterset IPs recreated the TUN device")
		}
		if routed(t, "snk-csip0", DefaultClustersetIPCIDR) {
			t.Error("the clusterset IP range is still routed after the section went")
		}
		if got := guardedNow(t); slices.Contains(got, DefaultClustersetIPCIDR) {
			t.Errorf("guarded %v after the section went", got)
		}
	})
}

// TestClustersetIPStatusCountsByReason checks /status and the metrics
// carry the engine's counters.
func TestClustersetIPStatusCountsByReason(t *testing.T) {
	c := clustersetConfig()
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(s, Options{})
	g.attach(&nullTransport{}, "")
	if err := g.setClusterset(s, g.set.Load()); err != nil {
		t.Fatal(err)
	}
	// 243.1.0.6 serves SCTP 9000 alone.
	b := ipv4TCP(netip.MustParseAddr("10.8.0.7"), netip.MustParseAddr("243.1.0.6"), 60, true)
	var p packet.Parsed
	if r := p.Decode(b); r != packet.DropNone {
		t.Fatal(r)
	}
	if v := g.csEngine.Load().Egress(b, &p); v != natengine.VIPDrop {
		t.Fatalf("a packet to an unserved port went %v", v)
	}
	st := g.Stats().ClustersetIP
	if st == nil || st.Drops["port_not_served"] != 1 {
		t.Fatalf("status %+v, want one port_not_served drop", st)
	}
}

// TestClustersetIPEgressPaths drives the read loop: a packet to a VIP with
// a local backend is written back to the device from the SNAT address, one
// to a VIP backed remotely is sent to that remote with the client's own
// source, one too big for the tunnel is answered with a "fragmentation
// needed" that quotes the VIP, and one to an address of the range that is
// no VIP is dropped.
func TestClustersetIPEgressPaths(t *testing.T) {
	c := clustersetConfig()
	c.ClustersetIP.Services = append(c.ClustersetIP.Services, ClustersetIPService{VIP: "243.1.0.7",
		Ports: []ClustersetIPPort{{Port: 80}}, Backends: []ClustersetIPBackend{{Cluster: "c2", Address: "10.99.0.12"}}})
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(s, Options{})
	tr := &nullTransport{keep: true}
	g.attach(tr, "")
	if err := g.setClusterset(s, g.set.Load()); err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	dev := &replayDevice{reads: 1, keep: true, batch: [][]byte{
		ipv4TCP(c1Pod, a("243.1.0.5"), 64, true),
		ipv4TCP(c1Pod, a("243.1.0.7"), 64, true),
		ipv4TCP(c1Pod, a("243.1.0.7"), 1500, false),
		ipv4TCP(c1Pod, a("243.1.0.99"), 64, true),
	}}
	if err := g.readLoop(dev); err != nil {
		t.Fatal(err)
	}
	var p packet.Parsed
	if len(tr.sent) != 1 {
		t.Fatalf("sent %d packets to c2, want 1", len(tr.sent))
	}
	p.Decode(tr.sent[0])
	if p.SrcAddr() != c1Pod || p.DstAddr() != a("10.99.0.12") || p.DstPort != 80 {
		t.Errorf("sent %s:%d → %s:%d, want the client to the remote backend 10.99.0.12:80", p.SrcAddr(), p.SrcPort, p.DstAddr(), p.DstPort)
	}
	var local, tooBig int
	for _, b := range dev.wrote {
		p.Decode(b)
		switch {
		case p.Proto == packet.ProtoTCP && p.SrcAddr() == a("243.1.255.254") && p.DstAddr() == a("10.88.0.10"):
			local++
		case p.Proto == packet.ProtoICMPv4 && p.ICMPType == 3 && p.ICMPCode == 4 && p.DstAddr() == c1Pod:
			var q packet.Parsed
			if q.DecodeInner(b[p.IPHeaderLen+8:]) != packet.DropNone || q.DstAddr() != a("243.1.0.7") {
				t.Errorf("the ICMP error quotes a packet to %s, want the VIP", q.DstAddr())
			}
			tooBig++
		default:
			t.Errorf("unexpected packet written to the device: %+v", p)
		}
	}
	if local != 1 || tooBig != 1 {
		t.Errorf("wrote %d translated packets and %d ICMP errors to the device, want 1 and 1", local, tooBig)
	}
	st := g.Stats()
	if st.ClustersetIP.Drops["unknown_vip"] != 1 || st.Unattributed["too_big"] != 1 {
		t.Errorf("drops %v and %v, want one unknown_vip and one too_big", st.ClustersetIP.Drops, st.Unattributed)
	}
}

// TestClustersetIPBackendsFollowConnectionHealth checks what "up" means for
// a remote backend: with probes, answered probes; without, anything but a
// remote silent after it was heard.
func TestClustersetIPBackendsFollowConnectionHealth(t *testing.T) {
	g, _, _ := healthGateway(t)
	now := time.Now()
	p := g.set.Load().health.probers[0]
	if g.remoteUp(0) {
		t.Error("a probed remote counts as up before any probe was answered")
	}
	seq := p.next(now)
	p.reply(seq, now)
	if !g.remoteUp(0) {
		t.Error("a probed remote whose probe was answered counts as down")
	}
	// The probe after the answered one, then five lost in a row.
	for range 6 {
		p.next(now)
	}
	if g.remoteUp(0) {
		t.Error("a probed remote whose probes went unanswered counts as up")
	}

	plain, _ := testGateway(t)
	if !plain.remoteUp(0) {
		t.Error("a remote that is not probed and never heard from counts as down; nothing would ever try it")
	}
	c := plain.set.Load().bySlot[0].c
	c.lastRx.Store(plain.now.Load() - connectedWindow - 1)
	if plain.remoteUp(0) {
		t.Error("a remote silent for longer than the connected window counts as up")
	}
	if plain.remoteUp(7) {
		t.Error("a free slot counts as up")
	}
}
