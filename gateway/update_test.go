package gateway

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/packet"
)

// threeRemotes is validConfig with a second remote, c3.
func threeRemotes() Config {
	c := validConfig()
	c.Remotes = append(c.Remotes, Remote{ID: "c3", PodCIDRs: []string{"10.7.0.0/16"}, Endpoint: "198.18.0.3",
		WireGuard: &WireGuardRemoteConfig{PublicKey: "Rk5kWjB0dnpKd2hGbU9XYk1hVnJHdXV4SlN6UlZ0Qzg="}})
	return c
}

// updated derives c and applies it to g, failing t on an error.
func updated(t *testing.T, g *Gateway, c Config) {
	t.Helper()
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.update(s); err != nil {
		t.Fatal(err)
	}
}

func routeOf(g *Gateway, dst string) int {
	a := netip.MustParseAddr(dst)
	var p packet.Parsed
	p.Version = 4
	copy(p.Dst[:], a.AsSlice())
	return g.set.Load().routes.lookup(4, &p.Dst)
}

// TestUpdateTouchesOnlyTheRemoteThatChanged checks that a change to the
// remotes reaches the transport as exactly the peers that joined, changed
// or left, that every other remote keeps its slot and counters, that this
// cluster's own CIDRs grow in place, and that another local change is
// refused for a restart to handle.
func TestUpdateTouchesOnlyTheRemoteThatChanged(t *testing.T) {
	c := threeRemotes()
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(s, Options{})
	tr := &nullTransport{}
	g.attach(tr, "")
	g.set.Load().bySlot[0].c.txPackets.Add(7)
	step := func(name string, c Config, want ...string) {
		t.Helper()
		tr.changes = nil
		updated(t, g, c)
		if !slices.Equal(tr.changes, want) {
			t.Errorf("%s: transport changes %q, want %q", name, tr.changes, want)
		}
		if got := g.set.Load().bySlot[0].c.txPackets.Load(); got != 7 {
			t.Errorf("%s: c2's counters were reset (txPackets %d, want 7)", name, got)
		}
	}

	step("the same remotes", c)
	more := threeRemotes()
	more.Remotes = append(more.Remotes, Remote{ID: "c4", PodCIDRs: []string{"10.6.0.0/16"}, Endpoint: "198.18.0.4",
		WireGuard: &WireGuardRemoteConfig{PublicKey: "Rk5kWjB0dnpKd2hGbU9XYk1hVnJHdXV4SlN6UlZ0Qzk="}})
	step("c4 joins", more, "set 2=c4")
	if r := routeOf(g, "10.6.0.1"); r != 2 {
		t.Errorf("c4's CIDR routes to slot %d, want 2", r)
	}

	less := more
	less.Remotes = []Remote{more.Remotes[0], more.Remotes[2]}
	step("c3 leaves", less, "remove 1")
	if r := routeOf(g, "10.7.0.1"); r != noRoute {
		t.Errorf("c3's CIDR still routes to slot %d after it left", r)
	}
	if r := routeOf(g, "10.6.0.1"); r != 2 {
		t.Errorf("c4 moved to slot %d when c3 left, want it to keep 2", r)
	}

	moved := less
	moved.Remotes = slices.Clone(less.Remotes)
	moved.Remotes[0].Endpoint = "198.18.0.22"
	moved.Remotes[0].PodCIDRs = []string{"10.9.0.0/16", "10.19.0.0/16"}
	step("c2 moves and grows", moved, "set 0=c2")
	if r := routeOf(g, "10.19.0.1"); r != 0 {
		t.Errorf("c2's new CIDR routes to slot %d, want 0", r)
	}

	back := moved
	back.Remotes = append(slices.Clone(moved.Remotes), Remote{ID: "c5", PodCIDRs: []string{"10.5.0.0/16"}, Endpoint: "198.18.0.5",
		WireGuard: &WireGuardRemoteConfig{PublicKey: "Rk5kWjB0dnpKd2hGbU9XYk1hVnJHdXV4SlN6UlZ0QzA="}})
	step("c5 joins into the slot c3 left", back, "set 1=c5")

	grown := back
	grown.Cluster.PodCIDRs = []string{"10.8.0.0/16", "10.80.0.0/16"}
	// The cluster's own ranges are every IPsec peer's local selectors, so
	// each peer hears of them; none is replaced.
	step("this cluster's pod CIDRs grow", grown, "set 0=c2", "set 2=c4", "set 1=c5")
	var p packet.Parsed
	copy(p.Dst[:], netip.MustParseAddr("10.80.0.9").AsSlice())
	if g.set.Load().local.lookup(4, &p.Dst) == noRoute {
		t.Error("a packet to the cluster's new pod CIDR is not delivered locally")
	}

	renamed := grown
	renamed.TUN.Name = "snk-other"
	rs, err := renamed.build()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.update(rs); !errors.Is(err, ErrLocalChange) {
		t.Errorf("a new TUN device name was applied in place (err %v); it needs a new gateway", err)
	}

	// Every remote replaced at once: the leavers go first, so that the
	// newcomer may take an endpoint or a slot one of them had.
	replaced := grown
	replaced.Remotes = []Remote{{ID: "c6", PodCIDRs: []string{"10.9.0.0/16"}, Endpoint: "198.18.0.22",
		WireGuard: &WireGuardRemoteConfig{PublicKey: "Rk5kWjB0dnpKd2hGbU9XYk1hVnJHdXV4SlN6UlZ0QzE="}}}
	tr.changes = nil
	updated(t, g, replaced)
	if want := []string{"remove 0", "remove 1", "remove 2", "set 0=c6"}; !slices.Equal(tr.changes, want) {
		t.Errorf("every remote replaced: transport changes %q, want %q", tr.changes, want)
	}
	if got := g.set.Load().bySlot[0].c.txPackets.Load(); got != 0 {
		t.Errorf("c6 inherited c2's counters (txPackets %d)", got)
	}
}

