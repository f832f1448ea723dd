package globalnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// maxEgressIPs is the most global IPs one egress object may ask for.
const maxEgressIPs = 20

// errGone says the object was deleted while it was being processed.
var errGone = errors.New("object deleted")

// egressState is the allocation of a ClusterGlobalEgressIP or a
// GlobalEgressIP.
type egressState struct {
	// ips are recorded in the object's status (or being written there).
	ips []netip.Addr
	// note says why the IPs recorded before a restart were not kept, for
	// the condition of the next allocation.
	note string
	// A GlobalEgressIP's pods: selector is nil for the whole namespace.
	selector labels.Selector
	created  time.Time
}

func (r *runner) egressState(it item) *egressState {
	st := r.egress[it]
	if st == nil {
		st = &egressState{}
		r.egress[it] = st
	}
	return st
}

func (r *runner) releaseEgress(st *egressState) {
	if len(st.ips) == 0 {
		return
	}
	r.pool.Release(st.ips)
	st.ips = nil
	r.freed = true
	r.rulesChanged()
}

func (r *runner) dropEgress(it item) {
	if st := r.egress[it]; st != nil {
		r.releaseEgress(st)
		delete(r.egress, it)
	}
	delete(r.starved, it)
}

// ensureClusterEgress creates the ClusterGlobalEgressIP that counts, with
// the default spec, when it is missing.
func (r *runner) ensureClusterEgress(ctx context.Context) error {
	res := r.dyn.Resource(v1.ClusterGlobalEgressIPResource)
	_, err := res.Get(ctx, v1.ClusterGlobalEgressIPName, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	obj := &v1.ClusterGlobalEgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: v1.ClusterGlobalEgressIPName},
		Spec:       v1.ClusterGlobalEgressIPSpec{NumberOfIPs: new(v1.DefaultClusterEgressIPs)},
	}
	u, err := v1.ToUnstructured(obj, "ClusterGlobalEgressIP")
	if err != nil {
		return err
	}
	if _, err = res.Create(ctx, u, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("globalnet: creating ClusterGlobalEgressIP %s: %w", v1.ClusterGlobalEgressIPName, err)
	}
	r.log.Info("globalnet: created the cluster egress object", "name", v1.ClusterGlobalEgressIPName)
	return nil
}

func (r *runner) processClusterEgress(ctx context.Context, it item) error {
	obj, exists, _ := r.cgeips.GetStore().GetByKey(it.name)
	if !exists {
		r.dropEgress(it)
		if it.name == v1.ClusterGlobalEgressIPName {
			return r.ensureClusterEgress(ctx)
		}
		return nil
	}
	u := obj.(*unstructured.Unstructured)
	c, err := v1.FromUnstructured[v1.ClusterGlobalEgressIP](u)
	if err != nil {
		r.log.Error("globalnet: unreadable object", "object", it.String(), "error", err)
		return nil
	}
	if it.name != v1.ClusterGlobalEgressIPName {
		r.dropEgress(it)
		return r.done(r.writeStatus(ctx, v1.ClusterGlobalEgressIPResource, u, outcome{cond: condition(false, reasonInvalidInstance,
			fmt.Sprintf("Only the ClusterGlobalEgressIP instance with the well-known name %q is supported", v1.ClusterGlobalEgressIPName))}))
	}
	n := v1.DefaultClusterEgressIPs
	if c.Spec.NumberOfIPs != nil {
		n = *c.Spec.NumberOfIPs
	}
	return r.allocateEgress(ctx, it, v1.ClusterGlobalEgressIPResource, u, n)
}

