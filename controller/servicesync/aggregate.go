package servicesync

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/snorkel-net/snorkel/controller/api"
)

// Conflict condition reasons. Lighthouse's names, where the MCS API has
// PortConflict and TypeConflict; several are joined with commas.
const (
	ReasonTypeConflict = "ConflictingType"
	ReasonPortConflict = "ConflictingPorts"
	// ReasonNoConflicts is the MCS reason of Conflict=False. Lighthouse
	// leaves the reason empty, which metav1.Condition does not allow.
	ReasonNoConflicts = "NoConflicts"
)

// exporter is one cluster's export of a service, as its ServiceImport on
// the broker describes it.
type exporter struct {
	cluster string
	// created is the ServiceExport's creation time in Unix nanoseconds;
	// math.MaxInt64 when unknown, so that it sorts last.
	created int64
	spec    *mcsv1a1.ServiceImportSpec
	// use is the cluster's clusterset IP setting ("true", "false", or
	// empty from an exporter that predates it); vip the clusterset IP its
	// ServiceImport carries, allocated by vipBy.
	use   string
	vip   netip.Addr
	vipBy string
}

// useClustersetIP is the exporter's clusterset IP setting; none counts as
// false, as Lighthouse reads an aggregate that predates the setting.
func (e *exporter) useClustersetIP() bool { return e.use == "true" }

// exporterOf reads a broker ServiceImport; false if it lacks the source
// cluster label.
func exporterOf(si *mcsv1a1.ServiceImport) (exporter, bool) {
	cluster := si.Labels[LabelSourceCluster]
	if cluster == "" {
		return exporter{}, false
	}
	created, err := strconv.ParseInt(si.Annotations[AnnotationTimestampPrefix+cluster], 10, 64)
	if err != nil {
		created = math.MaxInt64
	}
	e := exporter{cluster: cluster, created: created, spec: &si.Spec,
		use: si.Annotations[api.UseClustersetIPAnnotation], vipBy: si.Annotations[api.ClustersetIPAllocatedByAnnotation]}
	if a, err := netip.ParseAddr(si.Annotations[AnnotationClustersetIP]); err == nil && a.Is4() {
		e.vip = a
	}
	return e, true
}

// clustersetIP is the service's clusterset IP and the cluster that
// allocated it: the one the oldest exporter of the import's type carries,
// if the oldest export asks for one.
func (a *aggregate) clustersetIP() (netip.Addr, string) {
	if first := a.precedent(); first == nil || a.typ != mcsv1a1.ClusterSetIP || !first.useClustersetIP() {
		return netip.Addr{}, ""
	}
	for _, e := range a.exporters {
		if e.spec.Type == a.typ && e.vip.IsValid() {
			return e.vip, e.vipBy
		}
	}
	return netip.Addr{}, ""
}

// aggregate is the clusterset's view of one service, merged from every
// exporting cluster's ServiceImport.
type aggregate struct {
	// exporters, oldest export first (ties by cluster ID).
	exporters []exporter
	// typ is the oldest export's type; clusters exporting another type
	// are left out of the import (Lighthouse does not export them).
	typ mcsv1a1.ServiceImportType
	// clusters are the exporters of typ, oldest first.
	clusters []string
	// ports is the union by port name over clusters, the oldest export's
	// port winning a name they share.
	ports []mcsv1a1.ServicePort
	// typeConflicts are the clusters exporting a type other than typ.
	typeConflicts []string
	// portConflict is set when clusters of typ differ in their ports.
	portConflict bool
}

