package diagnose

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/internal/statusline"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/controller/show"
	"github.com/snorkel-net/snorkel/deploy"
	"github.com/snorkel-net/snorkel/deploy/calico"
)

// member is a joined cluster's clients and configuration.
type member struct {
	s     *kubelocal.Server
	kc    kubernetes.Interface
	dyn   dynamic.Interface
	mcs   mcsclient.Interface
	agent *api.AgentConfig
}

func newMember(t *testing.T, s *kubelocal.Server) *member {
	t.Helper()
	m := &member{s: s}
	var err error
	if m.kc, err = kubernetes.NewForConfig(s.Config()); err != nil {
		t.Fatal(err)
	}
	if m.dyn, err = dynamic.NewForConfig(s.Config()); err != nil {
		t.Fatal(err)
	}
	if m.mcs, err = mcsclient.NewForConfig(s.Config()); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *member) target() show.Target {
	return show.Target{Context: m.s.Name, Cluster: m.s.Name, Config: m.s.Config()}
}

// kubeadmCorefile is the Corefile kubeadm (and so kind) installs.
const kubeadmCorefile = `.:53 {
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 30
}
`

// setUpClusterset deploys a Globalnet broker and joins c1 and c2 to it as
// a user would, then plays the part of the controllers and agents that
// bare API servers lack: the DaemonSet and Deployment report their pods
// ready, c1's active gateway is connected to c2, the IPAM has allocated
// c1's egress IPs and the global IP of its exported service, the service
// is imported, and the cluster runs Calico with the IPPools Snorkel needs
// and kube-proxy in nftables mode.
func setUpClusterset(t *testing.T) (c1, c2 *member, brokerServer *kubelocal.Server) {
	servers := kubetest.Start(t,
		kubelocal.Options{Name: "broker"},
		kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"},
		kubelocal.Options{Name: "c2", ServiceCIDR: "10.99.0.0/16"})
	ctx := t.Context()
	info := filepath.Join(t.TempDir(), broker.InfoFileName)
	var out bytes.Buffer
	if err := broker.RunDeployBroker(broker.DeployBrokerCommand{Kubeconfig: servers[0].Kubeconfig, Context: "broker", Broker: broker.BrokerOptions{Globalnet: true}, Out: info}, &out); err != nil {
		t.Fatal(err)
	}
	c1, c2 = newMember(t, servers[1]), newMember(t, servers[2])
	for _, m := range []struct {
		m      *member
		podNet string
	}{{c1, "10.8.0.0/16"}, {c2, "10.9.0.0/16"}} {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: m.m.s.Name + "-node", Labels: map[string]string{broker.GatewayLabel: "true"}},
			Spec:       corev1.NodeSpec{PodCIDR: m.podNet, PodCIDRs: []string{m.podNet}},
		}
		mustDo(t, "node", func() error { _, err := m.m.kc.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); return err })
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: broker.CoreDNSConfigMap, Namespace: metav1.NamespaceSystem}, Data: map[string]string{corefileKey: kubeadmCorefile}}
		mustDo(t, "CoreDNS ConfigMap", func() error {
			_, err := m.m.kc.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, cm, metav1.CreateOptions{})
			return err
		})
		join := broker.JoinCommand{InfoFile: info, Kubeconfig: m.m.s.Kubeconfig, Context: m.m.s.Name, Join: broker.JoinOptions{ClusterID: m.m.s.Name, CableDriver: "wireguard"}}
		if err := broker.RunJoin(join, &out); err != nil {
			t.Fatalf("join %s: %v\n%s", m.m.s.Name, err, out.String())
		}
		var err error
		if m.m.agent, err = api.LoadAgentConfig(ctx, m.m.kc, api.AgentNamespace); err != nil {
			t.Fatal(err)
		}
	}
	c1.playControllers(t, c2)
	return c1, c2, servers[0]
}

