package dnsd

import (
	"net/netip"
)

// Service is one multi-cluster service as the clusterset imports it: the
// merged ServiceImport and every exporting cluster's EndpointSlices.
type Service struct {
	// Namespace and Name are the service's; both DNS-1123 labels.
	Namespace string
	Name      string
	// Headless services answer with their pods' addresses; the others
	// with one cluster's service address.
	Headless bool
	// Ports are the ServiceImport's ports.
	Ports []Port
	// ClusterSetIPs are the ServiceImport's spec.ips, a clusterset-wide
	// virtual IP per family. When there is one, <svc> names answer with it
	// instead of a cluster's address.
	ClusterSetIPs []netip.Addr
	// Exports are the clusters that export the service, in any order.
	Exports []Export
}

// Export is one cluster's export of a service.
type Export struct {
	// Cluster is the exporting cluster's ID.
	Cluster string
	// IPs is where a ClusterSetIP service of this cluster is reached: its
	// ClusterIP, or its global IP under Globalnet; at most one per family.
	// Loopback, link-local, unspecified, multicast and broadcast addresses
	// are not answered, here and in Endpoints.
	IPs []netip.Addr
	// Ready reports whether a ClusterSetIP service has a ready backend in
	// this cluster.
	Ready bool
	// Endpoints are a headless service's pods in this cluster.
	Endpoints []Endpoint
	// PublishNotReady answers with a headless service's endpoints that
	// are not ready too (the Service's publishNotReadyAddresses).
	PublishNotReady bool
	// Ports are this cluster's ports of the service (its EndpointSlices'
	// ports); nil means the Service's Ports.
	Ports []Port
}

// Endpoint is a pod of a headless service.
type Endpoint struct {
	// Hostname names the pod under <hostname>.<cluster>.<svc>...; a pod
	// without one (or whose hostname is not a DNS-1123 label) is named by
	// each of its addresses, with dots or colons as dashes, as Lighthouse
	// names it: 10-9-0-12.<cluster>.<svc>...
	Hostname  string
	Addresses []netip.Addr
	Ready     bool
}

// Port is a service port; SRV records answer for it.
type Port struct {
	// Name is the port's name; "_<name>._<protocol>" names ask for it.
	Name string
	// Protocol is "TCP", "UDP" or "SCTP".
	Protocol string
	Port     uint16
}

// isLabel reports whether s is a DNS-1123 label: what Kubernetes allows
// for namespaces, service names, cluster IDs and hostnames. The table is
// keyed by dotted names, so anything else could collide.
func isLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}
