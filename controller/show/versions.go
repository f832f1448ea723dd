package show

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/api"
)

// agentComponent names the agent in the versions table when no workload
// of the agent namespace runs it (it runs on the node itself).
const agentComponent = "snorkel-agent"

// unavailable is what subctl prints when no running instance tells its
// version.
const unavailable = "Unavailable"

// workload is a DaemonSet or Deployment of the agent namespace.
type workload struct {
	name     string
	template *corev1.PodTemplateSpec
	selector *metav1.LabelSelector
}

// isAgent reports whether w's pods run as the agent's ServiceAccount.
func (w *workload) isAgent() bool {
	return w.template.Spec.ServiceAccountName == api.AgentServiceAccount
}

// showVersions is `snorkel show versions`: per DaemonSet and Deployment
// of the agent namespace the image it is configured with and, for the
// agent's, the versions its agents report in their Gateways; then the
// agents no workload accounts for (run on the node itself).
func showVersions(ctx context.Context, c *cluster) *result {
	r := &result{}
	t, err := versionsTable(ctx, c)
	if err != nil {
		r.Fail("error retrieving versions: %v", err)
		return r
	}
	if t.empty() {
		r.none("no versions found: namespace %s has no workloads and no Gateway objects; is `snorkel agent` running on this cluster's gateway nodes?", c.Namespace)
		return r
	}
	r.shown, r.body = true, t.write
	return r
}

func versionsTable(ctx context.Context, c *cluster) (*table, error) {
	gws, err := c.listGateways(ctx)
	if err != nil {
		return nil, err
	}
	wls, err := workloads(ctx, c)
	if err != nil {
		return nil, err
	}
	t := &table{columns: []column{{"COMPONENT", 0}, {"REPOSITORY", 0}, {"CONFIGURED", 0}, {"RUNNING", 0}, {"ARCH", 0}}}
	arch := archLookup(ctx, c)
	covered := map[string]bool{}
	for _, w := range wls {
		nodes, err := workloadNodes(ctx, c, w)
		if err != nil {
			return nil, err
		}
		var running, arches []string
		for i := range gws {
			if w.isAgent() && slices.Contains(nodes, gatewayNode(&gws[i])) {
				covered[gws[i].Name] = true
				running = appendNew(running, gws[i].Status.Version)
			}
		}
		for _, n := range nodes {
			a, err := arch(n)
			if err != nil {
				return nil, err
			}
			arches = appendNew(arches, a)
		}
		if len(running) == 0 {
			running = []string{unavailable}
		}
		if len(nodes) == 0 {
			arches = []string{unavailable}
		}
		repo, tag := parseImage(w.template.Spec.Containers[0].Image)
		t.add(w.name, repo, tag, running, arches)
	}
	type agentRow struct{ version, arch string }
	var seen []agentRow
	for i := range gws {
		if covered[gws[i].Name] {
			continue
		}
		a, err := arch(gatewayNode(&gws[i]))
		if err != nil {
			return nil, err
		}
		row := agentRow{gws[i].Status.Version, a}
		if !slices.Contains(seen, row) {
			seen = append(seen, row)
			t.add(agentComponent, "", "", row.version, row.arch)
		}
	}
	return t, nil
}

// appendNew appends s to list unless it is empty or already there.
func appendNew(list []string, s string) []string {
	if s == "" || slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// workloads are the DaemonSets and then the Deployments of the agent
// namespace, as subctl lists the components of its namespace.
func workloads(ctx context.Context, c *cluster) ([]workload, error) {
	var out []workload
	keep := func(name string, tmpl *corev1.PodTemplateSpec, sel *metav1.LabelSelector) {
		if len(tmpl.Spec.Containers) > 0 {
			out = append(out, workload{name, tmpl, sel})
		}
	}
	dss, err := c.Kube.AppsV1().DaemonSets(c.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the DaemonSets in namespace %s: %w", c.Namespace, err)
	}
	for i := range dss.Items {
		keep(dss.Items[i].Name, &dss.Items[i].Spec.Template, dss.Items[i].Spec.Selector)
	}
	deps, err := c.Kube.AppsV1().Deployments(c.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the Deployments in namespace %s: %w", c.Namespace, err)
	}
	for i := range deps.Items {
		keep(deps.Items[i].Name, &deps.Items[i].Spec.Template, deps.Items[i].Spec.Selector)
	}
	return out, nil
}

// workloadNodes are the nodes the pods of w are scheduled on.
func workloadNodes(ctx context.Context, c *cluster, w workload) ([]string, error) {
	sel, err := metav1.LabelSelectorAsSelector(w.selector)
	if err != nil {
		return nil, fmt.Errorf("the selector of %s in namespace %s: %w", w.name, c.Namespace, err)
	}
	pods, err := c.Kube.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of %s in namespace %s: %w", w.name, c.Namespace, err)
	}
	var nodes []string
	for i := range pods.Items {
		nodes = appendNew(nodes, pods.Items[i].Spec.NodeName)
	}
	slices.Sort(nodes)
	return nodes, nil
}

// archLookup returns a function that gives a node's architecture label,
// read once per node; a node that does not exist, or that the user may
// not read, has none.
func archLookup(ctx context.Context, c *cluster) func(string) (string, error) {
	known := map[string]string{}
	return func(node string) (string, error) {
		if a, ok := known[node]; ok {
			return a, nil
		}
		n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
			known[node] = ""
		case err != nil:
			return "", fmt.Errorf("reading Node %s: %w", node, err)
		default:
			known[node] = n.Labels[corev1.LabelArchStable]
		}
		return known[node], nil
	}
}

// parseImage splits an image reference into its repository (the
// registry and path before the image's name) and its tag or digest;
// an image without either is "latest".
func parseImage(image string) (repository, version string) {
	name := image
	if at := strings.LastIndex(name, "@"); at >= 0 {
		name, version = name[:at], name[at+1:]
	}
	slash := strings.LastIndex(name, "/")
	if colon := strings.LastIndex(name, ":"); colon > slash {
		if version == "" {
			version = name[colon+1:]
		}
		name = name[:colon]
	}
	if version == "" {
		version = "latest"
	}
	if slash >= 0 {
		repository = name[:slash]
	}
	return repository, version
}