func mustDo(t *testing.T, what string, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// playControllers writes what the kube-controller-manager, the kubelet,
// the agents and Calico's installer would.
func (m *member) playControllers(t *testing.T, remote *member) {
	t.Helper()
	ctx := t.Context()
	ns := api.AgentNamespace
	mustDo(t, "DaemonSet status", func() error {
		ds, err := m.kc.AppsV1().DaemonSets(ns).Get(ctx, broker.AgentDaemonSet, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 1, CurrentNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1}
		if _, err := m.kc.AppsV1().DaemonSets(ns).UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return m.startAgentPod(ctx, ds)
	})
	mustDo(t, "route agent DaemonSet status", func() error {
		return m.setRouteAgentReady(ctx, 1)
	})
	mustDo(t, "Deployment status", func() error {
		d, err := m.kc.AppsV1().Deployments(ns).Get(ctx, broker.DNSDeployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Status = appsv1.DeploymentStatus{Replicas: *d.Spec.Replicas, ReadyReplicas: *d.Spec.Replicas, AvailableReplicas: *d.Spec.Replicas}
		_, err = m.kc.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{})
		return err
	})
	m.writeGateway(t, submv1.Connection{
		Status: submv1.Connected, StatusMessage: "connected",
		Endpoint: submv1.EndpointSpec{
			ClusterID: remote.agent.ClusterID, CableName: "submariner-cable-c2", HealthCheckIP: "10.9.0.1", Hostname: "c2-node",
			Subnets: []string{remote.agent.GlobalCIDR}, PrivateIP: "192.168.0.2", Backend: "wireguard",
			BackendConfig: map[string]string{"udp-port": "4500"},
		},
		UsingIP:    "192.168.0.2",
		LatencyRTT: &submv1.LatencyRTTSpec{Last: "1.1ms", Average: "1.2ms"},
	})
	global := netip.MustParsePrefix(m.agent.GlobalCIDR)
	egress := &submv1.ClusterGlobalEgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: submv1.ClusterGlobalEgressIPName},
		Status:     submv1.GlobalEgressIPStatus{AllocatedIPs: []string{global.Addr().Next().String()}},
	}
	m.createWithStatus(t, submv1.ClusterGlobalEgressIPResource, "", mustUnstructured(t, egress, "ClusterGlobalEgressIP"))

	// An exported ClusterIP service, imported, with its global IP.
	mustDo(t, "namespace", func() error {
		_, err := m.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{})
		return err
	})
	mustDo(t, "service", func() error {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
		_, err := m.kc.CoreV1().Services("demo").Create(ctx, svc, metav1.CreateOptions{})
		return err
	})
	mustDo(t, "ServiceExport", func() error {
		_, err := m.mcs.MulticlusterV1alpha1().ServiceExports("demo").Create(ctx, &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo"}}, metav1.CreateOptions{})
		return err
	})
	m.importService(t, "web")
	ingress := &submv1.GlobalIngressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo"},
		Spec:       submv1.GlobalIngressIPSpec{Target: submv1.ClusterIPService, ServiceRef: &corev1.LocalObjectReference{Name: "web"}},
		Status:     submv1.GlobalIngressIPStatus{AllocatedIP: global.Addr().Next().Next().String()},
	}
	m.createWithStatus(t, submv1.GlobalIngressIPResource, "demo", mustUnstructured(t, ingress, "GlobalIngressIP"))

	m.setKubeProxyMode(t, "nftables")
	m.installCalico(t)
}

// setRouteAgentReady reports the route agent's one pod ready (1) or not
// (0), as the DaemonSet controller would.
func (m *member) setRouteAgentReady(ctx context.Context, ready int32) error {
	ds, err := m.kc.AppsV1().DaemonSets(api.AgentNamespace).Get(ctx, broker.RouteAgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 1, CurrentNumberScheduled: 1, NumberReady: ready, NumberAvailable: ready}
	_, err = m.kc.AppsV1().DaemonSets(api.AgentNamespace).UpdateStatus(ctx, ds, metav1.UpdateOptions{})
	return err
}

