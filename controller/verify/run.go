package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/internal/podstate"
	"github.com/snorkel-net/snorkel/controller/show"
)

// Options are what `snorkel verify` was asked.
type Options struct {
	// From runs the check pods; To the servers.
	From, To show.Target
	// Namespace is the agent namespace, where join stored the agent's
	// configuration.
	Namespace string
	Kinds     []Kind
	// Image is Snorkel's image, which servers and checks run.
	Image string
	// NamespacePrefix starts the name of the namespaces verify creates.
	NamespacePrefix string
	// Timeout bounds the wait for the servers, and each check's retries:
	// an export takes seconds to reach the other cluster's DNS.
	Timeout time.Duration
	// Tries is how each check pod tries; a zero Retry is Timeout.
	Tries Tries
	// JUnitReport, if set, is a file the results are written to as a
	// JUnit XML report too.
	JUnitReport string
	// Verbose prints every check pod's log after the table.
	Verbose bool
	Out     io.Writer
}

// tries is o.Tries with its default retry.
func (o *Options) tries() Tries {
	t := o.Tries
	if t.Retry == 0 {
		t.Retry = o.Timeout
	}
	return t
}

// ErrChecksFailed is returned when a check failed; the table says which.
var ErrChecksFailed = errors.New("verify: checks failed")

// Timing of the waits on the clusters.
const (
	pollInterval = 2 * time.Second
	// podStartGrace is how long a check pod may take to start and stop,
	// besides its retries.
	podStartGrace = 2 * time.Minute
	// cleanupTimeout bounds the deletion of the namespaces, which runs
	// also after the run was interrupted.
	cleanupTimeout = 30 * time.Second
)

// member is a cluster verify acts on.
type member struct {
	*show.Conn
	Cluster
}

// Run verifies o.To from o.From and prints the table; it returns
// ErrChecksFailed if a check failed.
func Run(ctx context.Context, o Options) (err error) {
	from, err := connect(ctx, o.From, o.Namespace)
	if err != nil {
		return err
	}
	to, err := connect(ctx, o.To, o.Namespace)
	if err != nil {
		return err
	}
	switch {
	case from.ID == to.ID:
		return fmt.Errorf("--context %s and --tocontext %s are the same cluster (%s): give --tocontext another cluster of the clusterset", from.Context, to.Context, from.ID)
	case from.GlobalCIDR.IsValid() != to.GlobalCIDR.IsValid():
		return fmt.Errorf("contexts %s and %s disagree on Globalnet, which only one has on: both must join the same broker (snorkel show networks tells their global CIDRs)", from.Context, to.Context)
	}
	ns := o.NamespacePrefix + "-" + rand.String(5)
	var kinds []string
	for _, k := range o.Kinds {
		kinds = append(kinds, string(k))
	}
	fmt.Fprintf(o.Out, "Verifying %s from cluster %s (context %s) to cluster %s (context %s) in namespace %s\n",
		strings.Join(kinds, " and "), from.ID, from.Context, to.ID, to.Context, ns)
	var created []member
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		for _, m := range created {
			if derr := m.Kube.CoreV1().Namespaces().Delete(cctx, ns, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
				err = errors.Join(err, fmt.Errorf("deleting namespace %s in context %s (delete it with kubectl): %w", ns, m.Context, derr))
				continue
			}
			fmt.Fprintf(o.Out, "Deleted namespace %s in context %s\n", ns, m.Context)
		}
	}()
	for _, m := range []member{from, to} {
		if _, err := m.Kube.CoreV1().Namespaces().Create(ctx, namespace(ns), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating namespace %s in context %s: %w", ns, m.Context, err)
		}
		created = append(created, m)
	}
	servers, err := deployServers(ctx, to, ns, o)
	if err != nil {
		return err
	}
	results, err := runChecks(ctx, from, ns, o, Plan(from.Cluster, to.Cluster, servers, o.Kinds, o.tries()))
	if err != nil {
		return err
	}
	if err := WriteTable(o.Out, from.ID, to.ID, results); err != nil {
		return err
	}
	if o.JUnitReport != "" {
		if err := writeJUnitFile(o.JUnitReport, from.ID, to.ID, results); err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "Wrote the JUnit report %s\n", o.JUnitReport)
	}
	if o.Verbose {
		if err := WriteLogs(o.Out, results); err != nil {
			return err
		}
	}
	if Count(results).Failed > 0 {
		return ErrChecksFailed
	}
	return nil
}

