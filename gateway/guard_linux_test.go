package gateway

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// enterFreshNetns moves the test's goroutine into a new, empty network
// namespace for the rest of the test. Unlike inFreshNetns it lets the test
// use t.Fatal: the goroutine is the test's own. Its thread stays locked, so
// the runtime ends the thread with the test instead of handing it, still
// inside the namespace, to another goroutine.
func enterFreshNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace and a TUN device")
	}
	runtime.LockOSThread()
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
}

// withUnderlay gives the current namespace a device with a default route
// out of it, as a node has: without the guard, traffic to a remote cluster
// would leave through it once the TUN is gone.
func withUnderlay(t *testing.T) netlink.Link {
	t.Helper()
	ul := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "snk-ul"}, PeerName: "snk-ul-peer"}
	if err := netlink.LinkAdd(ul); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"snk-ul", "snk-ul-peer"} {
		if err := netlink.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	addr, _ := netlink.ParseAddr("198.18.0.1/24")
	if err := netlink.AddrAdd(ul, addr); err != nil {
		t.Fatal(err)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: ul.Attrs().Index, Gw: net.ParseIP("198.18.0.2")}); err != nil {
		t.Fatal(err)
	}
	return ul
}

// guardedNow lists the destinations of the guard's routes in the main
// table, sorted, checking that each is the route the guard means.
func guardedNow(t *testing.T) []string {
	t.Helper()
	rs, err := guardRoutes(unix.RT_TABLE_MAIN)
	if err != nil {
		t.Fatal(err)
	}
	var dsts []string
	for _, r := range rs {
		if r.Type != unix.RTN_UNREACHABLE || r.Priority != GuardMetric || r.LinkIndex != 0 && r.Family == netlink.FAMILY_V4 {
			t.Errorf("guard route %s: type %d metric %d link %d, want unreachable (%d), metric %d, no device", r.Dst, r.Type, r.Priority, r.LinkIndex, unix.RTN_UNREACHABLE, GuardMetric)
		}
		dsts = append(dsts, routeDst(r).String())
	}
	slices.Sort(dsts)
	return dsts
}

// via says where the kernel sends a packet to dst: the device's name, or
// "unreachable" when a route refuses it.
func via(t *testing.T, dst string) string {
	t.Helper()
	rs, err := netlink.RouteGet(net.ParseIP(dst))
	if errors.Is(err, unix.EHOSTUNREACH) || errors.Is(err, unix.ENETUNREACH) {
		return "unreachable"
	}
	if err != nil {
		t.Fatalf("route to %s: %v", dst, err)
	}
	l, err := netlink.LinkByIndex(rs[0].LinkIndex)
	if err != nil {
		t.Fatalf("route to %s: device %d: %v", dst, rs[0].LinkIndex, err)
	}
	return l.Attrs().Name
}

func TestGuardDropsTheRemotesTrafficOnceTheTUNIsGone(t *testing.T) {
	enterFreshNetns(t)
	withUnderlay(t)
	c := validConfig()
	c.TUN.Name = "snk-guard0"
	c.Remotes[0].PodCIDRs = append(c.Remotes[0].PodCIDRs, "fd00:9::/64")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := via(t, "10.9.0.11"); got != "snk-ul" {
		t.Fatalf("before the gateway, 10.9.0.11 goes via %s, want the default route's snk-ul", got)
	}
	dev, sys, err := OpenTUN(&c, 1440)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.9.0.0/16", "10.99.0.0/16", "fd00:9::/64"}
	if got := guardedNow(t); !slices.Equal(got, want) {
		t.Errorf("guarded %v, want %v", got, want)
	}
	for _, dst := range []string{"10.9.0.11", "10.99.0.10", "fd00:9::11"} {
		if got := via(t, dst); got != "snk-guard0" {
			t.Errorf("with the gateway up, %s goes via %s, want the TUN: the guard must lose to the TUN's routes", dst, got)
		}
	}
	if err := sys.Undo(); err != nil {
		t.Error(err)
	}
	dev.Close()
	if _, err := netlink.LinkByName("snk-guard0"); err == nil {
		t.Fatal("the TUN device outlived its close")
	}
	if got := guardedNow(t); !slices.Equal(got, want) {
		t.Errorf("after the gateway went, guarded %v, want %v still", got, want)
	}
	for _, dst := range []string{"10.9.0.11", "10.99.0.10", "fd00:9::11"} {
		if got := via(t, dst); got != "unreachable" {
			t.Errorf("with the gateway gone, %s goes via %s, want unreachable", dst, got)
		}
	}
	if got := via(t, "10.10.0.1"); got != "snk-ul" {
		t.Errorf("an address of no remote goes via %s, want the default route's snk-ul", got)
	}
}