// startAgentPod makes a pod of the DaemonSet, Running, as the kubelet
// would report it.
func (m *member) startAgentPod(ctx context.Context, ds *appsv1.DaemonSet) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: broker.AgentDaemonSet + "-x1", Namespace: ds.Namespace, Labels: ds.Spec.Template.Labels},
		Spec:       corev1.PodSpec{NodeName: m.s.Name + "-node", ServiceAccountName: ds.Spec.Template.Spec.ServiceAccountName, Containers: []corev1.Container{{Name: "agent", Image: "snorkel"}}},
	}
	pod, err := m.kc.CoreV1().Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	pod.Status.Phase = corev1.PodRunning
	_, err = m.kc.CoreV1().Pods(ds.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

// writeGateway stores the active Gateway of c1-node with conn, as the
// agent keeps it.
func (m *member) writeGateway(t *testing.T, conn submv1.Connection) {
	t.Helper()
	g := &submv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: m.s.Name + "-node", Namespace: api.AgentNamespace},
		Status: submv1.GatewayStatus{
			Version: "dev", HAStatus: submv1.HAStatusActive,
			LocalEndpoint: submv1.EndpointSpec{ClusterID: m.agent.ClusterID, Hostname: m.s.Name + "-node", Backend: "wireguard", PrivateIP: "192.168.0.1", Subnets: []string{m.agent.GlobalCIDR}},
			Connections:   []submv1.Connection{conn},
		},
	}
	_ = m.dyn.Resource(submv1.GatewayResource).Namespace(api.AgentNamespace).Delete(t.Context(), g.Name, metav1.DeleteOptions{})
	m.createWithStatus(t, submv1.GatewayResource, api.AgentNamespace, mustUnstructured(t, g, "Gateway"))
}

// createWithStatus creates obj and writes its status, as a controller
// writes it through the status subresource.
func (m *member) createWithStatus(t *testing.T, r schema.GroupVersionResource, ns string, raw *unstructured.Unstructured) {
	t.Helper()
	res := m.dyn.Resource(r).Namespace(ns)
	created, err := res.Create(t.Context(), raw, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s %s: %v", r.Resource, raw.GetName(), err)
	}
	created.Object["status"] = raw.Object["status"]
	if _, err := res.UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status of %s %s: %v", r.Resource, raw.GetName(), err)
	}
}

func (m *member) importService(t *testing.T, name string) {
	t.Helper()
	si := &mcsv1a1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo"},
		Spec:       mcsv1a1.ServiceImportSpec{Type: mcsv1a1.ClusterSetIP, Ports: []mcsv1a1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	mustDo(t, "ServiceImport", func() error {
		_, err := m.mcs.MulticlusterV1alpha1().ServiceImports("demo").Create(t.Context(), si, metav1.CreateOptions{})
		return err
	})
}

func (m *member) setKubeProxyMode(t *testing.T, mode string) {
	t.Helper()
	cms := m.kc.CoreV1().ConfigMaps(metav1.NamespaceSystem)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: kubeProxyConfigMap, Namespace: metav1.NamespaceSystem},
		Data:       map[string]string{kubeProxyConfigKey: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: " + mode + "\n"},
	}
	_ = cms.Delete(t.Context(), cm.Name, metav1.DeleteOptions{})
	mustDo(t, "kube-proxy ConfigMap", func() error { _, err := cms.Create(t.Context(), cm, metav1.CreateOptions{}); return err })
}