// connect reaches t's cluster and reads what the plan needs of it.
func connect(ctx context.Context, t show.Target, ns string) (member, error) {
	conn, err := show.Connect(ctx, t, ns, 0)
	if err != nil {
		return member{}, err
	}
	if conn.Agent == nil {
		return member{}, errors.New(conn.NotInstalled())
	}
	m := member{Conn: conn, Cluster: Cluster{Context: t.Context, ID: conn.Agent.ClusterID, ServiceDiscovery: conn.Agent.ServiceDiscovery}}
	if g := conn.Agent.GlobalCIDR; g != "" {
		if m.GlobalCIDR, err = netip.ParsePrefix(g); err != nil {
			return member{}, fmt.Errorf("context %s: the agent configuration's global CIDR: %w; join the cluster again", t.Context, err)
		}
	}
	nodes, err := conn.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return member{}, fmt.Errorf("context %s: listing the nodes: %w", t.Context, err)
	}
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range nodes.Items {
		switch {
		case !schedulable(&n):
		case n.Labels[broker.GatewayLabel] == "true" && m.Gateway == "":
			m.Gateway = n.Name
		case n.Labels[broker.GatewayLabel] != "true" && m.Other == "":
			m.Other = n.Name
		}
	}
	if m.Gateway == "" {
		return member{}, fmt.Errorf("context %s has no ready, schedulable node labelled %s=true: label the gateway node (kubectl label node NODE %s=true)",
			t.Context, broker.GatewayLabel, broker.GatewayLabel)
	}
	return m, nil
}

// schedulable reports whether n is ready and takes pods that tolerate
// nothing.
func schedulable(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deployServers starts the servers and their Services in to, exports the
// Services, and waits until both servers are ready.
func deployServers(ctx context.Context, to member, ns string, o Options) (Servers, error) {
	s := Servers{Namespace: ns, Service: serviceName, Headless: headlessName}
	fmt.Fprintf(o.Out, "Starting the servers in context %s on %s\n", to.Context, nodeNames(to.Nodes()))
	for _, svc := range services(ns) {
		if _, err := to.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return s, fmt.Errorf("context %s: creating Service %s/%s: %w", to.Context, ns, svc.Name, err)
		}
	}
	if _, err := to.Kube.AppsV1().StatefulSets(ns).Create(ctx, serverStatefulSet(ns, o.Image, to.Cluster), metav1.CreateOptions{}); err != nil {
		return s, fmt.Errorf("context %s: creating the servers' StatefulSet: %w", to.Context, err)
	}
	mcs, err := mcsclient.NewForConfig(to.Config)
	if err != nil {
		return s, err
	}
	for _, name := range []string{serviceName, headlessName} {
		_, err := mcs.MulticlusterV1alpha1().ServiceExports(ns).Create(ctx, serviceExport(ns, name), metav1.CreateOptions{FieldManager: "snorkel"})
		switch {
		case apierrors.IsNotFound(err):
			return s, fmt.Errorf("context %s does not serve ServiceExports (%v): run snorkel join for it, which installs the Multi-Cluster Services API", to.Context, err)
		case err != nil:
			return s, fmt.Errorf("context %s: exporting Service %s/%s: %w", to.Context, ns, name, err)
		}
	}
	pods, err := waitForServers(ctx, to, ns, o.Timeout)
	if err != nil {
		return s, err
	}
	for _, p := range pods {
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil {
			return s, fmt.Errorf("context %s: server pod %s has IP %q: %w", to.Context, p.Name, p.Status.PodIP, err)
		}
		s.Pods = append(s.Pods, ServerPod{Name: p.Name, IP: ip, Node: Node{Name: p.Spec.NodeName, Gateway: p.Spec.NodeName == to.Gateway}})
	}
	svc, err := to.Kube.CoreV1().Services(ns).Get(ctx, serviceName, metav1.GetOptions{})
	if err != nil {
		return s, fmt.Errorf("context %s: reading Service %s/%s: %w", to.Context, ns, serviceName, err)
	}
	if s.ClusterIP, err = netip.ParseAddr(svc.Spec.ClusterIP); err != nil {
		return s, fmt.Errorf("context %s: Service %s/%s has ClusterIP %q: %w", to.Context, ns, serviceName, svc.Spec.ClusterIP, err)
	}
	return s, nil
}

