package globalnet

import (
	"context"
	"encoding/json"
	"net/netip"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// Condition reasons, Submariner's.
const (
	reasonSuccess          = "Success"
	reasonZeroInput        = "ZeroInput"
	reasonInvalidInput     = "InvalidInput"
	reasonInvalidInstance  = "InvalidInstance"
	reasonAllocationFailed = "IPPoolAllocationFailed"
)

// status is the status of the three allocating kinds: GlobalIngressIP
// uses AllocatedIP, the egress kinds AllocatedIPs.
type status struct {
	Conditions   []metav1.Condition `json:"conditions,omitempty"`
	AllocatedIPs []string           `json:"allocatedIPs,omitempty"`
	AllocatedIP  string             `json:"allocatedIP,omitempty"`
}

func statusOf(u *unstructured.Unstructured) status {
	var s status
	if m, ok := u.Object["status"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(m, &s)
	}
	return s
}

// outcome is what processing decided for an object's status.
type outcome struct {
	ips    []netip.Addr
	single bool // a GlobalIngressIP: status.allocatedIP
	cond   metav1.Condition
	// keep leaves an Allocated=True condition as it is: the allocation
	// did not change, and the condition may explain its history.
	keep bool
}

func condition(ok bool, reason, message string) metav1.Condition {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: v1.GlobalEgressIPAllocated, Status: s, Reason: reason, Message: message}
}

// writeStatus makes u's status say o, patching only when it does not
// already. A vanished object is not an error: its deletion is on its way.
func (r *runner) writeStatus(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured, o outcome) error {
	cur := statusOf(u)
	conds := slices.Clone(cur.Conditions)
	if old := meta.FindStatusCondition(conds, v1.GlobalEgressIPAllocated); !o.keep || old == nil || old.Status != metav1.ConditionTrue {
		o.cond.ObservedGeneration = u.GetGeneration()
		meta.SetStatusCondition(&conds, o.cond)
	}
	ips := make([]string, len(o.ips))
	for k, a := range o.ips {
		ips[k] = a.String()
	}
	st := map[string]any{"conditions": conds}
	same := reflect.DeepEqual(conds, cur.Conditions)
	if o.single {
		ip := ""
		if len(ips) > 0 {
			ip = ips[0]
		}
		same = same && ip == cur.AllocatedIP
		st["allocatedIP"] = nilIfEmpty(ip)
	} else {
		same = same && slices.Equal(ips, cur.AllocatedIPs)
		st["allocatedIPs"] = nilIfEmpty(ips)
	}
	if same {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return err
	}
	_, err = r.dyn.Resource(gvr).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: fieldManager}, "status")
	if apierrors.IsNotFound(err) {
		return errGone
	}
	return err
}

// nilIfEmpty makes an empty value a JSON null, which a merge patch takes
// as "remove the field".
func nilIfEmpty[T string | []string](v T) any {
	if len(v) == 0 {
		return nil
	}
	return v
}