// installCalico runs Calico's DaemonSet's object, its IPPool CRD, its own
// pool and the pools `snorkel calico ippools` writes.
func (m *member) installCalico(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "calico-node", Namespace: metav1.NamespaceSystem},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "calico-node"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "calico-node"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "calico-node", Image: "calico/node"}}},
			},
		},
	}
	mustDo(t, "calico-node", func() error {
		_, err := m.kc.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{})
		return err
	})
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "ippools.crd.projectcalico.org"},
		"spec": map[string]any{
			"group": "crd.projectcalico.org", "scope": "Cluster",
			"names": map[string]any{"kind": "IPPool", "listKind": "IPPoolList", "plural": "ippools", "singular": "ippool"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	mustDo(t, "IPPool CRD", func() error {
		_, err := m.dyn.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{})
		return err
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := m.dyn.Resource(calicoPoolResource).List(ctx, metav1.ListOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the IPPool CRD is not served: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	clusters, err := calico.ClustersFromBroker(ctx, m.agent.BrokerConfig(), m.agent.BrokerNamespace)
	if err != nil {
		t.Fatal(err)
	}
	pools, err := calico.Pools(m.agent.ClusterID, clusters)
	if err != nil {
		t.Fatal(err)
	}
	pools = append(pools, calico.IPPool{Metadata: calico.PoolMeta{Name: "default-ipv4-ippool"}, Spec: calico.IPPoolSpec{CIDR: m.agent.ClusterCIDRs[0], NATOutgoing: true}})
	for _, p := range pools {
		m.createPool(t, p)
	}
}

func (m *member) createPool(t *testing.T, p calico.IPPool) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
		"metadata": map[string]any{"name": p.Metadata.Name},
		"spec":     map[string]any{"cidr": p.Spec.CIDR, "natOutgoing": p.Spec.NATOutgoing, "disabled": p.Spec.Disabled},
	}}
	mustDo(t, "IPPool "+p.Metadata.Name, func() error {
		_, err := m.dyn.Resource(calicoPoolResource).Create(t.Context(), u, metav1.CreateOptions{})
		return err
	})
}

func mustUnstructured[T submv1.Object](t *testing.T, obj *T, kind string) *unstructured.Unstructured {
	t.Helper()
	u, err := submv1.ToUnstructured(obj, kind)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// diagnoseOf runs check on m and returns its output and error.
func diagnoseOf(t *testing.T, m *member, check Check, verbose bool) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := Run(t.Context(), check, []show.Target{m.target()}, Options{Out: &out, Verbose: verbose})
	return out.String(), err
}