// waitForServers waits until both servers are ready, and returns them by
// name.
func waitForServers(ctx context.Context, to member, ns string, timeout time.Duration) ([]corev1.Pod, error) {
	deadline := time.Now().Add(timeout)
	for {
		list, err := to.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: appLabel + "=" + appServer})
		if err != nil {
			return nil, fmt.Errorf("context %s: listing the server pods: %w", to.Context, err)
		}
		ready := 0
		var states []string
		for _, p := range list.Items {
			if podstate.Ready(&p) && p.Status.PodIP != "" {
				ready++
			}
			states = append(states, p.Name+": "+podstate.Describe(&p))
		}
		if ready == 2 && len(list.Items) == 2 {
			slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
			return list.Items, nil
		}
		if time.Now().After(deadline) {
			if len(states) == 0 {
				states = []string{"no pod was created (kubectl describe statefulset " + serverName + ")"}
			}
			return nil, fmt.Errorf("the servers in context %s were not ready after %s (--timeout): %s", to.Context, timeout, strings.Join(states, "; "))
		}
		if err := podstate.Sleep(ctx, pollInterval); err != nil {
			return nil, err
		}
	}
}

// runChecks runs the planned checks as pods of from, all at once, and
// returns their results in the plan's order.
func runChecks(ctx context.Context, from member, ns string, o Options, checks []Check) ([]Result, error) {
	if err := waitForServiceAccount(ctx, from, ns, o.Timeout); err != nil {
		return nil, err
	}
	results := make([]Result, len(checks))
	pending := map[string]int{}
	for i, c := range checks {
		results[i].Check = c
		if c.Skip != "" {
			continue
		}
		name := fmt.Sprintf("check-%02d", i)
		results[i].Pod = name
		if _, err := from.Kube.CoreV1().Pods(ns).Create(ctx, checkPod(ns, name, o.Image, c), metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("context %s: creating check pod %s: %w", from.Context, name, err)
		}
		pending[name] = i
	}
	fmt.Fprintf(o.Out, "Running %d checks as pods in context %s on %s\n", len(pending), from.Context, nodeNames(from.Nodes()))
	wait := o.tries().Retry + podStartGrace
	deadline := time.Now().Add(wait)
	for len(pending) > 0 {
		list, err := from.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: appLabel + "=" + appCheck})
		if err != nil {
			return nil, fmt.Errorf("context %s: listing the check pods: %w", from.Context, err)
		}
		expired := time.Now().After(deadline)
		for _, p := range list.Items {
			i, ok := pending[p.Name]
			if !ok {
				continue
			}
			r := &results[i]
			switch p.Status.Phase {
			case corev1.PodSucceeded, corev1.PodFailed:
				r.Passed = p.Status.Phase == corev1.PodSucceeded
				r.Log, r.Detail = checkLog(ctx, from, &p)
			default:
				if !expired {
					continue
				}
				r.Detail = fmt.Sprintf("did not finish within %s: %s", wait, podstate.Describe(&p))
			}
			delete(pending, p.Name)
		}
		if expired {
			for name, i := range pending {
				results[i].Detail = "the pod " + name + " is gone"
			}
			break
		}
		if len(pending) > 0 {
			if err := podstate.Sleep(ctx, pollInterval); err != nil {
				return nil, err
			}
		}
	}
	return results, nil
}

// checkLog reads a finished check pod's log, and returns it with its last
// line, the check's outcome, less the command's name.
func checkLog(ctx context.Context, from member, p *corev1.Pod) (log, last string) {
	b, err := from.Kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Sprintf("%s (reading the log: %v)", podstate.Describe(p), err)
	}
	log = string(b)
	lines := strings.Split(strings.TrimSpace(log), "\n")
	last = strings.TrimPrefix(lines[len(lines)-1], "snorkel lab-pod: ")
	if last == "" {
		last = podstate.Describe(p)
	}
	return log, last
}

// waitForServiceAccount waits for the default ServiceAccount of a new
// namespace: the API server refuses pods until the controller manager
// has made it.
func waitForServiceAccount(ctx context.Context, m member, ns string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := m.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		switch {
		case err == nil:
			return nil
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("context %s: reading ServiceAccount %s/default: %w", m.Context, ns, err)
		case time.Now().After(deadline):
			return fmt.Errorf("context %s: namespace %s has no default ServiceAccount after %s: is kube-controller-manager running?", m.Context, ns, timeout)
		}
		if err := podstate.Sleep(ctx, pollInterval); err != nil {
			return err
		}
	}
}

func nodeNames(nodes []Node) string {
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = n.String()
	}
	return strings.Join(s, " and ")
}
