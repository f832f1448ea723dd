package diagnose

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/deploy"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// rejoin is the fix for whatever `snorkel join` installs.
const rejoin = "run `snorkel join` for this cluster again, which reinstalls it"

func checkDeployment(ctx context.Context, c *cluster, r *result) {
	checkAgentSecret(ctx, c, r)
	checkCRDs(ctx, c, r)
	checkGatewayNodes(ctx, c, r)
	checkAgentDaemonSet(ctx, c, r)
	checkRouteAgentDaemonSet(ctx, c, r)
	checkDNSDeployment(ctx, c, r)
}

// checkAgentSecret finds the keys of the agent Secret that the agent or
// dnsd read and that are missing.
func checkAgentSecret(ctx context.Context, c *cluster, r *result) {
	s, err := c.Kube.CoreV1().Secrets(c.Namespace).Get(ctx, api.AgentSecretName, metav1.GetOptions{})
	if err != nil {
		r.Fail("Cannot read the agent Secret %s/%s: %v: %s", c.Namespace, api.AgentSecretName, err, rejoin)
		return
	}
	var missing []string
	for _, k := range slices.Sorted(maps.Keys(c.Agent.SecretData())) {
		if _, ok := s.Data[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		r.Fail("The agent Secret %s/%s lacks the keys %s: %s", c.Namespace, api.AgentSecretName, strings.Join(missing, ", "), rejoin)
		return
	}
	r.Success("The agent Secret %s/%s holds the configuration of cluster %q", c.Namespace, api.AgentSecretName, c.Agent.ClusterID)
}

func checkCRDs(ctx context.Context, c *cluster, r *result) {
	crds, err := deploy.CRDs()
	if err != nil {
		r.Fail("Cannot read Snorkel's CRDs: %v", err)
		return
	}
	var missing []string
	for _, u := range crds {
		_, err := c.Dynamic.Resource(crdResource).Get(ctx, u.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, u.GetName())
		case err != nil:
			r.Fail("Cannot read the CRD %s: %v", u.GetName(), err)
			return
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		r.Fail("The CRDs %s are missing: %s", strings.Join(missing, ", "), rejoin)
		return
	}
	r.Success("All %d CRDs are installed", len(crds))
}

func checkGatewayNodes(ctx context.Context, c *cluster, r *result) {
	nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: broker.GatewayLabel + "=true"})
	if err != nil {
		r.Fail("Cannot list the gateway nodes: %v", err)
		return
	}
	if len(nodes.Items) == 0 {
		r.Fail("No node is labelled as a gateway: label one with `kubectl label node NODE %s=true`", broker.GatewayLabel)
		return
	}
	names := make([]string, len(nodes.Items))
	for i := range nodes.Items {
		names[i] = nodes.Items[i].Name
	}
	r.Success("Gateway nodes (%s=true): %s", broker.GatewayLabel, strings.Join(names, ", "))
}

func checkAgentDaemonSet(ctx context.Context, c *cluster, r *result) {
	checkDaemonSet(ctx, c, r, "agent", broker.AgentDaemonSet,
		fmt.Sprintf("label a gateway node with `kubectl label node NODE %s=true`, and check that its taints are tolerated", broker.GatewayLabel))
}

// checkRouteAgentDaemonSet checks the route agent, without which the pods
// of the nodes other than the gateway's cannot reach the remote clusters.
func checkRouteAgentDaemonSet(ctx context.Context, c *cluster, r *result) {
	checkDaemonSet(ctx, c, r, "route agent", broker.RouteAgentDaemonSet,
		fmt.Sprintf("it runs on every node whose taints it tolerates: see `kubectl -n %s describe daemonset %s`", c.Namespace, broker.RouteAgentDaemonSet))
}

// checkDaemonSet checks that the DaemonSet name of component what is
// there and all its pods are ready; noNode is the fix when it runs on no
// node.
func checkDaemonSet(ctx context.Context, c *cluster, r *result, what, name, noNode string) {
	ds, err := c.Kube.AppsV1().DaemonSets(c.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		r.Fail("The %s DaemonSet %s/%s is missing: %s", what, c.Namespace, name, rejoin)
		return
	}
	if err != nil {
		r.Fail("Cannot read the %s DaemonSet %s/%s: %v", what, c.Namespace, name, err)
		return
	}
	desired, ready := ds.Status.DesiredNumberScheduled, ds.Status.NumberReady
	switch {
	case desired == 0:
		r.Fail("The %s DaemonSet %s/%s runs on no node: %s", what, c.Namespace, name, noNode)
	case ready < desired:
		r.Fail("The %s DaemonSet %s/%s has %d of %d pods ready: see `kubectl -n %s describe pods -l %s` and their logs",
			what, c.Namespace, name, ready, desired, c.Namespace, metav1.FormatLabelSelector(ds.Spec.Selector))
	default:
		r.Success("The %s DaemonSet %s/%s has all %d pods ready", what, c.Namespace, name, desired)
	}
}

func checkDNSDeployment(ctx context.Context, c *cluster, r *result) {
	d, err := c.Kube.AppsV1().Deployments(c.Namespace).Get(ctx, broker.DNSDeployment, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		r.Fail("The dnsd Deployment %s/%s is missing: %s", c.Namespace, broker.DNSDeployment, rejoin)
		return
	}
	if err != nil {
		r.Fail("Cannot read the dnsd Deployment %s/%s: %v", c.Namespace, broker.DNSDeployment, err)
		return
	}
	desired := int32(1)
	if d.Spec.Replicas != nil {
		desired = *d.Spec.Replicas
	}
	ready := d.Status.ReadyReplicas
	if ready < desired {
		r.Fail("The dnsd Deployment %s/%s has %d of %d replicas ready: see `kubectl -n %s describe deployment %s` and its pods' logs",
			c.Namespace, broker.DNSDeployment, ready, desired, c.Namespace, broker.DNSDeployment)
		return
	}
	r.Success("The dnsd Deployment %s/%s has all %d replicas ready", c.Namespace, broker.DNSDeployment, desired)
}