func TestDiagnose(t *testing.T) {
	c1, c2, brokerServer := setUpClusterset(t)

	t.Run("a healthy joined cluster passes every check", func(t *testing.T) {
		out, err := diagnoseOf(t, c1, All, true)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if strings.Contains(out, "✗") || strings.Count(out, " ✓ Checking") != len(allOrder) {
			t.Errorf("want every check ✓:\n%s", out)
		}
		for _, want := range []string{
			"✓ Kubernetes v1.37 (",
			"✓ The agent DaemonSet submariner-operator/snorkel-agent has all 1 pods ready",
			"✓ The route agent DaemonSet submariner-operator/submariner-routeagent has all 1 pods ready",
			`✓ The detected CNI network plugin ("calico") is supported`,
			"✓ Calico has the 1 IPPools",
			`✓ Connection to cluster "c2" (c2-node, wireguard) is established`,
			`✓ The kube-proxy mode "nftables" is supported`,
			`✓ UDP port 4500 to cluster "c2" at 192.168.0.2 is open both ways`,
			"✓ The global CIDR " + c1.agent.GlobalCIDR + " is inside the broker's Globalnet range 242.0.0.0/8",
			"✓ Exported service demo/web has global IP",
			"✓ CoreDNS (kube-system/coredns) forwards clusterset.local to dnsd at 10.88.",
			"✓ ServiceExport demo/web is imported",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	for _, tc := range []struct {
		name    string
		check   Check
		breakIt func(t *testing.T) (restore func())
		want    string
	}{{
		name: "an errored connection names the remote, the gateway's message and the fix", check: Connections,
		breakIt: func(t *testing.T) func() {
			conn := submv1.Connection{Status: submv1.ConnectionError, StatusMessage: "handshake did not complete after 5 attempts",
				Endpoint: submv1.EndpointSpec{ClusterID: "c2", Hostname: "c2-node", Subnets: []string{c2.agent.GlobalCIDR}, PrivateIP: "192.168.0.2", Backend: "wireguard"}}
			c1.writeGateway(t, conn)
			return func() { c1.playGatewayBack(t, c2) }
		},
		want: `✗ Connection to cluster "c2" is not established: "handshake did not complete after 5 attempts": check that both clusters joined with the same broker-info.subm`,
	}, {
		name: "a connection without health-check replies fails the firewall check", check: Firewall,
		breakIt: func(t *testing.T) func() {
			conn := submv1.Connection{Status: submv1.Connected,
				Endpoint: submv1.EndpointSpec{ClusterID: "c2", HealthCheckIP: "10.9.0.1", Subnets: []string{c2.agent.GlobalCIDR}, PrivateIP: "192.168.0.2", Backend: "wireguard"}}
			c1.writeGateway(t, conn)
			return func() { c1.playGatewayBack(t, c2) }
		},
		want: `✗ The tunnel to cluster "c2" is up, but no health-check probe to 10.9.0.1 came back`,
	}, {
		name: "a Corefile without the clusterset section fails service discovery with the section to add", check: ServiceDiscovery,
		breakIt: func(t *testing.T) func() {
			return c1.editCorefile(t, deploy.RemoveCoreDNSStanza)
		},
		want: "✗ CoreDNS (kube-system/coredns) does not forward clusterset.local to dnsd at 10.88.",
	}, {
		name: "an export without its import fails service discovery", check: ServiceDiscovery,
		breakIt: func(t *testing.T) func() {
			mustDo(t, "delete", func() error {
				return c1.mcs.MulticlusterV1alpha1().ServiceImports("demo").Delete(t.Context(), "web", metav1.DeleteOptions{})
			})
			return func() { c1.importService(t, "web") }
		},
		want: "✗ ServiceExport demo/web has no ServiceImport",
	}, {
		name: "another cluster's overlapping global CIDR fails Globalnet naming both", check: Globalnet,
		breakIt: func(t *testing.T) func() {
			return setRemoteGlobalCIDR(t, brokerServer, c1, "c2", c1.agent.GlobalCIDR)
		},
		want: "✗ The global CIDR " + c1.agent.GlobalCIDR + ` of cluster "c1" overlaps ` + c1.agent.GlobalCIDR + ` of cluster "c2": global CIDRs must be disjoint`,
	}, {
		name: "a missing Calico IPPool fails the CNI check with the command that writes it", check: CNI,
		breakIt: func(t *testing.T) func() {
			pools, err := c1.dyn.Resource(calicoPoolResource).List(t.Context(), metav1.ListOptions{LabelSelector: ""})
			if err != nil {
				t.Fatal(err)
			}
			var gone calico.IPPool
			for _, p := range pools.Items {
				if strings.HasPrefix(p.GetName(), "submariner-") {
					cidr, _, _ := unstructured.NestedString(p.Object, "spec", "cidr")
					gone = calico.IPPool{Metadata: calico.PoolMeta{Name: p.GetName()}, Spec: calico.IPPoolSpec{CIDR: cidr, Disabled: true}}
					mustDo(t, "delete pool", func() error {
						return c1.dyn.Resource(calicoPoolResource).Delete(t.Context(), p.GetName(), metav1.DeleteOptions{})
					})
				}
			}
			return func() { c1.createPool(t, gone) }
		},
		want: `✗ No Calico IPPool for the global CIDR ` + "C2GLOBAL" + ` of cluster "c2": Calico masquerades pod traffic to it; create them with ` + "`snorkel calico ippools --cluster c1",
	}, {
		name: "an unknown kube-proxy mode fails", check: KubeProxyMode,
		breakIt: func(t *testing.T) func() {
			c1.setKubeProxyMode(t, "kernelspace")
			return func() { c1.setKubeProxyMode(t, "nftables") }
		},
		want: `✗ The kube-proxy mode "kernelspace" is not supported: use iptables or nftables`,
	}, {
		name: "a route agent pod not ready fails the deployment check", check: Deployment,
		breakIt: func(t *testing.T) func() {
			mustDo(t, "route agent not ready", func() error { return c1.setRouteAgentReady(t.Context(), 0) })
			return func() { mustDo(t, "route agent ready", func() error { return c1.setRouteAgentReady(t.Context(), 1) }) }
		},
		want: "✗ The route agent DaemonSet submariner-operator/submariner-routeagent has 0 of 1 pods ready: see `kubectl -n submariner-operator describe pods -l app=submariner-routeagent`",
	}, {
		name: "the agent DaemonSet deleted fails the deployment check, telling to join again", check: Deployment,
		breakIt: func(t *testing.T) func() {
			mustDo(t, "delete", func() error {
				return c1.kc.AppsV1().DaemonSets(api.AgentNamespace).Delete(t.Context(), broker.AgentDaemonSet, metav1.DeleteOptions{})
			})
			return func() {}
		},
		want: "✗ The agent DaemonSet submariner-operator/snorkel-agent is missing: run `snorkel join` for this cluster again",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			restore := tc.breakIt(t)
			out, err := diagnoseOf(t, c1, tc.check, false)
			t.Logf("%s", out)
			want := strings.ReplaceAll(tc.want, "C2GLOBAL", c2.agent.GlobalCIDR)
			if !errors.Is(err, ErrFailed) || !strings.Contains(out, want) {
				t.Errorf("err %v, output\n%s\nwant a line with %q", err, out, want)
			}
			restore()
			if out, err := diagnoseOf(t, c1, tc.check, false); err != nil && tc.check != Deployment {
				t.Errorf("after restoring: %v\n%s", err, out)
			}
		})
	}

	t.Run("without running gateway pods the firewall check is skipped, saying why", func(t *testing.T) {
		mustDo(t, "delete pods", func() error {
			return c1.kc.CoreV1().Pods(api.AgentNamespace).DeleteCollection(t.Context(), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
		})
		out, err := diagnoseOf(t, c1, Firewall, false)
		if err != nil || !strings.Contains(out, " ⚠ Skipped: needs running gateway pods") {
			t.Errorf("err %v, output\n%s", err, out)
		}
	})

	t.Run("a cluster without Snorkel warns on every check but the version", func(t *testing.T) {
		var out bytes.Buffer
		err := Run(t.Context(), All, []show.Target{{Context: "broker", Cluster: "broker", Config: brokerServer.Config()}}, Options{Out: &out, Header: true})
		if err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		if n := strings.Count(out.String(), `⚠ Snorkel is not installed in context "broker"`); n != len(allOrder)-1 || !strings.HasPrefix(out.String(), "Cluster \"broker\"\n ✓ Checking Snorkel support for the Kubernetes version") {
			t.Errorf("%d warnings:\n%s", n, out.String())
		}
	})
}

// playGatewayBack restores c1's connected Gateway.
func (m *member) playGatewayBack(t *testing.T, remote *member) {
	m.writeGateway(t, submv1.Connection{
		Status: submv1.Connected,
		Endpoint: submv1.EndpointSpec{ClusterID: remote.agent.ClusterID, HealthCheckIP: "10.9.0.1", Hostname: "c2-node", Subnets: []string{remote.agent.GlobalCIDR}, PrivateIP: "192.168.0.2", Backend: "wireguard",
			BackendConfig: map[string]string{"udp-port": "4500"}},
		UsingIP: "192.168.0.2", LatencyRTT: &submv1.LatencyRTTSpec{Last: "1.1ms", Average: "1.2ms"},
	})
}

// editCorefile rewrites the Corefile with edit and returns what restores
// it.
func (m *member) editCorefile(t *testing.T, edit func(string) string) func() {
	t.Helper()
	cms := m.kc.CoreV1().ConfigMaps(metav1.NamespaceSystem)
	cm, err := cms.Get(t.Context(), broker.CoreDNSConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	was := cm.Data[corefileKey]
	cm.Data[corefileKey] = edit(was)
	mustDo(t, "Corefile", func() error { _, err := cms.Update(t.Context(), cm, metav1.UpdateOptions{}); return err })
	return func() {
		m.editCorefile(t, func(string) string { return was })
	}
}

// setRemoteGlobalCIDR rewrites cluster id's Cluster on the broker with
// global CIDR cidr, and returns what restores it.
func setRemoteGlobalCIDR(t *testing.T, b *kubelocal.Server, m *member, id, cidr string) func() {
	t.Helper()
	dyn, err := dynamic.NewForConfig(b.Config())
	if err != nil {
		t.Fatal(err)
	}
	res := dyn.Resource(submv1.ClusterResource).Namespace(m.agent.BrokerNamespace)
	u, err := res.Get(t.Context(), id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	was, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "global_cidr")
	if err := unstructured.SetNestedStringSlice(u.Object, []string{cidr}, "spec", "global_cidr"); err != nil {
		t.Fatal(err)
	}
	mustDo(t, "Cluster", func() error { _, err := res.Update(t.Context(), u, metav1.UpdateOptions{}); return err })
	return func() { setRemoteGlobalCIDR(t, b, m, id, was[0]) }
}

func TestJudgeVersion(t *testing.T) {
	for _, tc := range []struct {
		name, git, major, minor string
		want                    statusline.Mark
		text                    string
	}{
		{"the tested version is supported", "v1.37.2", "1", "37", statusline.OK, "Kubernetes v1.37 (v1.37.2) is supported (v1.29 to v1.37)"},
		{"the oldest supported version is supported", "v1.29.0", "1", "29", statusline.OK, "is supported"},
		{"a managed cluster's minor with a plus is read", "v1.30.4-eks", "1", "30+", statusline.OK, "is supported"},
		{"an older version fails naming the upgrade", "v1.28.9", "1", "28", statusline.Fail, "is older than Snorkel supports (v1.29 to v1.37): upgrade the cluster to v1.29 or newer"},
		{"a newer version warns", "v1.38.0", "1", "38", statusline.Warn, "is newer than Snorkel is tested on"},
		{"an unreadable version fails", "v2.0.0", "2", "0", statusline.Fail, "Cannot tell Kubernetes version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResult(false)
			judgeVersion(r, tc.git, tc.major, tc.minor)
			if len(r.Notes()) != 1 || r.Notes()[0].Mark != tc.want || !strings.Contains(r.Notes()[0].Text, tc.text) {
				t.Errorf("%+v, want %s %q", r.Notes(), tc.want, tc.text)
			}
		})
	}
}

func TestDetectCNI(t *testing.T) {
	ds := func(names ...string) []appsv1.DaemonSet {
		var out []appsv1.DaemonSet
		for _, n := range names {
			out = append(out, appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		dss  []appsv1.DaemonSet
		want string
	}{
		{"kind's kindnet", ds("kube-proxy", "kindnet"), cniKindnet},
		{"calico", ds("calico-node", "kube-proxy"), cniCalico},
		{"canal runs calico's and flannel's containers but is canal", ds("canal", "kube-proxy"), cniCanal},
		{"flannel", ds("kube-flannel-ds"), cniFlannel},
		{"cilium", ds("cilium", "cilium-envoy"), cniCilium},
		{"OVN-Kubernetes", ds("ovnkube-node"), cniOVNKubernetes},
		{"nothing known is generic", ds("kube-proxy"), cniGeneric},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := detectCNI(tc.dss); got != tc.want {
				t.Errorf("%q, want %q", got, tc.want)
			}
		})
	}
}
