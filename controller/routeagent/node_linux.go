package routeagent

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// node is the network of the node the route agent runs on: its routing
// table, its nftables and its forwarding sysctl, in one network namespace.
// The handles reach into that namespace from any goroutine, so the agent's
// own goroutines stay in the process's namespace, where its API server is.
type node struct {
	nl  *netlink.Handle
	nft *nftables.Conn
	// ns is the namespace, or netns.None() for the process's own.
	ns netns.NsHandle
}

// openNode opens the network namespace ns, or the process's own for
// netns.None(). The caller keeps ns open until it closes the node.
func openNode(ns netns.NsHandle) (*node, error) {
	nl, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("routeagent: netlink: %w", err)
	}
	var opts []nftables.ConnOption
	if ns.IsOpen() {
		opts = append(opts, nftables.WithNetNSFd(int(ns)))
	}
	nft, err := nftables.New(opts...)
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("routeagent: nftables: %w", err)
	}
	return &node{nl: nl, nft: nft, ns: ns}, nil
}

func (n *node) close() { n.nl.Close() }

// forwardingSysctl is net.ipv4.ip_forward, which a gateway node needs on to
// pass the other nodes' traffic into the TUN device.
const forwardingSysctl = "/proc/sys/net/ipv4/ip_forward"

// forwarding reads net.ipv4.ip_forward in the node's namespace.
func (n *node) forwarding() (bool, error) {
	var b []byte
	err := n.do(func() error {
		var err error
		// /proc/sys/net resolves against the opening thread's namespace.
		b, err = os.ReadFile(forwardingSysctl)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("routeagent: reading net.ipv4.ip_forward: %w", err)
	}
	return strings.TrimSpace(string(b)) != "0", nil
}

// do runs f on a thread in the node's namespace: what has no handle that
// reaches into a namespace, as /proc/sys/net has not.
func (n *node) do(f func() error) error {
	if !n.ns.IsOpen() {
		return f()
	}
	errc := make(chan error, 1)
	// A fresh goroutine whose thread, if it cannot return to the
	// process's namespace, stays locked and ends with it rather than
	// serve other goroutines in the wrong namespace.
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(n.ns); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		ferr := f()
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// Uninstall removes from the node, in the process's network namespace,
// every route of RouteProtocol and the nftables table: what `snorkel
// route-agent --uninstall` does once the route agent no longer runs there.
// It returns the CIDRs the routes covered and whether there was a table.
// Traffic to those CIDRs then follows the node's other routes, the default
// route included.
func Uninstall() (routes []netip.Prefix, table bool, err error) {
	n, err := openNode(netns.None())
	if err != nil {
		return nil, false, err
	}
	defer n.close()
	routes, rerr := n.removeRoutes()
	table, terr := n.removeBypass()
	return routes, table, errors.Join(rerr, terr)
}
