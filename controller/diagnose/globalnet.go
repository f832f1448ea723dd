package diagnose

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

func checkGlobalnet(ctx context.Context, c *cluster, r *result) {
	if c.Agent.GlobalCIDR == "" {
		r.Success("Globalnet is not enabled in this cluster; skipped")
		return
	}
	own, err := netip.ParsePrefix(c.Agent.GlobalCIDR)
	if err != nil {
		r.Fail("The agent Secret's global CIDR %q is not a CIDR: %s", c.Agent.GlobalCIDR, rejoin)
		return
	}
	checkGlobalCIDR(ctx, c, r, own)
	checkClusterEgress(ctx, c, r, own)
	checkIngressIPs(ctx, c, r, own)
}

// checkGlobalCIDR checks the cluster's global CIDR against the broker's
// range and every other cluster's.
func checkGlobalCIDR(ctx context.Context, c *cluster, r *result, own netip.Prefix) {
	bkc, bdyn, err := c.broker()
	if err != nil {
		r.Fail("%v", err)
		return
	}
	cm, err := bkc.CoreV1().ConfigMaps(c.Agent.BrokerNamespace).Get(ctx, api.GlobalnetConfigMapName, metav1.GetOptions{})
	if err != nil {
		r.Fail("Cannot read the broker's Globalnet ConfigMap %s/%s: %v", c.Agent.BrokerNamespace, api.GlobalnetConfigMapName, err)
		return
	}
	rng, err := globalnetRange(cm)
	switch {
	case err != nil:
		r.Fail("%v", err)
	case !rng.Contains(own.Addr()) || own.Bits() < rng.Bits():
		r.Fail("The global CIDR %s of cluster %q is outside the broker's Globalnet range %s: join again with a --globalnet-cidr inside %s",
			own, c.Agent.ClusterID, rng, rng)
	default:
		r.Success("The global CIDR %s is inside the broker's Globalnet range %s", own, rng)
	}
	list, err := bdyn.Resource(submv1.ClusterResource).Namespace(c.Agent.BrokerNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Fail("Cannot read the broker's Clusters: %v", err)
		return
	}
	overlaps := 0
	for i := range list.Items {
		other, err := submv1.FromUnstructured[submv1.Cluster](&list.Items[i])
		if err != nil {
			r.Fail("The broker's Cluster %s: %v", list.Items[i].GetName(), err)
			continue
		}
		if other.Spec.ClusterID == c.Agent.ClusterID {
			continue
		}
		for _, s := range other.Spec.GlobalCIDR {
			p, err := netip.ParsePrefix(s)
			if err == nil && p.Overlaps(own) {
				overlaps++
				r.Fail("The global CIDR %s of cluster %q overlaps %s of cluster %q: global CIDRs must be disjoint; make one of them leave (`snorkel uninstall`) and join again with a free --globalnet-cidr",
					own, c.Agent.ClusterID, p, other.Spec.ClusterID)
			}
		}
	}
	if overlaps == 0 {
		r.Success("The global CIDR %s overlaps no other cluster's (%d on the broker)", own, len(list.Items))
	}
}

// globalnetRange reads the broker's Globalnet range, stored as a JSON
// string as Submariner stores it.
func globalnetRange(cm *corev1.ConfigMap) (netip.Prefix, error) {
	if on, _ := strconv.ParseBool(strings.TrimSpace(cm.Data[api.GlobalnetEnabledKey])); !on {
		return netip.Prefix{}, fmt.Errorf("the broker has Globalnet off, but this cluster has a global CIDR: uninstall and join again")
	}
	s := strings.TrimSpace(cm.Data[api.GlobalnetCIDRRangeKey])
	if u, err := strconv.Unquote(s); err == nil {
		s = u
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("the broker's Globalnet range %q is not a CIDR: run `snorkel deploy-broker` again", s)
	}
	return p.Masked(), nil
}

