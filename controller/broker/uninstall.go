package broker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/routeagent"
	"github.com/snorkel-net/snorkel/controller/servicesync"
	"github.com/snorkel-net/snorkel/deploy"
)

// UninstallCommand is what `snorkel uninstall` is asked to do.
type UninstallCommand struct {
	// Kubeconfig and Context name the cluster to uninstall from; empty
	// means $KUBECONFIG or ~/.kube/config and its current context.
	Kubeconfig, Context string
	// Yes skips the confirmation prompt (--yes).
	Yes bool
}

// RunUninstall is `snorkel uninstall`: once the user confirms on in
// (unless Yes), it runs Uninstall against the kubeconfig context.
func RunUninstall(c UninstallCommand, in io.Reader, out io.Writer) error {
	cfg, err := LoadKubeconfig(c.Kubeconfig, c.Context)
	if err != nil {
		return err
	}
	name := contextName(c.Kubeconfig, c.Context, cfg)
	if !c.Yes {
		fmt.Fprintf(out, "? This will completely uninstall Snorkel from the cluster %q. Are you sure you want to continue? (y/N) ", name)
		line, err := bufio.NewReader(in).ReadString('\n')
		switch answer := strings.ToLower(strings.TrimSpace(line)); {
		case answer == "y" || answer == "yes":
		case answer == "" && err != nil:
			fmt.Fprintln(out)
			return errors.New("no answer to the confirmation prompt: pass --yes to uninstall without it")
		default:
			fmt.Fprintln(out, "Not uninstalling.")
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	return Uninstall(ctx, cfg, name, out)
}

// contextName is the kubeconfig context a command works on, as the
// status lines name the cluster; the API server's address if the
// kubeconfig has no current context.
func contextName(path, kubeContext string, cfg *rest.Config) string {
	if kubeContext != "" {
		return kubeContext
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	raw, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).RawConfig()
	if err != nil || raw.CurrentContext == "" {
		return cfg.Host
	}
	return raw.CurrentContext
}

// workloadStopWait bounds the wait for the pods of the agent, the route
// agent and dnsd to end once their DaemonSets and Deployment are deleted:
// their grace period is 30 seconds.
const workloadStopWait = 2 * time.Minute

// Uninstall removes Snorkel from the cluster member reaches, and the
// cluster from its broker, telling out each step as subctl does; name is
// how the lines call the cluster.
//
// It stops the agent, the route agent and dnsd first, so that nothing
// publishes the
// cluster again, then removes it from the broker with Leave (its Cluster,
// Endpoints, exported services and global CIDR: the other members stop
// importing its services) while the agent Secret still holds the broker's
// address and token. Then it deletes what Join and DeployMember installed
// (the workloads, the agent Secret, the ServiceAccounts and their roles,
// api.AgentNamespace, the clusterset.local section of CoreDNS, and the
// submariner.io CRDs, as subctl does), the services the agent imported
// into the cluster, and the gateway label of the nodes. A broker the
// cluster holds goes too when no other cluster uses it; while others do,
// it stays with the CRDs it needs. The Multi-Cluster Services CRDs stay,
// as subctl leaves them: they hold the users' ServiceExports.
//
// Running it again, or on a cluster Snorkel was never installed in, does
// nothing. A step that fails leaves what the later steps need, so running
// it again resumes.
func Uninstall(ctx context.Context, member *rest.Config, name string, out io.Writer) error {
	st := newStatus(out)
	defer st.end()
	u, err := newUninstaller(member, name, st)
	if err != nil {
		return err
	}
	st.start("Checking if Snorkel is installed on cluster %q", name)
	ac, err := api.LoadAgentConfig(ctx, u.kc, api.AgentNamespace)
	switch {
	case apierrors.IsNotFound(err):
		ac = nil
		st.success("Snorkel's agent configuration (Secret %s/%s) is not on cluster %q - skipping the broker", api.AgentNamespace, api.AgentSecretName, name)
	case err != nil:
		return st.failure(err)
	default:
		st.success("Cluster %q is joined to the broker at %s as %q", name, ac.BrokerURL, ac.ClusterID)
		u.customCoreDNS = ac.CoreDNSCustomConfigMap
	}
	if err := u.stopWorkloads(ctx); err != nil {
		return err
	}
	if ac != nil {
		if err := u.leaveBroker(ctx, ac); err != nil {
			return err
		}
	}
	steps := []func(context.Context) error{u.deleteAgentObjects, u.deleteImports, u.removeCoreDNSForward, u.deleteUnusedBroker, u.deleteClusterRoles, u.deleteAgentNamespace, u.deleteCRDs, u.unlabelGatewayNodes}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// uninstaller holds the clients of one Uninstall and what its steps tell
// the later ones.
type uninstaller struct {
	cfg    *rest.Config
	kc     kubernetes.Interface
	dc     dynamic.Interface
	mapper meta.RESTMapper
	name   string
	st     *status
	// brokerInUse names the broker namespaces in the cluster that other
	// clusters still use: their CRDs stay.
	brokerInUse []string
	// customCoreDNS is the custom CoreDNS ConfigMap the cluster joined
	// with (--coredns-custom-configmap); empty for the Corefile.
	customCoreDNS string
}

func newUninstaller(cfg *rest.Config, name string, st *status) (*uninstaller, error) {
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	groups, err := restmapper.GetAPIGroupResources(disc)
	if err != nil {
		return nil, fmt.Errorf("discovering the API server's resources of cluster %q: %w", name, err)
	}
	return &uninstaller{cfg: cfg, kc: kc, dc: dc, mapper: restmapper.NewDiscoveryRESTMapper(groups), name: name, st: st}, nil
}

// installedObjects are what Join and DeployMember install, but for the
// CRDs and the CoreDNS section.
func installedObjects() ([]*unstructured.Unstructured, error) {
	objs, err := memberWorkloads(deploy.DefaultImage)
	if err != nil {
		return nil, err
	}
	access, err := unstructuredObjects(memberAccessObjects())
	if err != nil {
		return nil, err
	}
	secret := &unstructured.Unstructured{}
	secret.SetAPIVersion("v1")
	secret.SetKind("Secret")
	secret.SetNamespace(api.AgentNamespace)
	secret.SetName(api.AgentSecretName)
	return append(append(objs, access...), secret), nil
}

// deleteObject deletes u; it reports whether there was one to delete. A
// kind the cluster does not serve has nothing to delete.
func (u *uninstaller) deleteObject(ctx context.Context, obj *unstructured.Unstructured) (bool, error) {
	gvk := obj.GroupVersionKind()
	m, err := u.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var r dynamic.ResourceInterface = u.dc.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		r = u.dc.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	err = r.Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deleting %s %s: %w", obj.GetKind(), objectKey(obj), err)
	}
	return true, nil
}

func objectKey(obj *unstructured.Unstructured) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

// stopWorkloads deletes the DaemonSets of the agent and the route agent
// and dnsd's Deployment, and waits for their pods to end.
func (u *uninstaller) stopWorkloads(ctx context.Context) error {
	u.st.start("Stopping the Snorkel agent, route agent and dnsd on cluster %q", u.name)
	objs, err := memberWorkloads(deploy.DefaultImage)
	if err != nil {
		return u.st.failure(err)
	}
	type selector struct{ namespace, labels string }
	var pods []selector
	for _, obj := range objs {
		match, found, _ := unstructured.NestedStringMap(obj.Object, "spec", "selector", "matchLabels")
		if !found {
			continue
		}
		pods = append(pods, selector{obj.GetNamespace(), labels.SelectorFromSet(match).String()})
		deleted, err := u.deleteObject(ctx, obj)
		if err != nil {
			return u.st.failure(err)
		}
		if deleted {
			u.st.success("Deleted %s %s", obj.GetKind(), objectKey(obj))
		}
		if deleted && obj.GetName() == RouteAgentDaemonSet {
			// It leaves them so that pods keep working while it rolls; it
			// cannot tell a rollout from its end.
			u.st.warning("The route agent leaves its routes (protocol %d) and nftables table ip %s on the nodes: remove them with `snorkel route-agent --uninstall` on each node",
				routeagent.RouteProtocol, routeagent.TableName)
		}
	}
	running := func(ctx context.Context) (bool, error) {
		for _, p := range pods {
			l, err := u.kc.CoreV1().Pods(p.namespace).List(ctx, metav1.ListOptions{LabelSelector: p.labels})
			if err != nil || len(l.Items) > 0 {
				return false, err
			}
		}
		return true, nil
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, workloadStopWait, true, running)
	switch {
	case wait.Interrupted(err):
		u.st.warning("Their pods have not ended within %v (a node that is down cannot confirm it): they will not start again", workloadStopWait)
	case err != nil:
		return u.st.failure(fmt.Errorf("listing the pods of the agent, the route agent and dnsd: %w", err))
	}
	return nil
}

// leaveBroker removes the cluster from the broker ac names, with ac's
// token: what the broker-info file granted the join.
func (u *uninstaller) leaveBroker(ctx context.Context, ac *api.AgentConfig) error {
	u.st.start("Removing cluster %q from the broker at %s (namespace %q)", ac.ClusterID, ac.BrokerURL, ac.BrokerNamespace)
	bcfg := ac.BrokerConfig()
	bcfg.Dial = u.cfg.Dial
	if err := Leave(ctx, bcfg, ac.BrokerNamespace, ac.ClusterID); err != nil {
		return u.st.failure(fmt.Errorf("%w; Snorkel stays installed in cluster %q, so uninstall again once the broker is reachable", err, u.name))
	}
	u.st.success("Deleted its Cluster and Endpoints, its exported services and its global CIDR: the other clusters stop importing its services")
	return nil
}

// deleteAgentObjects deletes what Join and DeployMember put in
// api.AgentNamespace, the agent Secret last: until then, uninstalling
// again can still reach the broker.
func (u *uninstaller) deleteAgentObjects(ctx context.Context) error {
	u.st.start("Deleting the Snorkel components in namespace %q on cluster %q", api.AgentNamespace, u.name)
	objs, err := installedObjects()
	if err != nil {
		return u.st.failure(err)
	}
	var deleted []string
	for _, obj := range objs {
		if obj.GetNamespace() == "" {
			continue
		}
		ok, err := u.deleteObject(ctx, obj)
		if err != nil {
			return u.st.failure(err)
		}
		if ok {
			deleted = append(deleted, obj.GetKind()+" "+obj.GetName())
		}
	}
	if len(deleted) > 0 {
		u.st.success("Deleted %s", strings.Join(deleted, ", "))
	}
	return nil
}

// deleteImports deletes the ServiceImports and EndpointSlices the agent
// imported into the cluster: nothing updates them any more.
func (u *uninstaller) deleteImports(ctx context.Context) error {
	u.st.start("Deleting the services imported into cluster %q", u.name)
	sliceCount, err := u.deleteAll(ctx, endpointSliceResource, discoveryv1.LabelManagedBy+"="+servicesync.ManagedBy)
	if err != nil {
		return u.st.failure(err)
	}
	imports, err := u.deleteAll(ctx, serviceImportResource, servicesync.LabelManagedBy+"="+servicesync.ManagedBy)
	if err != nil {
		return u.st.failure(err)
	}
	if imports+sliceCount > 0 {
		u.st.success("Deleted %d ServiceImports and %d EndpointSlices", imports, sliceCount)
	}
	return nil
}

// deleteAll deletes the objects of gvr in every namespace that match
// selector and returns how many it deleted; a resource the cluster does
// not serve has none.
func (u *uninstaller) deleteAll(ctx context.Context, gvr schema.GroupVersionResource, selector string) (int, error) {
	list, err := u.dc.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
	}
	n := 0
	for _, obj := range list.Items {
		err := u.dc.Resource(gvr).Namespace(obj.GetNamespace()).Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return n, fmt.Errorf("deleting %s %s: %w", gvr.GroupResource(), objectKey(&obj), err)
		default:
			n++
		}
	}
	return n, nil
}

