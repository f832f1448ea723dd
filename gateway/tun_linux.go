package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.zx2c4.com/wireguard/tun"
)

// System is what OpenTUN changed on the host for the life of the gateway, so
// that Undo can remove exactly that and nothing else. The guard is not part
// of it: it stays when the gateway goes.
type System struct {
	// Warning says what the gateway could not set up and what that
	// costs; empty when everything is in place.
	Warning string

	link    netlink.Link
	addr    *netlink.Addr
	tunAddr netip.Prefix
	routes  []netlink.Route
}

// tunTxQueueLen is the queue, in packets, between the kernel's routing into
// the TUN device and the gateway's reads. The device's default of 500
// overflowed in bursts while the read loop waited for a CPU: with 64-byte
// datagrams, the highest rate a VXLAN gateway forwarded with at most 0.1%
// lost rose from 33-37 to 44-62 thousand per second at 2000 (1000 gave
// 34-39), on two shared cores (README, Performance).
const tunTxQueueLen = 2000

// OpenTUN guards the remote clusters' CIDRs (guard.go), then creates the
// kernel TUN device cfg names with the given MTU, assigns its address,
// brings it up and routes those CIDRs into it. cfg must have passed
// Validate. Undo reverses the changes but the guard; closing the device
// alone would also remove them, as the device is not persistent.
func OpenTUN(cfg *Config, mtu int) (tun.Device, *System, error) {
	s, err := cfg.build()
	if err != nil {
		return nil, nil, err
	}
	return openTUN(s, mtu)
}

func openTUN(s *spec, mtu int) (tun.Device, *System, error) {
	// First: from the moment a CIDR is routed into the TUN, the device may
	// vanish with the process at any instant.
	if err := syncGuard(s, true); err != nil {
		return nil, nil, err
	}
	name := s.TUN.Name
	dev, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return nil, nil, fmt.Errorf("tun.name: cannot create TUN device %q (needs CAP_NET_ADMIN and /dev/net/tun): %w", name, err)
	}
	sys := &System{}
	fail := func(err error) (tun.Device, *System, error) {
		sys.Undo()
		dev.Close()
		return nil, nil, err
	}
	if sys.link, err = netlink.LinkByName(name); err != nil {
		return fail(fmt.Errorf("gateway: find %s: %w", name, err))
	}
	if s.tunAddr.IsValid() {
		sys.addr = &netlink.Addr{IPNet: prefixNet(s.tunAddr)}
		if err := netlink.AddrAdd(sys.link, sys.addr); err != nil {
			sys.addr = nil
			return fail(fmt.Errorf("tun.address: cannot assign %s to %s: %w", s.tunAddr, name, err))
		}
	}
	// No IPv6 link-local address: the kernel would otherwise send router
	// solicitations and MLD reports into the tunnel, which no remote wants.
	// Where IPv6 is disabled there is nothing to turn off.
	_ = netlink.LinkSetIP6AddrGenMode(sys.link, nl.IN6_ADDR_GEN_MODE_NONE)
	// The gateway's ICMP errors come from the device's own address; without
	// accept_local the kernel drops them as martians (a local source arriving
	// from outside), and pods never learn the path MTU. An unprivileged
	// container sees /proc/sys read-only: the gateway still carries traffic.
	if s.tunAddr.IsValid() && s.tunAddr.Addr().Is4() {
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+name+"/accept_local", []byte("1"), 0o644); err != nil {
			sys.Warning = fmt.Sprintf("cannot set net.ipv4.conf.%s.accept_local=1 (%v): the node drops the gateway's own ICMP errors, so pods may not learn the tunnel's path MTU; set it on the node, or lower the pods' MTU", name, err)
		}
	}
	if err := netlink.LinkSetTxQLen(sys.link, tunTxQueueLen); err != nil {
		return fail(fmt.Errorf("gateway: set the transmit queue of %s to %d packets: %w", name, tunTxQueueLen, err))
	}
	if err := netlink.LinkSetUp(sys.link); err != nil {
		return fail(fmt.Errorf("gateway: bring up %s: %w", name, err))
	}
	sys.tunAddr = s.tunAddr
	if err := sys.addRoutes(s); err != nil {
		return fail(err)
	}
	od, err := withOffloads(dev)
	if err != nil {
		return fail(fmt.Errorf("gateway: %s: %w", name, err))
	}
	return od, sys, nil
}

// addRoutes routes into the TUN every CIDR of s's remotes, and its
// clusterset IP range, that is not routed there yet, after guarding it.
func (sys *System) addRoutes(s *spec) error {
	if err := syncGuard(s, false); err != nil {
		return err
	}
	have := map[netip.Prefix]bool{}
	for _, rt := range sys.routes {
		have[routeDst(rt)] = true
	}
	for _, g := range s.guarded() {
		p := g.cidr
		if have[p] {
			continue
		}
		rt := netlink.Route{LinkIndex: sys.link.Attrs().Index, Dst: prefixNet(p), Scope: netlink.SCOPE_LINK}
		if sys.tunAddr.IsValid() && sys.tunAddr.Addr().Is4() == p.Addr().Is4() {
			rt.Src = sys.tunAddr.Addr().AsSlice()
		}
		if err := netlink.RouteAdd(&rt); err != nil {
			return fmt.Errorf("%s: cannot route %s to %s (does another route cover it?): %w", g.field(), p, sys.link.Attrs().Name, err)
		}
		sys.routes = append(sys.routes, rt)
		have[p] = true
	}
	return nil
}

// pruneRoutes removes the TUN's routes, and the guard, of CIDRs no remote
// of s has any more, and of a clusterset IP range s no longer has.
func (sys *System) pruneRoutes(s *spec) error {
	want := map[netip.Prefix]bool{}
	for _, g := range s.guarded() {
		want[g.cidr] = true
	}
	var errs []error
	kept := sys.routes[:0]
	for _, rt := range sys.routes {
		if want[routeDst(rt)] {
			kept = append(kept, rt)
			continue
		}
		if err := netlink.RouteDel(&rt); err != nil {
			errs = append(errs, fmt.Errorf("gateway: remove route %s: %w", rt.Dst, err))
		}
	}
	sys.routes = kept
	return errors.Join(append(errs, syncGuard(s, true))...)
}

// Undo removes the TUN's routes and address OpenTUN added, in reverse order.
// The guard stays, so the remotes' traffic is dropped from here on.
func (s *System) Undo() error {
	if s == nil {
		return nil
	}
	var errs []error
	for i := len(s.routes) - 1; i >= 0; i-- {
		if err := netlink.RouteDel(&s.routes[i]); err != nil {
			errs = append(errs, fmt.Errorf("gateway: remove route %s: %w", s.routes[i].Dst, err))
		}
	}
	s.routes = nil
	if s.addr != nil {
		if err := netlink.AddrDel(s.link, s.addr); err != nil {
			errs = append(errs, fmt.Errorf("gateway: remove address %s: %w", s.addr.IPNet, err))
		}
		s.addr = nil
	}
	return errors.Join(errs...)
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
