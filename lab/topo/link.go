package topo

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Veth connects namespace a to namespace b with a veth pair, named aName in a
// and bName in b, and sets both ends up. The pair is created straight into
// the two namespaces so that it never appears in the caller's.
func Veth(a *NS, aName string, b *NS, bName string) error {
	nl, err := a.netlink()
	if err != nil {
		return err
	}
	if _, err := b.netlink(); err != nil {
		return err
	}
	b.mu.Lock()
	peer := b.handle
	b.mu.Unlock()
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: aName},
		PeerName:      bName,
		PeerNamespace: netlink.NsFd(peer),
	}
	if err := nl.LinkAdd(v); err != nil {
		return fmt.Errorf("topo: veth %s/%s - %s/%s: %w", a.name, aName, b.name, bName, err)
	}
	if err := a.LinkUp(aName); err != nil {
		return err
	}
	return b.LinkUp(bName)
}

// Bridge creates a bridge and sets it up.
func (n *NS) Bridge(name string) error {
	nl, err := n.netlink()
	if err != nil {
		return err
	}
	if err := nl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		return fmt.Errorf("topo: bridge %s in %s: %w", name, n.name, err)
	}
	return n.LinkUp(name)
}

// SetMaster enslaves link to bridge.
func (n *NS) SetMaster(link, bridge string) error {
	nl, l, err := n.link(link)
	if err != nil {
		return err
	}
	br, err := nl.LinkByName(bridge)
	if err != nil {
		return fmt.Errorf("topo: bridge %s in %s: %w", bridge, n.name, err)
	}
	if err := nl.LinkSetMaster(l, br); err != nil {
		return fmt.Errorf("topo: %s master %s in %s: %w", link, bridge, n.name, err)
	}
	return nil
}

// LinkUp sets a link up.
func (n *NS) LinkUp(link string) error {
	nl, l, err := n.link(link)
	if err != nil {
		return err
	}
	if err := nl.LinkSetUp(l); err != nil {
		return fmt.Errorf("topo: set %s up in %s: %w", link, n.name, err)
	}
	return nil
}

// LinkDown sets a link down; the kernel drops the routes through it.
func (n *NS) LinkDown(link string) error {
	nl, l, err := n.link(link)
	if err != nil {
		return err
	}
	if err := nl.LinkSetDown(l); err != nil {
		return fmt.Errorf("topo: set %s down in %s: %w", link, n.name, err)
	}
	return nil
}

// SetMTU sets a link's MTU.
func (n *NS) SetMTU(link string, mtu int) error {
	nl, l, err := n.link(link)
	if err != nil {
		return err
	}
	if err := nl.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("topo: set %s mtu %d in %s: %w", link, mtu, n.name, err)
	}
	return nil
}

// HasLink reports whether the namespace has a link of that name.
func (n *NS) HasLink(link string) bool {
	_, _, err := n.link(link)
	return err == nil
}

// AddAddr assigns an address with its prefix length to a link
// ("10.8.0.11/32").
func (n *NS) AddAddr(link string, addr netip.Prefix) error {
	nl, l, err := n.link(link)
	if err != nil {
		return err
	}
	a := &netlink.Addr{IPNet: ipNet(addr)}
	if err := nl.AddrAdd(l, a); err != nil {
		return fmt.Errorf("topo: address %s on %s in %s: %w", addr, link, n.name, err)
	}
	return nil
}

// Route is a unicast route. Dst is required; a route with Via goes through
// that gateway, one with only Dev is on-link (scope link).
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
	Dev string
}

func (r Route) String() string {
	s := r.Dst.String()
	if r.Via.IsValid() {
		s += " via " + r.Via.String()
	}
	if r.Dev != "" {
		s += " dev " + r.Dev
	}
	return s
}

// AddRoute adds a route.
func (n *NS) AddRoute(r Route) error {
	nl, err := n.netlink()
	if err != nil {
		return err
	}
	nr := &netlink.Route{Dst: ipNet(r.Dst)}
	if r.Dev != "" {
		_, l, err := n.link(r.Dev)
		if err != nil {
			return err
		}
		nr.LinkIndex = l.Attrs().Index
	}
	switch {
	case r.Via.IsValid():
		nr.Gw = r.Via.AsSlice()
	case r.Dev != "":
		nr.Scope = netlink.SCOPE_LINK
	default:
		return fmt.Errorf("topo: route %s in %s: give Via or Dev", r, n.name)
	}
	if err := nl.RouteAdd(nr); err != nil {
		return fmt.Errorf("topo: route %s in %s: %w", r, n.name, err)
	}
	return nil
}

// Routes returns the IPv4 routes of the main table, or only those through
// dev if it is not empty.
func (n *NS) Routes(dev string) ([]Route, error) {
	nl, err := n.netlink()
	if err != nil {
		return nil, err
	}
	var link netlink.Link
	if dev != "" {
		if _, link, err = n.link(dev); err != nil {
			return nil, err
		}
	}
	rs, err := nl.RouteList(link, unix.AF_INET)
	if err != nil {
		return nil, fmt.Errorf("topo: routes in %s: %w", n.name, err)
	}
	names := map[int]string{}
	out := make([]Route, 0, len(rs))
	for _, r := range rs {
		var rt Route
		if r.Dst != nil {
			rt.Dst = prefixOf(r.Dst)
		} else {
			rt.Dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		}
		if gw, ok := netip.AddrFromSlice(r.Gw); ok {
			rt.Via = gw.Unmap()
		}
		if r.LinkIndex > 0 {
			name, ok := names[r.LinkIndex]
			if !ok {
				if l, err := nl.LinkByIndex(r.LinkIndex); err == nil {
					name = l.Attrs().Name
				}
				names[r.LinkIndex] = name
			}
			rt.Dev = name
		}
		out = append(out, rt)
	}
	return out, nil
}

func (n *NS) link(name string) (*netlink.Handle, netlink.Link, error) {
	nl, err := n.netlink()
	if err != nil {
		return nil, nil, err
	}
	l, err := nl.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			err = os.ErrNotExist
		}
		return nil, nil, fmt.Errorf("topo: link %s in %s: %w", name, n.name, err)
	}
	return nl, l, nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func prefixOf(n *net.IPNet) netip.Prefix {
	a, _ := netip.AddrFromSlice(n.IP)
	bits, _ := n.Mask.Size()
	a = a.Unmap()
	return netip.PrefixFrom(a, bits)
}