// removeCoreDNSForward takes the clusterset.local section out of the
// cluster's Corefile.
func (u *uninstaller) removeCoreDNSForward(ctx context.Context) error {
	u.st.start("Removing the %s forward from CoreDNS on cluster %q", ClustersetZone, u.name)
	if u.customCoreDNS != "" {
		removed, err := removeCustomCoreDNS(ctx, u.kc, u.customCoreDNS)
		if err != nil {
			return u.st.failure(err)
		}
		if removed {
			u.st.success("CoreDNS's custom ConfigMap %s no longer forwards %s", u.customCoreDNS, ClustersetZone)
		}
		return nil
	}
	cms := u.kc.CoreV1().ConfigMaps(metav1.NamespaceSystem)
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		cm, err := cms.Get(ctx, CoreDNSConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			u.st.success("No ConfigMap %s/%s - skipping", metav1.NamespaceSystem, CoreDNSConfigMap)
			return nil
		}
		if err != nil {
			return err
		}
		corefile := cm.Data[corefileKey]
		want := deploy.RemoveCoreDNSStanza(corefile)
		if want == corefile {
			return nil
		}
		cm.Data[corefileKey] = want
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: deploy.FieldManager}); err != nil {
			return err
		}
		u.st.success("CoreDNS (%s/%s) no longer forwards %s", metav1.NamespaceSystem, CoreDNSConfigMap, ClustersetZone)
		return nil
	})
	if err != nil {
		return u.st.failure(fmt.Errorf("the CoreDNS ConfigMap %s/%s: %w", metav1.NamespaceSystem, CoreDNSConfigMap, err))
	}
	return nil
}

