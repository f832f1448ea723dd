package globalnet

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/snorkel-net/snorkel/natengine"
)

// Config configures an IPAM.
type Config struct {
	// ClusterID is this cluster's ID, for logs.
	ClusterID string
	// GlobalCIDR is this cluster's global CIDR, IPv4, /8 to /30 (Submariner
	// gives each cluster a /16 of 242.0.0.0/8).
	GlobalCIDR netip.Prefix
	// Local is the cluster's API; LocalConfig reaches the same server for
	// the submariner.io and ServiceExport objects.
	Local       kubernetes.Interface
	LocalConfig *rest.Config
	// ClusterCIDRs and ServiceCIDRs are the cluster's pod and service
	// ranges: Rules.Local, and the only addresses the rules translate to.
	ClusterCIDRs []netip.Prefix
	ServiceCIDRs []netip.Prefix
	// OnRules receives a fresh snapshot whenever the translation changes.
	// The Rules are the receiver's: the IPAM never changes them afterwards.
	OnRules func(natengine.Rules)
	// OnGlobalIP is told the namespace and name of an exported service
	// whose global IP, or one of whose headless pods' global IPs, appeared,
	// changed or went; it is called after the OnRules that carries the
	// change.
	OnGlobalIP func(namespace, service string)
	// Log receives the IPAM's logs; default slog.Default().
	Log *slog.Logger
	// Registerer, when set, gets the allocation gauges under Submariner's
	// names (submariner_global_IP_availability and the *_allocated ones),
	// labelled with GlobalCIDR.
	Registerer prometheus.Registerer
}

// linkLocal is never used for Globalnet: Calico routes pods through it.
var linkLocal = netip.MustParsePrefix("169.254.0.0/16")

// validate checks c, naming the field at fault and the fix.
func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("globalnet: "+format, args...)) }
	if c.ClusterID == "" {
		bad("Config.ClusterID is empty; give this cluster's ID")
	}
	g := c.GlobalCIDR
	switch {
	case !g.IsValid():
		bad("Config.GlobalCIDR is not set; give this cluster's global CIDR, like 242.1.0.0/16")
	case !g.Addr().Is4():
		bad("Config.GlobalCIDR %s is not IPv4; Globalnet's global CIDRs are IPv4, like 242.1.0.0/16", g)
	case g.Bits() < natengine.MinPoolBits || g.Bits() > natengine.MaxPoolBits:
		bad("Config.GlobalCIDR %s is a /%d; use a /%d to a /%d (Submariner uses a /16 per cluster)", g, g.Bits(), natengine.MinPoolBits, natengine.MaxPoolBits)
	case g.Overlaps(linkLocal):
		bad("Config.GlobalCIDR %s overlaps %s, which Calico uses; choose another range", g, linkLocal)
	}
	if c.Local == nil {
		bad("Config.Local is nil; give a client of the cluster's API server")
	}
	if c.LocalConfig == nil {
		bad("Config.LocalConfig is nil; give the rest.Config of the cluster's API server")
	}
	cidrs := func(field string, ps []netip.Prefix) {
		if len(ps) == 0 {
			bad("Config.%s is empty; give the cluster's ranges", field)
		}
		for i, p := range ps {
			switch {
			case !p.IsValid():
				bad("Config.%s[%d] is not a valid prefix; give a CIDR like 10.42.0.0/16", field, i)
			case p.Overlaps(linkLocal):
				bad("Config.%s[%d] %s overlaps %s, which Globalnet never translates; remove it", field, i, p, linkLocal)
			case g.IsValid() && p.Overlaps(g):
				bad("Config.%s[%d] %s overlaps Config.GlobalCIDR %s; the global CIDR must lie outside the cluster's own ranges", field, i, p, g)
			}
		}
	}
	cidrs("ClusterCIDRs", c.ClusterCIDRs)
	cidrs("ServiceCIDRs", c.ServiceCIDRs)
	return errors.Join(errs...)
}