// checkClusterEgress checks that the cluster's egress pool was allocated
// from its global CIDR.
func checkClusterEgress(ctx context.Context, c *cluster, r *result, own netip.Prefix) {
	u, err := c.Dynamic.Resource(submv1.ClusterGlobalEgressIPResource).Get(ctx, submv1.ClusterGlobalEgressIPName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		r.Fail("There is no ClusterGlobalEgressIP %s: the active gateway's agent creates it; see `snorkel diagnose connections` and the agent's log", submv1.ClusterGlobalEgressIPName)
		return
	}
	if err != nil {
		r.Fail("Cannot read the ClusterGlobalEgressIP %s: %v", submv1.ClusterGlobalEgressIPName, err)
		return
	}
	eg, err := submv1.FromUnstructured[submv1.ClusterGlobalEgressIP](u)
	if err != nil {
		r.Fail("The ClusterGlobalEgressIP %s: %v", submv1.ClusterGlobalEgressIPName, err)
		return
	}
	if len(eg.Status.AllocatedIPs) == 0 {
		r.Fail("The ClusterGlobalEgressIP %s has no IPs allocated%s", submv1.ClusterGlobalEgressIPName, allocatedWhy(eg.Status.Conditions, submv1.GlobalEgressIPAllocated))
		return
	}
	if out := outside(own, eg.Status.AllocatedIPs); out != "" {
		r.Fail("The ClusterGlobalEgressIP %s holds %s, outside the global CIDR %s: delete it and the agent allocates it again", submv1.ClusterGlobalEgressIPName, out, own)
		return
	}
	r.Success("The cluster's egress IPs are allocated: %s", strings.Join(eg.Status.AllocatedIPs, ", "))
}

// checkIngressIPs checks that every exported ClusterIP service has its
// global IP.
func checkIngressIPs(ctx context.Context, c *cluster, r *result, own netip.Prefix) {
	exports, err := c.mcs.MulticlusterV1alpha1().ServiceExports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Fail("Cannot list the ServiceExports: %v", err)
		return
	}
	n, bad := 0, 0
	for i := range exports.Items {
		se := &exports.Items[i]
		name := se.Namespace + "/" + se.Name
		svc, err := c.Kube.CoreV1().Services(se.Namespace).Get(ctx, se.Name, metav1.GetOptions{})
		if err != nil || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			// Without its Service there is nothing to give a global IP
			// (service-discovery says so); a headless service's pods get
			// theirs one by one.
			continue
		}
		n++
		u, err := c.Dynamic.Resource(submv1.GlobalIngressIPResource).Namespace(se.Namespace).Get(ctx, se.Name, metav1.GetOptions{})
		if err != nil {
			bad++
			r.Fail("Exported service %s has no GlobalIngressIP (%v): the active gateway's agent allocates it; see its log", name, err)
			continue
		}
		in, err := submv1.FromUnstructured[submv1.GlobalIngressIP](u)
		switch {
		case err != nil:
			bad++
			r.Fail("The GlobalIngressIP %s: %v", name, err)
		case in.Status.AllocatedIP == "":
			bad++
			r.Fail("Exported service %s has no global IP allocated%s", name, allocatedWhy(in.Status.Conditions, submv1.GlobalEgressIPAllocated))
		case outside(own, []string{in.Status.AllocatedIP}) != "":
			bad++
			r.Fail("Exported service %s has global IP %s, outside the global CIDR %s: delete its GlobalIngressIP and the agent allocates it again", name, in.Status.AllocatedIP, own)
		default:
			r.detail("Exported service %s has global IP %s", name, in.Status.AllocatedIP)
		}
	}
	if bad == 0 {
		r.Success("All %d exported ClusterIP services have a global IP", n)
	}
}

// allocatedWhy is the reason of a False Allocated condition, for a ✗ line.
func allocatedWhy(conds []metav1.Condition, typ string) string {
	cond := meta.FindStatusCondition(conds, typ)
	if cond == nil || cond.Status == metav1.ConditionTrue {
		return ": the active gateway's agent allocates them; see its log"
	}
	return fmt.Sprintf(": %s: %s", cond.Reason, cond.Message)
}

// outside returns the first of ips that is not in p.
func outside(p netip.Prefix, ips []string) string {
	for _, s := range ips {
		if a, err := netip.ParseAddr(s); err != nil || !p.Contains(a) {
			return s
		}
	}
	return ""
}
