package globalnet

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// ingressState is the allocation of a GlobalIngressIP and what it leads
// to.
type ingressState struct {
	ip   netip.Addr // recorded in the object's status (or being written there)
	note string     // why the IP recorded before a restart was not kept
	target
	created time.Time
}

// target is what a GlobalIngressIP leads to: service, or pod of service.
type target struct {
	kind    v1.TargetType
	service string
	pod     string
}

func targetOf(g *v1.GlobalIngressIP) (target, bool) {
	t := target{kind: g.Spec.Target}
	if g.Spec.ServiceRef != nil {
		t.service = g.Spec.ServiceRef.Name
	}
	if g.Spec.PodRef != nil {
		t.pod = g.Spec.PodRef.Name
	}
	switch t.kind {
	case v1.ClusterIPService:
		return t, t.service != ""
	case v1.HeadlessServicePod:
		return t, t.pod != ""
	}
	return t, false
}

func (r *runner) releaseIngress(st *ingressState) {
	if !st.ip.IsValid() {
		return
	}
	r.pool.Release([]netip.Addr{st.ip})
	st.ip = netip.Addr{}
	r.freed = true
	r.rulesChanged()
}

func (r *runner) dropIngress(it item) {
	if st := r.ingress[it]; st != nil {
		r.releaseIngress(st)
		delete(r.ingress, it)
	}
	delete(r.starved, it)
}

func (r *runner) processIngress(ctx context.Context, it item) error {
	obj, exists, _ := r.giips.GetStore().GetByKey(it.ns + "/" + it.name)
	if !exists {
		r.dropIngress(it)
		return nil
	}
	u := obj.(*unstructured.Unstructured)
	g, err := v1.FromUnstructured[v1.GlobalIngressIP](u)
	if err != nil {
		r.log.Error("globalnet: unreadable object", "object", it.String(), "error", err)
		return nil
	}
	t, ok := targetOf(g)
	if !ok {
		r.dropIngress(it)
		return r.done(r.writeStatus(ctx, v1.GlobalIngressIPResource, u, outcome{single: true, cond: condition(false, reasonInvalidInput,
			fmt.Sprintf("spec.target %q needs serviceRef (ClusterIPService) or podRef (HeadlessServicePod)", t.kind))}))
	}
	st := r.ingress[it]
	if st == nil {
		st = &ingressState{}
		r.ingress[it] = st
	}
	if st.target != t || !st.created.Equal(g.CreationTimestamp.Time) {
		st.target, st.created = t, g.CreationTimestamp.Time
		r.rulesChanged()
	}
	o := outcome{single: true}
	var fresh netip.Addr
	if st.ip.IsValid() {
		o.ips, o.keep = []netip.Addr{st.ip}, true
		o.cond = condition(true, reasonSuccess, "Allocated global IP")
	} else if ips, err := r.pool.Allocate(1); err != nil {
		r.starved[it] = true
		o.cond = condition(false, reasonAllocationFailed, withNote(
			fmt.Sprintf("Error allocating a global IP from the pool %s: %v", r.cfg.GlobalCIDR, err), st.note))
	} else {
		fresh = ips[0]
		o.ips = ips
		o.cond = condition(true, reasonSuccess, withNote("Allocated global IP", st.note))
	}
	if err := r.writeStatus(ctx, v1.GlobalIngressIPResource, u, o); err != nil {
		if fresh.IsValid() {
			r.pool.Release([]netip.Addr{fresh})
			r.freed = true
		}
		return r.done(err)
	}
	if fresh.IsValid() {
		st.ip, st.note = fresh, ""
		delete(r.starved, it)
		r.rulesChanged()
		r.log.Info("globalnet: allocated", "object", it.String(), "ip", fresh)
	}
	return nil
}
