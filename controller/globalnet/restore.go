package globalnet

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// restore reserves the IPs the objects' status records, before anything
// new is allocated, so that a restart or a failover keeps every address.
// The cluster egress object goes first, then the GlobalEgressIPs and the
// GlobalIngressIPs, each oldest first: when two objects record the same IP,
// the older keeps it. An object whose recorded IPs cannot all be kept (out
// of the global CIDR, taken, malformed) gets new ones, and its condition
// says why.
func (r *runner) restore() {
	owners := map[netip.Addr]string{}
	take := func(it item, recorded []string) ([]netip.Addr, string) {
		ips := make([]netip.Addr, 0, len(recorded))
		for _, s := range recorded {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Sprintf("the recorded IP %q was not kept: it is not an IP address", s)
			}
			if owner, ok := owners[a]; ok {
				return nil, fmt.Sprintf("the recorded IP %s was not kept: it is also allocated to %s", a, owner)
			}
			ips = append(ips, a)
		}
		if err := r.pool.Reserve(ips); err != nil {
			return nil, fmt.Sprintf("the recorded IPs were not kept: %v", err)
		}
		for _, a := range ips {
			owners[a] = it.String()
		}
		return ips, ""
	}
	note := func(it item, n string) {
		if n != "" {
			r.log.Warn("globalnet: reallocating", "object", it.String(), "reason", n)
		}
	}

	if obj, ok, _ := r.cgeips.GetStore().GetByKey(v1.ClusterGlobalEgressIPName); ok {
		it := item{kind: kindClusterEgress, name: v1.ClusterGlobalEgressIPName}
		st := r.egressState(it)
		st.ips, st.note = take(it, statusOf(obj.(*unstructured.Unstructured)).AllocatedIPs)
		note(it, st.note)
	}
	for _, u := range oldestFirst(r.geips.GetStore().List()) {
		it := item{kind: kindEgress, ns: u.GetNamespace(), name: u.GetName()}
		g, err := v1.FromUnstructured[v1.GlobalEgressIP](u)
		if err != nil {
			continue
		}
		sel, err := podSelector(g)
		if err != nil {
			continue
		}
		st := r.egressState(it)
		st.selector, st.created = sel, g.CreationTimestamp.Time
		st.ips, st.note = take(it, g.Status.AllocatedIPs)
		note(it, st.note)
	}
	for _, u := range oldestFirst(r.giips.GetStore().List()) {
		g, err := v1.FromUnstructured[v1.GlobalIngressIP](u)
		if err != nil || g.Status.AllocatedIP == "" {
			continue
		}
		t, ok := targetOf(g)
		if !ok {
			continue
		}
		it := item{kind: kindIngress, ns: u.GetNamespace(), name: u.GetName()}
		st := &ingressState{target: t, created: g.CreationTimestamp.Time}
		r.ingress[it] = st
		var ips []netip.Addr
		if ips, st.note = take(it, []string{g.Status.AllocatedIP}); len(ips) == 1 {
			st.ip = ips[0]
		}
		note(it, st.note)
	}
}

// oldestFirst orders objects by creation, then namespace and name.
func oldestFirst(objs []any) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b *unstructured.Unstructured) int {
		return cmp.Or(a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time),
			cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	return out
}