// deleteUnusedBroker deletes the broker namespaces the cluster holds that
// no other cluster uses, as subctl does; it records the others in
// brokerInUse.
func (u *uninstaller) deleteUnusedBroker(ctx context.Context) error {
	u.st.start("Checking if the broker component is installed on cluster %q", u.name)
	sas, err := u.kc.CoreV1().ServiceAccounts(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + BrokerClientServiceAccount})
	if err != nil {
		return u.st.failure(fmt.Errorf("looking for broker namespaces: %w", err))
	}
	if len(sas.Items) == 0 {
		u.st.success("The broker component is not installed on cluster %q", u.name)
		return nil
	}
	var unused []string
	for _, sa := range sas.Items {
		ns := sa.Namespace
		u.st.success("The broker component is installed in namespace %q", ns)
		list, err := u.dc.Resource(submv1.ClusterResource).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return u.st.failure(fmt.Errorf("listing the Clusters of broker namespace %q: %w", ns, err))
		}
		var others []string
		if err == nil {
			for _, c := range list.Items {
				others = append(others, c.GetName())
			}
		}
		if len(others) > 0 {
			u.st.warning("Broker namespace %q appears to be in use by other clusters (%s) - keeping the broker components", ns, strings.Join(others, ", "))
			u.brokerInUse = append(u.brokerInUse, ns)
			continue
		}
		unused = append(unused, ns)
	}
	for _, ns := range unused {
		u.st.start("Deleting the broker namespace %q", ns)
		if err := u.deleteNamespace(ctx, ns); err != nil {
			return err
		}
	}
	return nil
}