// aggregateOf merges exporters (in any order).
func aggregateOf(exps []exporter) aggregate {
	exps = slices.Clone(exps)
	slices.SortFunc(exps, func(a, b exporter) int {
		if a.created != b.created {
			if a.created < b.created {
				return -1
			}
			return 1
		}
		return strings.Compare(a.cluster, b.cluster)
	})
	a := aggregate{exporters: exps, ports: []mcsv1a1.ServicePort{}}
	if len(exps) == 0 {
		return a
	}
	first := exps[0]
	a.typ = first.spec.Type
	for _, e := range exps {
		if e.spec.Type != a.typ {
			a.typeConflicts = append(a.typeConflicts, e.cluster)
			continue
		}
		a.clusters = append(a.clusters, e.cluster)
		if !samePorts(first.spec.Ports, e.spec.Ports) {
			a.portConflict = true
		}
		for _, p := range e.spec.Ports {
			if !slices.ContainsFunc(a.ports, func(q mcsv1a1.ServicePort) bool { return q.Name == p.Name }) {
				a.ports = append(a.ports, p)
			}
		}
	}
	return a
}

// samePorts reports whether two port lists hold the same ports in any
// order.
func samePorts(a, b []mcsv1a1.ServicePort) bool {
	if len(a) != len(b) {
		return false
	}
	for _, p := range a {
		if !slices.ContainsFunc(b, func(q mcsv1a1.ServicePort) bool { return portString(p) == portString(q) }) {
			return false
		}
	}
	return true
}

// exported reports whether cluster's endpoints are part of the import.
func (a *aggregate) exported(cluster string) bool {
	return slices.Contains(a.clusters, cluster)
}

// precedent is the oldest export, whose type and session affinity the
// import takes.
func (a *aggregate) precedent() *exporter {
	if len(a.exporters) == 0 {
		return nil
	}
	return &a.exporters[0]
}

// conflict is the Conflict condition's status, reason and message. The
// message names the clusters and what differs, and says which export
// decides.
func (a *aggregate) conflict() (status bool, reason, message string) {
	var reasons, messages []string
	if len(a.typeConflicts) > 0 {
		first := a.exporters[0]
		var parts []string
		for _, e := range a.exporters {
			parts = append(parts, fmt.Sprintf("%s exports %s", e.cluster, e.spec.Type))
		}
		reasons = append(reasons, ReasonTypeConflict)
		messages = append(messages, fmt.Sprintf(
			"The service type conflicts between the constituent clusters [%s]: %s. "+
				"The type %s of the first exporting cluster %q is used; clusters [%s] are not imported.",
			strings.Join(a.allClusters(), ", "), strings.Join(parts, ", "), first.spec.Type, first.cluster,
			strings.Join(a.typeConflicts, ", ")))
	}
	if a.portConflict {
		var parts []string
		for _, e := range a.exporters {
			if e.spec.Type == a.typ {
				parts = append(parts, fmt.Sprintf("%s exports %s", e.cluster, portsString(e.spec.Ports)))
			}
		}
		reasons = append(reasons, ReasonPortConflict)
		messages = append(messages, fmt.Sprintf(
			"The service ports conflict between the constituent clusters [%s]: %s. "+
				"The service exposes the union of the ports by name, the first exporting cluster's port winning a shared name: %s.",
			strings.Join(a.clusters, ", "), strings.Join(parts, "; "), portsString(a.ports)))
	}
	if len(reasons) == 0 {
		// The message names no clusters, so that one more exporter does
		// not rewrite every export's status.
		return false, ReasonNoConflicts, "The exporting clusters agree on the service's type and ports."
	}
	return true, strings.Join(reasons, ","), strings.Join(messages, "\n")
}

// allClusters lists every exporter, oldest first.
func (a *aggregate) allClusters() []string {
	out := make([]string, len(a.exporters))
	for i, e := range a.exporters {
		out[i] = e.cluster
	}
	return out
}

// portString is a port as users write it: "name:80/TCP", or "80/TCP"
// without a name, with the application protocol after a "+".
func portString(p mcsv1a1.ServicePort) string {
	proto := p.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	s := fmt.Sprintf("%d/%s", p.Port, proto)
	if p.Name != "" {
		s = p.Name + ":" + s
	}
	if p.AppProtocol != nil && *p.AppProtocol != "" {
		s += "+" + *p.AppProtocol
	}
	return s
}

// portsString lists ports as "[a, b]".
func portsString(ps []mcsv1a1.ServicePort) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = portString(p)
	}
	return "[" + strings.Join(s, ", ") + "]"
}
