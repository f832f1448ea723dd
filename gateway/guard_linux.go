package gateway

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// syncGuard adds the guard's routes for the CIDRs of s that lack one and,
// with prune, then removes those of remotes that have left the
// configuration, so that no CIDR still configured is ever unguarded.
func syncGuard(s *spec, prune bool) error {
	rs, err := guardRoutes(unix.RT_TABLE_MAIN)
	if err != nil {
		return err
	}
	have := make(map[netip.Prefix]bool, len(rs))
	for _, r := range rs {
		have[routeDst(r)] = true
	}
	want := map[netip.Prefix]bool{}
	for _, g := range s.guarded() {
		want[g.cidr] = true
		if have[g.cidr] {
			continue
		}
		rt := guardRoute(g.cidr)
		if err := netlink.RouteAdd(&rt); err != nil {
			return fmt.Errorf("%s: cannot guard %s with an unreachable route (metric %d) against leaving in cleartext while the gateway is down; is another route with that metric there? (%w)", g.field(), g.cidr, GuardMetric, err)
		}
	}
	if !prune {
		return nil
	}
	var errs []error
	for _, r := range rs {
		if p := routeDst(r); !want[p] {
			if err := netlink.RouteDel(&r); err != nil {
				errs = append(errs, fmt.Errorf("gateway: remove the guard route for %s, whose remote has left: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// RemoveGuard deletes every guard route (those with protocol GuardProtocol,
// in any table) and returns the CIDRs they covered. Traffic to those CIDRs
// then follows whatever other route the node has, the default route
// included: call it only when Snorkel leaves the node.
func RemoveGuard() ([]netip.Prefix, error) {
	rs, err := guardRoutes(unix.RT_TABLE_UNSPEC)
	if err != nil {
		return nil, err
	}
	var removed []netip.Prefix
	var errs []error
	for _, r := range rs {
		if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("gateway: remove the guard route for %s: %w", routeDst(r), err))
			continue
		}
		removed = append(removed, routeDst(r))
	}
	return removed, errors.Join(errs...)
}

// guardRoutes lists the guard's routes in table, or in every table if table
// is RT_TABLE_UNSPEC.
func guardRoutes(table int) ([]netlink.Route, error) {
	filter := &netlink.Route{Protocol: GuardProtocol, Table: table}
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("gateway: list the guard's routes (protocol %d): %w", GuardProtocol, err)
	}
	return rs, nil
}

// routeDst is a route's destination; the kernel reports a default route
// with none.
func routeDst(r netlink.Route) netip.Prefix {
	if r.Dst == nil {
		if r.Family == netlink.FAMILY_V6 {
			return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	a, _ := netip.AddrFromSlice(r.Dst.IP)
	bits, _ := r.Dst.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits)
}

func guardRoute(p netip.Prefix) netlink.Route {
	return netlink.Route{
		Dst:      prefixNet(p),
		Type:     unix.RTN_UNREACHABLE,
		Protocol: GuardProtocol,
		Priority: GuardMetric,
		Table:    unix.RT_TABLE_MAIN,
	}
}