// deleteNamespace deletes ns unless it is gone or going.
func (u *uninstaller) deleteNamespace(ctx context.Context, ns string) error {
	have, err := u.kc.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		u.st.success("Namespace %q is gone", ns)
		return nil
	case err != nil:
		return u.st.failure(err)
	case have.DeletionTimestamp != nil:
		u.st.success("Namespace %q is already being deleted", ns)
		return nil
	}
	if err := u.kc.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return u.st.failure(fmt.Errorf("deleting namespace %q: %w", ns, err))
	}
	return nil
}

// deleteClusterRoles deletes the agent's and dnsd's ClusterRoles and
// their bindings.
func (u *uninstaller) deleteClusterRoles(ctx context.Context) error {
	u.st.start("Deleting the Snorkel cluster roles and bindings on cluster %q", u.name)
	objs, err := installedObjects()
	if err != nil {
		return u.st.failure(err)
	}
	deleted := map[string]bool{}
	var order []string
	for _, obj := range objs {
		if k := obj.GetKind(); k != "ClusterRole" && k != "ClusterRoleBinding" {
			continue
		}
		ok, err := u.deleteObject(ctx, obj)
		if err != nil {
			return u.st.failure(err)
		}
		if !slices.Contains(order, obj.GetName()) {
			order = append(order, obj.GetName())
		}
		deleted[obj.GetName()] = deleted[obj.GetName()] || ok
	}
	for _, n := range order {
		if deleted[n] {
			u.st.success("Deleted the %q cluster role and binding", n)
		}
	}
	return nil
}

