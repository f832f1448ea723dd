package gateway

import (
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// inFreshNetns runs f on a thread inside a new, empty network namespace,
// which disappears with the thread's last reference.
func inFreshNetns(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace and a TUN device")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		// The thread is left locked and so dies with the goroutine: it
		// never returns to the pool inside the test namespace.
		orig, err := netns.Get()
		if err != nil {
			t.Error(err)
			return
		}
		defer orig.Close()
		ns, err := netns.New()
		if err != nil {
			t.Error(err)
			return
		}
		defer ns.Close()
		f()
	}()
	<-done
}

func TestOpenTUNInstallsAndUndoRemovesRoutes(t *testing.T) {
	inFreshNetns(t, func() {
		c := validConfig()
		c.TUN = TUN{Name: "snk-test0", Address: "10.8.255.254"}
		if err := c.Validate(); err != nil {
			t.Error(err)
			return
		}
		dev, sys, err := OpenTUN(&c, 1440)
		if err != nil {
			t.Error(err)
			return
		}
		defer dev.Close()
		link, err := netlink.LinkByName("snk-test0")
		if err != nil {
			t.Error(err)
			return
		}
		if link.Attrs().TxQLen != tunTxQueueLen {
			t.Errorf("link txqueuelen %d, want %d", link.Attrs().TxQLen, tunTxQueueLen)
		}
		if link.Attrs().MTU != 1440 || link.Attrs().Flags&1 == 0 {
			t.Errorf("link mtu %d flags %v, want 1440 and up", link.Attrs().MTU, link.Attrs().Flags)
		}
		routes, _ := netlink.RouteList(link, netlink.FAMILY_V4)
		want := map[string]bool{"10.9.0.0/16": false, "10.99.0.0/16": false}
		for _, r := range routes {
			if r.Dst != nil {
				if _, ok := want[r.Dst.String()]; ok {
					want[r.Dst.String()] = true
				}
			}
		}
		for dst, found := range want {
			if !found {
				t.Errorf("no route to %s through the TUN device; routes %v", dst, routes)
			}
		}
		addrs, _ := netlink.AddrList(link, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IP.String() != "10.8.255.254" {
			t.Errorf("addresses %v, want 10.8.255.254", addrs)
		}
		if err := sys.Undo(); err != nil {
			t.Error(err)
		}
		routes, _ = netlink.RouteList(link, netlink.FAMILY_V4)
		addrs, _ = netlink.AddrList(link, netlink.FAMILY_V4)
		for _, r := range routes {
			if r.Dst != nil && (r.Dst.String() == "10.9.0.0/16" || r.Dst.String() == "10.99.0.0/16") {
				t.Errorf("route %s left after Undo", r.Dst)
			}
		}
		if len(addrs) != 0 {
			t.Errorf("addresses %v left after Undo", addrs)
		}
	})
}

func TestOpenTUNRefusesARouteThatIsTaken(t *testing.T) {
	inFreshNetns(t, func() {
		lo, _ := netlink.LinkByName("lo")
		netlink.LinkSetUp(lo)
		_, dst, _ := net.ParseCIDR("10.99.0.0/16")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: dst}); err != nil {
			t.Error(err)
			return
		}
		c := validConfig()
		c.TUN = TUN{Name: "snk-test1"}
		_, _, err := OpenTUN(&c, 1440)
		if err == nil {
			t.Error("OpenTUN succeeded although 10.99.0.0/16 is already routed")
			return
		}
		if _, lerr := netlink.LinkByName("snk-test1"); lerr == nil {
			t.Error("the TUN device outlived the failed OpenTUN")
		}
		t.Logf("refused with: %v", err)
	})
}

func TestOpenTUNRoutesGlobalCIDRsWithGlobalnet(t *testing.T) {
	inFreshNetns(t, func() {
		c := globalnetConfig()
		c.TUN.Name = "snk-test2"
		dev, sys, err := OpenTUN(&c, 1440)
		if err != nil {
			t.Error(err)
			return
		}
		defer dev.Close()
		defer sys.Undo()
		link, err := netlink.LinkByName("snk-test2")
		if err != nil {
			t.Error(err)
			return
		}
		routes, _ := netlink.RouteList(link, netlink.FAMILY_V4)
		var dsts []string
		for _, r := range routes {
			if r.Dst != nil && r.Protocol != unix.RTPROT_KERNEL {
				dsts = append(dsts, r.Dst.String())
			}
		}
		// The remote's pod and service CIDRs are this cluster's own: only
		// its global CIDR may point into the tunnel.
		if len(dsts) != 1 || dsts[0] != "242.2.0.0/16" {
			t.Errorf("routes through the TUN device %v, want only the remote's global CIDR 242.2.0.0/16", dsts)
		}
	})
}
