package routeagent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrNextHopNotOnLink is why the kernel refuses a route via the active
// gateway's node: that node is not on a subnet this node is directly on.
var ErrNextHopNotOnLink = errors.New("the active gateway node is not on a subnet this node is directly connected to; " +
	"the route agent needs the gateway node on the same L2 subnet as the other nodes: label such a node submariner.io/gateway=true")

// routes are the route agent's routes in the main table: those of
// RouteProtocol.
func (n *node) routes() ([]netlink.Route, error) {
	return n.routesIn(unix.RT_TABLE_MAIN)
}

// routesIn lists the routes of RouteProtocol in table, or in every table
// if table is RT_TABLE_UNSPEC.
func (n *node) routesIn(table int) ([]netlink.Route, error) {
	filter := &netlink.Route{Protocol: RouteProtocol, Table: table}
	rs, err := n.nl.RouteListFiltered(netlink.FAMILY_V4, filter, netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("routeagent: list the routes of protocol %d: %w", RouteProtocol, err)
	}
	return rs, nil
}

// syncRoutes makes the route agent's routes in the main table exactly
// want: it replaces, one by one, those that differ (`ip route replace`
// swaps a route in place, so a destination is never without one) and then
// deletes those no longer wanted. It goes on past a route it cannot set,
// which it makes unreachable, and returns every error.
func (n *node) syncRoutes(want []route) error {
	have, err := n.routes()
	if err != nil {
		return err
	}
	current := make(map[netip.Prefix]netlink.Route, len(have))
	for _, r := range have {
		if r.Priority == RouteMetric {
			current[routeDst(r)] = r
		}
	}
	wanted := make(map[netip.Prefix]bool, len(want))
	var errs []error
	for _, w := range want {
		wanted[w.dst] = true
		if r, ok := current[w.dst]; ok && sameRoute(r, w) {
			continue
		}
		rt := netlinkRoute(w)
		err := n.nl.RouteReplace(&rt)
		if err == nil {
			continue
		}
		if errors.Is(err, unix.ENETUNREACH) {
			err = fmt.Errorf("%w (%w)", ErrNextHopNotOnLink, err)
		}
		errs = append(errs, fmt.Errorf("routeagent: ip route replace %s: %w", w, err))
		// Fail closed: a route the kernel refuses is unreachable until it
		// takes it, rather than keep a route to a gateway that is no
		// longer active, or none.
		if w.via.IsValid() {
			un := netlinkRoute(route{dst: w.dst})
			if err := n.nl.RouteReplace(&un); err != nil {
				errs = append(errs, fmt.Errorf("routeagent: ip route replace unreachable %s: %w", w.dst, err))
			}
		}
	}
	for _, r := range have {
		if wanted[routeDst(r)] && r.Priority == RouteMetric {
			continue
		}
		if err := n.nl.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("routeagent: delete the route to %s, no longer wanted: %w", routeDst(r), err))
		}
	}
	return errors.Join(errs...)
}

// removeRoutes deletes every route of RouteProtocol, in any table, and
// returns the destinations they covered.
func (n *node) removeRoutes() ([]netip.Prefix, error) {
	rs, err := n.routesIn(unix.RT_TABLE_UNSPEC)
	if err != nil {
		return nil, err
	}
	var removed []netip.Prefix
	var errs []error
	for _, r := range rs {
		if err := n.nl.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("routeagent: delete the route to %s: %w", routeDst(r), err))
			continue
		}
		removed = append(removed, routeDst(r))
	}
	return removed, errors.Join(errs...)
}

func netlinkRoute(w route) netlink.Route {
	rt := netlink.Route{
		Dst:      &net.IPNet{IP: w.dst.Addr().AsSlice(), Mask: net.CIDRMask(w.dst.Bits(), 32)},
		Protocol: RouteProtocol,
		Priority: RouteMetric,
		Table:    unix.RT_TABLE_MAIN,
	}
	if w.via.IsValid() {
		rt.Gw = w.via.AsSlice()
	} else {
		rt.Type = unix.RTN_UNREACHABLE
	}
	return rt
}

// sameRoute says the kernel's route r is already w.
func sameRoute(r netlink.Route, w route) bool {
	if !w.via.IsValid() {
		return r.Type == unix.RTN_UNREACHABLE
	}
	gw, _ := netip.AddrFromSlice(r.Gw)
	return r.Type == unix.RTN_UNICAST && len(r.MultiPath) == 0 && gw.Unmap() == w.via
}

// routeDst is the destination of r; the kernel reports a default route
// with no Dst.
func routeDst(r netlink.Route) netip.Prefix {
	if r.Dst == nil {
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	a, _ := netip.AddrFromSlice(r.Dst.IP)
	bits, _ := r.Dst.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits)
}