func (u *uninstaller) deleteAgentNamespace(ctx context.Context) error {
	u.st.start("Deleting the Snorkel namespace %q on cluster %q", api.AgentNamespace, u.name)
	return u.deleteNamespace(ctx, api.AgentNamespace)
}

// deleteCRDs deletes the submariner.io CRDs, and with them every object
// of theirs the agent made, unless a broker in the cluster still needs
// them; then it deletes only the Globalnet objects the agent made.
func (u *uninstaller) deleteCRDs(ctx context.Context) error {
	u.st.start("Deleting the Snorkel custom resource definitions on cluster %q", u.name)
	if len(u.brokerInUse) > 0 {
		u.st.warning("Keeping them: broker namespace %s uses them", strings.Join(u.brokerInUse, ", "))
		for _, gvr := range []schema.GroupVersionResource{submv1.GlobalIngressIPResource, submv1.ClusterGlobalEgressIPResource} {
			if _, err := u.deleteAll(ctx, gvr, ""); err != nil {
				return u.st.failure(err)
			}
		}
		return nil
	}
	crds, err := deploy.CRDs()
	if err != nil {
		return u.st.failure(err)
	}
	var names []string
	for _, crd := range crds {
		if strings.HasSuffix(crd.GetName(), "."+submv1.Group) {
			names = append(names, crd.GetName())
		}
	}
	slices.Sort(names)
	for _, n := range names {
		err := u.dc.Resource(crdResource).Delete(ctx, n, metav1.DeleteOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return u.st.failure(fmt.Errorf("deleting CustomResourceDefinition %q: %w", n, err))
		default:
			u.st.success("Deleted the %q custom resource definition", n)
		}
	}
	return nil
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// unlabelGatewayNodes takes GatewayLabel off the nodes, as subctl does:
// a later install chooses its gateways anew.
func (u *uninstaller) unlabelGatewayNodes(ctx context.Context) error {
	u.st.start("Unlabeling gateway nodes on cluster %q", u.name)
	nodes, err := u.kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: GatewayLabel})
	if err != nil {
		return u.st.failure(fmt.Errorf("listing the gateway nodes: %w", err))
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:null}}}`, GatewayLabel)
	for _, n := range nodes.Items {
		_, err := u.kc.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: deploy.FieldManager})
		if err != nil && !apierrors.IsNotFound(err) {
			return u.st.failure(fmt.Errorf("unlabeling node %q: %w", n.Name, err))
		}
		u.st.success("Node %q is no longer a gateway", n.Name)
	}
	return nil
}
