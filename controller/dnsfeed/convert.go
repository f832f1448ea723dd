package dnsfeed

import (
	"cmp"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/servicesync"
	"github.com/snorkel-net/snorkel/dnsd"
)

// ownSlices gives the local cluster's own EndpointSlices of the Service
// ns/name (kubernetes.io/service-name); nil without Globalnet.
type ownSlices func(ns, name string) []*discoveryv1.EndpointSlice

// service is dnsd's view of one imported service: its merged
// ServiceImport and the EndpointSlices imported for it, from every
// exporting cluster. local is this cluster's ID.
func service(si *mcsv1a1.ServiceImport, imported []*discoveryv1.EndpointSlice, local string, own ownSlices) dnsd.Service {
	svc := dnsd.Service{
		Namespace:     si.Namespace,
		Name:          si.Name,
		Headless:      si.Spec.Type == mcsv1a1.Headless,
		Ports:         importPorts(si.Spec.Ports),
		ClusterSetIPs: addresses(si.Spec.IPs),
	}
	byCluster := map[string][]*discoveryv1.EndpointSlice{}
	for _, eps := range imported {
		if c := eps.Labels[servicesync.LabelSourceCluster]; c != "" {
			byCluster[c] = append(byCluster[c], eps)
		}
	}
	for c, cs := range byCluster {
		// One cluster's slices in a stable order, so that equal input
		// gives an equal answer order.
		slices.SortFunc(cs, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
		if svc.Headless {
			svc.Exports = append(svc.Exports, headlessExport(c, cs, c == local, svc.Namespace, svc.Name, own))
		} else {
			svc.Exports = append(svc.Exports, clusterIPExport(c, cs))
		}
	}
	slices.SortFunc(svc.Exports, func(a, b dnsd.Export) int { return cmp.Compare(a.Cluster, b.Cluster) })
	return svc
}

// clusterIPExport reads the slice servicesync publishes for a ClusterSetIP
// service: one endpoint whose address is the service's ClusterIP (its
// global IP under Globalnet), ready when any backend is.
func clusterIPExport(cluster string, cs []*discoveryv1.EndpointSlice) dnsd.Export {
	e := dnsd.Export{Cluster: cluster}
	have := map[bool]bool{} // by Is4
	for _, eps := range cs {
		e.Ports = appendPorts(e.Ports, eps.Ports)
		for i := range eps.Endpoints {
			ep := &eps.Endpoints[i]
			if ready(ep) {
				e.Ready = true
			}
			for _, a := range addresses(ep.Addresses) {
				if !have[a.Is4()] {
					have[a.Is4()] = true
					e.IPs = append(e.IPs, a)
				}
			}
		}
	}
	return e
}

// headlessExport reads a headless service's imported slices of one
// cluster. Under Globalnet the local cluster's slices hold its pods'
// global IPs, which its own pods cannot reach: it answers with the pods'
// own addresses from the cluster's own slices instead.
func headlessExport(cluster string, cs []*discoveryv1.EndpointSlice, isLocal bool, ns, name string, own ownSlices) dnsd.Export {
	e := dnsd.Export{Cluster: cluster}
	globalnet := false
	for _, eps := range cs {
		if eps.Annotations[servicesync.AnnotationPublishNotReady] == "true" {
			e.PublishNotReady = true
		}
		globalnet = globalnet || eps.Annotations[servicesync.AnnotationGlobalnet] == "true"
	}
	if isLocal && globalnet && own != nil {
		if mine := own(ns, name); len(mine) > 0 {
			slices.SortFunc(mine, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
			cs = mine
		}
	}
	for _, eps := range cs {
		e.Ports = appendPorts(e.Ports, eps.Ports)
		for i := range eps.Endpoints {
			ep := &eps.Endpoints[i]
			// An endpoint without a hostname is named by its address in
			// dnsd, as in Lighthouse's resolver today: not by its pod's
			// name, which an older resolver used.
			out := dnsd.Endpoint{Addresses: addresses(ep.Addresses), Ready: ready(ep)}
			if ep.Hostname != nil {
				out.Hostname = *ep.Hostname
			}
			if len(out.Addresses) > 0 {
				e.Endpoints = append(e.Endpoints, out)
			}
		}
	}
	return e
}

// ready reads an endpoint's readiness; unknown (nil) counts as ready, as
// the EndpointConditions documentation advises consumers.
func ready(ep *discoveryv1.Endpoint) bool {
	return ep.Conditions.Ready == nil || *ep.Conditions.Ready
}

// addresses parses IPs, skipping what is not one.
func addresses(in []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range in {
		if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func importPorts(in []mcsv1a1.ServicePort) []dnsd.Port {
	out := make([]dnsd.Port, 0, len(in))
	for _, p := range in {
		if p.Port > 0 && p.Port <= 65535 {
			out = append(out, dnsd.Port{Name: p.Name, Protocol: protocol(p.Protocol), Port: uint16(p.Port)})
		}
	}
	return out
}

// appendPorts adds a slice's ports to out, once each.
func appendPorts(out []dnsd.Port, in []discoveryv1.EndpointPort) []dnsd.Port {
	for _, p := range in {
		if p.Port == nil || *p.Port <= 0 || *p.Port > 65535 {
			continue
		}
		q := dnsd.Port{Port: uint16(*p.Port), Protocol: "TCP"}
		if p.Name != nil {
			q.Name = *p.Name
		}
		if p.Protocol != nil {
			q.Protocol = protocol(*p.Protocol)
		}
		if !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out
}

func protocol(p corev1.Protocol) string {
	if p == "" {
		return string(corev1.ProtocolTCP)
	}
	return string(p)
}

// connected lists the clusters the active gateways report connected,
// sorted, each once. A passive gateway's connections are stale: only the
// active one's count, as Lighthouse reads them.
func connected(gateways []*submv1.Gateway) []string {
	var out []string
	for _, gw := range gateways {
		if gw.Status.HAStatus != submv1.HAStatusActive {
			continue
		}
		for _, c := range gw.Status.Connections {
			if c.Status == submv1.Connected && c.Endpoint.ClusterID != "" && !slices.Contains(out, c.Endpoint.ClusterID) {
				out = append(out, c.Endpoint.ClusterID)
			}
		}
	}
	slices.Sort(out)
	return out
}
