package show

import (
	"context"
	"fmt"
	"strings"

	"github.com/snorkel-net/snorkel/controller/api"
)

// showNetworks is `snorkel show networks`: the cluster's network details
// as `snorkel join` recorded them, in the layout of subctl's.
func showNetworks(_ context.Context, c *cluster) *result {
	return &result{shown: true, body: bodyOf(networkDetails(c.Agent))}
}

func networkDetails(ac *api.AgentConfig) string {
	var b strings.Builder
	b.WriteString("    Discovered network details via Snorkel:\n")
	fmt.Fprintf(&b, "        Cluster ID:      %s\n", ac.ClusterID)
	fmt.Fprintf(&b, "        Service CIDRs:   %v\n", ac.ServiceCIDRs)
	fmt.Fprintf(&b, "        Cluster CIDRs:   %v\n", ac.ClusterCIDRs)
	if ac.GlobalCIDR != "" {
		fmt.Fprintf(&b, "        Global CIDR:     %s\n", ac.GlobalCIDR)
	}
	if ac.ClustersetIPCIDR != "" {
		// subctl's label and spacing.
		fmt.Fprintf(&b, "        ClustersetIP CIDR:     %s\n", ac.ClustersetIPCIDR)
	}
	return b.String()
}
