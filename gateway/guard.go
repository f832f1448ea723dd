package gateway

import (
	"fmt"
	"net/netip"
)

// The guard keeps traffic for remote clusters from leaving in cleartext
// when the gateway is not there to carry it. The TUN device is not
// persistent: when the gateway exits, is killed or restarts, the kernel
// deletes the device and the routes OpenTUN gave it, and a node with a
// default route would then forward pod traffic for a remote cluster onto
// the underlay unencrypted. So before routing the remotes' CIDRs into the
// TUN, OpenTUN installs an unreachable route for each of them that belongs
// to no device: it loses to the TUN's route while that exists and drops the
// traffic (telling the sender at once) when it does not. The guard outlives
// the process on purpose; only RemoveGuard (`snorkel gateway --uninstall`)
// takes it away.
const (
	// GuardProtocol tags the guard's routes (the rtnetlink protocol, `ip
	// route ... proto 83`), as routing daemons tag theirs, so that
	// RemoveGuard finds exactly them without the configuration that made
	// them. 83 is neither reserved by the kernel nor used by a routing
	// daemon or CNI we know of (Calico's Felix uses 80, BIRD 12).
	GuardProtocol = 83
	// GuardMetric is the guard routes' metric. It must be above the
	// metric of the TUN's routes in both families so that those win while
	// they exist: 0 for IPv4, and 1024 for IPv6, where the kernel gives a
	// route added without a metric 1024.
	GuardMetric = 2048
)

// guarded is what the guard covers: every CIDR OpenTUN routes into the TUN
// device, paired with the index of the remote it belongs to (-1 for the
// clusterset IP range) so that an error can name the field.
func (s *spec) guarded() []guardedCIDR {
	var g []guardedCIDR
	for i, r := range s.remotes {
		for _, p := range r.cidrs {
			g = append(g, guardedCIDR{remote: i, cidr: p})
		}
	}
	if c := s.clusterset; c != nil {
		g = append(g, guardedCIDR{remote: -1, cidr: c.cidr})
	}
	return g
}

type guardedCIDR struct {
	remote int
	cidr   netip.Prefix
}

// field names where the CIDR was configured.
func (g guardedCIDR) field() string {
	if g.remote < 0 {
		return "clustersetIP.cidr"
	}
	return fmt.Sprintf("remotes[%d]", g.remote)
}