func TestGuardFollowsTheRemotes(t *testing.T) {
	enterFreshNetns(t)
	c := validConfig()
	c.TUN.Name = "snk-guard1"
	dev, sys, err := OpenTUN(&c, 1440)
	if err != nil {
		t.Fatal(err)
	}
	sys.Undo()
	dev.Close()

	// c2 leaves, c3 joins.
	c.Remotes[0].ID = "c3"
	c.Remotes[0].PodCIDRs = []string{"10.7.0.0/16"}
	c.Remotes[0].ServiceCIDRs = []string{"10.99.0.0/16"}
	dev, sys, err = OpenTUN(&c, 1440)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	defer sys.Undo()
	if got, want := guardedNow(t), []string{"10.7.0.0/16", "10.99.0.0/16"}; !slices.Equal(got, want) {
		t.Errorf("guarded %v, want %v: the guard of a remote that left must go, a new one's come", got, want)
	}
}

// routesNow lists every route of every table but the kernel's own, each
// as one line, sorted.
func routesNow(t *testing.T) []string {
	t.Helper()
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		if r.Protocol != unix.RTPROT_KERNEL {
			out = append(out, r.String()+" proto "+r.Protocol.String())
		}
	}
	slices.Sort(out)
	return out
}

func TestRemoveGuardRemovesTheGuardAndNothingElse(t *testing.T) {
	enterFreshNetns(t)
	ul := withUnderlay(t)
	// Routes someone else made: one to a remote's CIDR in another
	// table, a blackhole of another protocol, one to a CIDR next to
	// a remote's.
	for _, r := range []netlink.Route{
		{LinkIndex: ul.Attrs().Index, Dst: prefixNet(netip.MustParsePrefix("10.9.0.0/16")), Table: 100},
		{Dst: prefixNet(netip.MustParsePrefix("10.50.0.0/16")), Type: unix.RTN_BLACKHOLE, Protocol: unix.RTPROT_STATIC},
		{LinkIndex: ul.Attrs().Index, Dst: prefixNet(netip.MustParsePrefix("10.98.0.0/16")), Gw: net.ParseIP("198.18.0.3")},
	} {
		if err := netlink.RouteAdd(&r); err != nil {
			t.Fatalf("route %s: %v", r, err)
		}
	}
	before := routesNow(t)
	c := validConfig()
	c.TUN.Name = "snk-guard2"
	dev, sys, err := OpenTUN(&c, 1440)
	if err != nil {
		t.Fatal(err)
	}
	sys.Undo()
	dev.Close()
	removed, err := RemoveGuard()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range removed {
		got = append(got, p.String())
	}
	slices.Sort(got)
	if want := []string{"10.9.0.0/16", "10.99.0.0/16"}; !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
	if after := routesNow(t); !slices.Equal(after, before) {
		t.Errorf("routes after RemoveGuard differ from before the gateway:\n  before %s\n  after  %s", strings.Join(before, "\n         "), strings.Join(after, "\n         "))
	}
	if removed, err := RemoveGuard(); err != nil || len(removed) != 0 {
		t.Errorf("a second RemoveGuard removed %v (%v), want nothing", removed, err)
	}
}
