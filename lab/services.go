package lab

import (
	"fmt"
	"strings"
)

// ServiceTable is the nftables table holding a node's service rules.
const ServiceTable = "snorkel-lab-services"

// ServiceRuleset returns the nftables ruleset that load-balances c's
// ClusterIP services on its node, shaped as kube-proxy's nftables mode
// shapes it: a verdict map from address, protocol and port to a per-service
// chain, which picks an endpoint chain with numgen random, which DNATs.
// There is no masquerade, so a backend sees the client's own address, as
// with kube-proxy for pod-to-service traffic. Headless services need no
// rules. It returns "" for a cluster without ClusterIP services.
func (c *ClusterPlan) ServiceRuleset() string {
	services := c.clusterIPServices()
	if len(services) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table ip %s {\n", ServiceTable)
	b.WriteString("\tmap service-ips {\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n\t\telements = {\n")
	for _, s := range services {
		fmt.Fprintf(&b, "\t\t\t%s . tcp . %d : goto service-%s,\n", s.Spec.ClusterIP, s.Spec.Port, s.Spec.Name)
	}
	b.WriteString("\t\t}\n\t}\n\n")
	b.WriteString("\tchain services {\n\t\tip daddr . meta l4proto . th dport vmap @service-ips\n\t}\n")
	for _, s := range services {
		fmt.Fprintf(&b, "\n\tchain service-%s {\n\t\tnumgen random mod %d vmap {", s.Spec.Name, len(s.Backends))
		for i, be := range s.Backends {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %d : goto endpoint-%s-%s", i, s.Spec.Name, be.Name)
		}
		b.WriteString(" }\n\t}\n")
		for _, be := range s.Backends {
			fmt.Fprintf(&b, "\n\tchain endpoint-%s-%s {\n\t\tmeta l4proto tcp dnat to %s:%d\n\t}\n", s.Spec.Name, be.Name, be.IP, s.Spec.TargetPort)
		}
	}
	// Traffic from pods and from the tunnel passes prerouting; output covers
	// clients on the node itself.
	b.WriteString("\n\tchain nat-prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tjump services\n\t}\n")
	b.WriteString("\n\tchain nat-output {\n\t\ttype nat hook output priority -100; policy accept;\n\t\tjump services\n\t}\n")
	b.WriteString("}\n")
	return b.String()
}

// clusterIPServices are c's services that have a ClusterIP.
func (c *ClusterPlan) clusterIPServices() []ServicePlan {
	var out []ServicePlan
	for _, s := range c.Services {
		if !s.Spec.Headless {
			out = append(out, s)
		}
	}
	return out
}