// TestUpdateKeepsGlobalnetFlows checks that a remote joining leaves the
// Globalnet connection-tracking table, and every flow's global address, as
// it was.
func TestUpdateKeepsGlobalnetFlows(t *testing.T) {
	c := globalnetConfig()
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(s, Options{})
	if err := g.startNAT(); err != nil {
		t.Fatal(err)
	}
	g.attach(&nullTransport{}, "")
	e := g.xlate.(*natengine.Engine)
	pod, remote := netip.MustParseAddr("10.8.3.4"), netip.MustParseAddr("242.2.0.9")
	egress := func() netip.Addr {
		b := ipv4TCP(pod, remote, 60, true)
		var p packet.Parsed
		p.Decode(b)
		if !e.Egress(0, b, &p) {
			t.Fatal("the NAT engine dropped the flow's packet")
		}
		return netip.AddrFrom4([4]byte(p.Src[:4]))
	}
	before := egress()

	more := globalnetConfig()
	more.Remotes = append(more.Remotes, Remote{ID: "c3", GlobalCIDR: "242.3.0.0/16", Endpoint: "198.18.0.3",
		WireGuard: &WireGuardRemoteConfig{PublicKey: "Rk5kWjB0dnpKd2hGbU9XYk1hVnJHdXV4SlN6UlZ0Qzg="}})
	updated(t, g, more)
	if st := e.Stats(); st.Flows != 1 || st.Retired != 0 {
		t.Errorf("after c3 joined: %d flows, %d retired; want the one flow kept", st.Flows, st.Retired)
	}
	if after := egress(); after != before {
		t.Errorf("the flow left as %s before c3 joined and as %s after", before, after)
	}
	if st := e.Stats(); st.NewFlows != 1 {
		t.Errorf("the flow's next packet made a new flow (%d created)", st.NewFlows)
	}
}
