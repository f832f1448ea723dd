package diagnose

import (
	"context"
	"net/netip"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/deploy/calico"
)

// The network plugins diagnose tells apart, named as Submariner names
// them.
const (
	cniCalico        = "calico"
	cniCanal         = "canal-flannel"
	cniFlannel       = "flannel"
	cniKindnet       = "kindnet"
	cniWeave         = "weave-net"
	cniCilium        = "cilium"
	cniOVNKubernetes = "OVNKubernetes"
	cniGeneric       = "generic"
)

// cniDaemonSets maps the DaemonSet each plugin runs on every node to the
// plugin; canal comes before flannel and calico, whose containers it runs.
var cniDaemonSets = []struct{ prefix, plugin string }{
	{"canal", cniCanal},
	{"calico-node", cniCalico},
	{"kube-flannel", cniFlannel},
	{"kindnet", cniKindnet},
	{"weave-net", cniWeave},
	{"cilium", cniCilium},
	{"ovnkube-node", cniOVNKubernetes},
}

// cniSupport says how Snorkel's gateway, which routes remote CIDRs to its
// TUN device, fares with each plugin: "" supported, else why not.
var cniSupport = map[string]string{
	cniCalico:  "",
	cniCanal:   "",
	cniFlannel: "",
	cniKindnet: "",
	cniWeave:   "",
	cniCilium:  "Cilium's eBPF datapath (its masquerading and kube-proxy replacement) can bypass the node's routes to the gateway, and Snorkel is not tested with it",
	cniOVNKubernetes: "OVN-Kubernetes routes pod traffic in OVN, not through the node's routes to the gateway, " +
		"and Snorkel has no OVN handler as Submariner's route agent does",
}

// detectCNI names the network plugin from the DaemonSets it runs.
func detectCNI(dss []appsv1.DaemonSet) string {
	for _, c := range cniDaemonSets {
		for i := range dss {
			if strings.HasPrefix(dss[i].Name, c.prefix) {
				return c.plugin
			}
		}
	}
	return cniGeneric
}

func checkCNI(ctx context.Context, c *cluster, r *result) {
	dss, err := c.Kube.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Fail("Cannot list the DaemonSets to find the CNI network plugin: %v", err)
		return
	}
	plugin := detectCNI(dss.Items)
	why, known := cniSupport[plugin]
	switch {
	case !known:
		r.Warn("Snorkel could not detect the CNI network plugin; it works with any plugin that routes pod traffic through the node's routing table and leaves the remote clusters' CIDRs unmasqueraded")
	case why != "":
		r.Fail("The detected CNI network plugin (%q) is not supported: %s", plugin, why)
	default:
		r.Success("The detected CNI network plugin (%q) is supported", plugin)
	}
	if plugin == cniCalico || plugin == cniCanal {
		checkCalicoPools(ctx, c, r)
	}
	checkRouteAgentCoverage(ctx, c, r)
	if c.probes != nil {
		probeMasquerade(ctx, c, r)
	}
}

// calicoPoolResource is where Calico keeps its IPPools without its API
// server, as subctl reads them.
var calicoPoolResource = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "ippools"}

// checkCalicoPools checks for the disabled, unmasqueraded IPPool per
// remote CIDR without which Calico masquerades pod traffic to the other
// clusters.
func checkCalicoPools(ctx context.Context, c *cluster, r *result) {
	fix := "create them with `snorkel calico ippools --cluster " + c.Agent.ClusterID + " --broker-info broker-info.subm | calicoctl apply -f -`"
	_, bdyn, err := c.broker()
	if err != nil {
		r.Fail("%v", err)
		return
	}
	list, err := bdyn.Resource(submv1.ClusterResource).Namespace(c.Agent.BrokerNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Fail("Cannot read the broker's Clusters: %v", err)
		return
	}
	clusters := make([]submv1.Cluster, 0, len(list.Items))
	for i := range list.Items {
		cl, err := submv1.FromUnstructured[submv1.Cluster](&list.Items[i])
		if err != nil {
			r.Fail("The broker's Cluster %s: %v", list.Items[i].GetName(), err)
			return
		}
		clusters = append(clusters, *cl)
	}
	want, err := calico.Pools(c.Agent.ClusterID, clusters)
	if err != nil {
		r.Fail("Cannot tell the IPPools Calico needs: %v", err)
		return
	}
	pools, err := c.Dynamic.Resource(calicoPoolResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Fail("Cannot read Calico's IPPools (%s): %v: %s", calicoPoolResource.GroupResource(), err, fix)
		return
	}
	have := map[netip.Prefix]*unstructured.Unstructured{}
	for i := range pools.Items {
		s, _, _ := unstructured.NestedString(pools.Items[i].Object, "spec", "cidr")
		if p, err := netip.ParsePrefix(s); err == nil {
			have[p.Masked()] = &pools.Items[i]
		}
	}
	bad := 0
	for _, w := range want {
		p := netip.MustParsePrefix(w.Spec.CIDR)
		pool, ok := have[p]
		if !ok {
			bad++
			r.Fail("No Calico IPPool for the %s %s of cluster %q: Calico masquerades pod traffic to it; %s", w.What, p, w.Cluster, fix)
			continue
		}
		disabled, _, _ := unstructured.NestedBool(pool.Object, "spec", "disabled")
		nat, _, _ := unstructured.NestedBool(pool.Object, "spec", "natOutgoing")
		if !disabled || nat {
			bad++
			r.Fail("The Calico IPPool %q for the %s %s of cluster %q has disabled %v and natOutgoing %v, want true and false: %s",
				pool.GetName(), w.What, p, w.Cluster, disabled, nat, fix)
		}
	}
	if bad == 0 {
		r.Success("Calico has the %d IPPools that keep it from masquerading traffic to the other clusters", len(want))
	}
}