func (r *runner) processEgress(ctx context.Context, it item) error {
	obj, exists, _ := r.geips.GetStore().GetByKey(it.ns + "/" + it.name)
	if !exists {
		r.dropEgress(it)
		return nil
	}
	u := obj.(*unstructured.Unstructured)
	g, err := v1.FromUnstructured[v1.GlobalEgressIP](u)
	if err != nil {
		r.log.Error("globalnet: unreadable object", "object", it.String(), "error", err)
		return nil
	}
	sel, err := podSelector(g)
	if err != nil {
		r.dropEgress(it)
		return r.done(r.writeStatus(ctx, v1.GlobalEgressIPResource, u, outcome{cond: condition(false, reasonInvalidInput, err.Error())}))
	}
	st := r.egressState(it)
	if selectorString(st.selector) != selectorString(sel) || !st.created.Equal(g.CreationTimestamp.Time) {
		st.selector, st.created = sel, g.CreationTimestamp.Time
		r.rulesChanged()
	}
	n := 1
	if g.Spec.NumberOfIPs != nil {
		n = *g.Spec.NumberOfIPs
	}
	return r.allocateEgress(ctx, it, v1.GlobalEgressIPResource, u, n)
}

// podSelector returns the pods a GlobalEgressIP selects within its
// namespace; nil stands for all of them (a namespace pool).
func podSelector(g *v1.GlobalEgressIP) (labels.Selector, error) {
	if g.Spec.PodSelector == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(g.Spec.PodSelector)
	if err != nil {
		return nil, fmt.Errorf("spec.podSelector is not a valid label selector (%v); fix it", err)
	}
	return sel, nil
}

func selectorString(s labels.Selector) string {
	if s == nil {
		return "<namespace>"
	}
	return s.String()
}

// allocateEgress gives the object n contiguous global IPs, keeping those
// it has when it has n, and records them in its status.
func (r *runner) allocateEgress(ctx context.Context, it item, gvr schema.GroupVersionResource, u *unstructured.Unstructured, n int) error {
	st := r.egressState(it)
	var o outcome
	var fresh []netip.Addr
	switch {
	case n < 0:
		r.releaseEgress(st)
		o.cond = condition(false, reasonInvalidInput, "The NumberOfIPs cannot be negative")
	case n > maxEgressIPs:
		r.releaseEgress(st)
		o.cond = condition(false, reasonInvalidInput, fmt.Sprintf("The NumberOfIPs %d is more than %d; ask for 0 to %d", n, maxEgressIPs, maxEgressIPs))
	case n == 0:
		r.releaseEgress(st)
		o.cond = condition(false, reasonZeroInput, "The specified NumberOfIPs is 0")
	case len(st.ips) == n:
		o.ips, o.keep = st.ips, true
		o.cond = condition(true, reasonSuccess, fmt.Sprintf("Allocated %d global IP(s)", n))
	default:
		r.releaseEgress(st)
		ips, err := r.pool.Allocate(n)
		if err != nil {
			r.starved[it] = true
			o.cond = condition(false, reasonAllocationFailed, withNote(
				fmt.Sprintf("Error allocating %d global IP(s) from the pool %s: %v", n, r.cfg.GlobalCIDR, err), st.note))
			break
		}
		fresh = ips
		o.ips = ips
		o.cond = condition(true, reasonSuccess, withNote(fmt.Sprintf("Allocated %d global IP(s)", n), st.note))
	}
	if err := r.writeStatus(ctx, gvr, u, o); err != nil {
		if fresh != nil {
			r.pool.Release(fresh)
			r.freed = true
		}
		return r.done(err)
	}
	if fresh != nil {
		st.ips, st.note = fresh, ""
		delete(r.starved, it)
		r.rulesChanged()
		r.log.Info("globalnet: allocated", "object", it.String(), "ips", fresh)
	}
	return nil
}

// withNote adds why the recorded IPs were not kept to a condition message.
func withNote(msg, note string) string {
	if note == "" {
		return msg
	}
	return msg + "; " + note
}

// done turns errGone into success: the deletion event settles the object.
func (r *runner) done(err error) error {
	if errors.Is(err, errGone) {
		return nil
	}
	return err
}
