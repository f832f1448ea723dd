package broker

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/deploy"
	"github.com/snorkel-net/snorkel/transport"
)

// clusterset is a broker and three members, shared by the subtests of
// TestClusterset, which run in order: each builds on the state the earlier
// ones left.
type clusterset struct {
	broker, c1, c2, c3 *kubelocal.Server
	infoPath           string
	info               *Info
	// joined holds each member's api.AgentConfig as Join returned it.
	joined map[string]*api.AgentConfig
}

func TestClusterset(t *testing.T) {
	servers := kubetest.Start(t,
		kubelocal.Options{Name: "broker"},
		kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"},
		kubelocal.Options{Name: "c2", ServiceCIDR: "10.99.0.0/16"},
		kubelocal.Options{Name: "c3", ServiceCIDR: "10.77.0.0/16"})
	cs := &clusterset{
		broker: servers[0], c1: servers[1], c2: servers[2], c3: servers[3],
		infoPath: filepath.Join(t.TempDir(), InfoFileName),
		joined:   map[string]*api.AgentConfig{},
	}
	steps := []struct {
		name string
		run  func(*testing.T, *clusterset)
	}{
		{"deploy-broker twice keeps the same objects", testDeployBrokerTwice},
		{"the broker token reaches the broker namespace only", testBrokerTokenScope},
		{"join refuses bad flags naming them", testJoinRefusesBadFlags},
		{"c1 (through the CLI), c2 and c3 join in parallel", testJoinParallel},
		{"members hold the agent configuration and RBAC", testAgentInstalled},
		{"the agent ServiceAccount has least privilege", testAgentRBAC},
		{"join ran the agent, dnsd and the CoreDNS forward in c1", testMemberDeployed},
		{"dnsd's ServiceAccount has least privilege", testDNSRBAC},
		{"every manifest and installed object passes a server-side dry run", testDryRun},
		{"join refuses taken IDs and global CIDRs", testJoinRefusesConflicts},
		{"joining again changes nothing", testRejoin},
		{"concurrent Globalnet allocations never overlap", testConcurrentAllocation},
		{"leave removes the cluster and frees its global CIDR", testLeave},
		{"deploy-broker keeps Globalnet settings clusters depend on", testRedeployRefusesGlobalnetChange},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, cs) }) {
			t.Fatalf("%q failed; the later steps depend on it", s.name)
		}
	}
}

func client(t *testing.T, cfg *rest.Config) (kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc, dc
}

func deployCLI(c DeployBrokerCommand) (string, error) {
	var out bytes.Buffer
	err := RunDeployBroker(c, &out)
	return out.String(), err
}

func joinCLI(c JoinCommand) (string, error) {
	var out bytes.Buffer
	err := RunJoin(c, &out)
	return out.String(), err
}

// brokerState is what deploy-broker made, to compare two runs.
type brokerState struct {
	nsUID, saUID, roleUID, bindingUID string
	roleRules                         string
	globalnet                         map[string]string
	psk                               []byte
}

func readBrokerState(t *testing.T, kc kubernetes.Interface) brokerState {
	t.Helper()
	ctx := t.Context()
	ns, err := kc.CoreV1().Namespaces().Get(ctx, api.DefaultBrokerNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := kc.CoreV1().ServiceAccounts(api.DefaultBrokerNamespace).Get(ctx, BrokerClientServiceAccount, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role, err := kc.RbacV1().Roles(api.DefaultBrokerNamespace).Get(ctx, BrokerClientServiceAccount, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := kc.RbacV1().RoleBindings(api.DefaultBrokerNamespace).Get(ctx, BrokerClientServiceAccount, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := kc.CoreV1().ConfigMaps(api.DefaultBrokerNamespace).Get(ctx, api.GlobalnetConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	psk, err := kc.CoreV1().Secrets(api.DefaultBrokerNamespace).Get(ctx, PSKSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return brokerState{
		nsUID: string(ns.UID), saUID: string(sa.UID), roleUID: string(role.UID), bindingUID: string(rb.UID),
		roleRules: fmt.Sprint(role.Rules), globalnet: cm.Data, psk: psk.Data[pskKey],
	}
}

func testDeployBrokerTwice(t *testing.T, cs *clusterset) {
	args := DeployBrokerCommand{Kubeconfig: cs.broker.Kubeconfig, Context: cs.broker.Name, Broker: BrokerOptions{Globalnet: true}, Out: cs.infoPath}
	out, err := deployCLI(args)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Globalnet on: 242.0.0.0/8, a /16 per cluster") || !strings.Contains(out, "valid until") {
		t.Errorf("output %q does not tell the Globalnet settings and the token's expiry", out)
	}
	kc, _ := client(t, cs.broker.Config())
	first := readBrokerState(t, kc)
	info1, err := ReadInfoFile(cs.infoPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deployCLI(args); err != nil {
		t.Fatalf("second run: %v", err)
	}
	second := readBrokerState(t, kc)
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Errorf("the second run changed the broker:\n%+v\n%+v", first, second)
	}
	info2, err := ReadInfoFile(cs.infoPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(info1.IPSecPSK.Data[pskKey], info2.IPSecPSK.Data[pskKey]) || len(info2.IPSecPSK.Data[pskKey]) != PSKLength {
		t.Errorf("PSK %d bytes, changed %v: want the same %d-byte key", len(info2.IPSecPSK.Data[pskKey]), !bytes.Equal(info1.IPSecPSK.Data[pskKey], info2.IPSecPSK.Data[pskKey]), PSKLength)
	}
	nss, err := kc.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ns := range nss.Items {
		if strings.HasPrefix(ns.Name, "submariner") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d submariner namespaces on the broker, want 1", n)
	}
	crbs, err := kc.RbacV1().ClusterRoleBindings().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range crbs.Items {
		for _, s := range b.Subjects {
			if s.Name == BrokerClientServiceAccount {
				t.Errorf("ClusterRoleBinding %s grants the broker client cluster-wide rights", b.Name)
			}
		}
	}
	want := map[string]string{api.GlobalnetEnabledKey: "true", api.GlobalnetCIDRRangeKey: `"242.0.0.0/8"`, api.GlobalnetClusterSizeKey: "65536"}
	for k, v := range want {
		if second.globalnet[k] != v {
			t.Errorf("Globalnet ConfigMap %s = %q, want %q", k, second.globalnet[k], v)
		}
	}
	if info2.BrokerURL != cs.broker.URL || info2.Namespace() != api.DefaultBrokerNamespace || !bytes.Equal(info2.CA(), cs.broker.CA) ||
		!slices.Equal(info2.Components, []string{"connectivity", "globalnet", "service-discovery"}) {
		t.Errorf("broker info: url %q ns %q components %v", info2.BrokerURL, info2.Namespace(), info2.Components)
	}

	d, err := Deploy(t.Context(), cs.broker.Config(), BrokerOptions{Globalnet: true})
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(d.TokenExpires); left < DefaultTokenExpiry-time.Hour || left > DefaultTokenExpiry+time.Hour {
		t.Errorf("the token expires in %v, want a year", left)
	}
	cs.info = info2
}

func wantForbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: %v, want 403 Forbidden", what, err)
	}
}

func wantAllowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want it allowed", what, err)
	}
}

func testBrokerTokenScope(t *testing.T, cs *clusterset) {
	ctx := t.Context()
	ns := api.DefaultBrokerNamespace
	kc, dc := client(t, cs.info.RESTConfig())
	for _, gvr := range []schema.GroupVersionResource{submv1.ClusterResource, submv1.EndpointResource, serviceImportResource, endpointSliceResource} {
		_, err := dc.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		wantAllowed(t, "list "+gvr.Resource, err)
	}
	probe, _ := submv1.ToUnstructured(&submv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec:       submv1.ClusterSpec{ClusterID: "probe", ClusterCIDR: []string{"10.0.0.0/16"}, ServiceCIDR: []string{"10.1.0.0/16"}},
	}, "Cluster")
	_, err := dc.Resource(submv1.ClusterResource).Namespace(ns).Create(ctx, probe, metav1.CreateOptions{})
	wantAllowed(t, "create a Cluster", err)
	wantAllowed(t, "delete a Cluster", dc.Resource(submv1.ClusterResource).Namespace(ns).Delete(ctx, "probe", metav1.DeleteOptions{}))
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, AddressType: discoveryv1.AddressTypeIPv4}
	_, err = kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{})
	wantAllowed(t, "create an EndpointSlice", err)
	wantAllowed(t, "delete an EndpointSlice", kc.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "probe", metav1.DeleteOptions{}))
	_, err = kc.CoreV1().ConfigMaps(ns).Get(ctx, api.GlobalnetConfigMapName, metav1.GetOptions{})
	wantAllowed(t, "get the Globalnet ConfigMap", err)

	_, err = kc.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	wantForbidden(t, "list secrets in kube-system", err)
	_, err = kc.CoreV1().Secrets(ns).Get(ctx, PSKSecretName, metav1.GetOptions{})
	wantForbidden(t, "get the broker's PSK Secret", err)
	_, err = dc.Resource(submv1.ClusterResource).Namespace(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	wantForbidden(t, "list clusters in another namespace", err)
	_, err = kc.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	wantForbidden(t, "list namespaces", err)
	_, err = kc.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	wantForbidden(t, "list configmaps", err)
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "probes.example.com"},
	}}
	_, err = dc.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		Create(ctx, crd, metav1.CreateOptions{})
	wantForbidden(t, "create a CRD", err)
}

func testJoinRefusesBadFlags(t *testing.T, cs *clusterset) {
	for _, tc := range []struct {
		name    string
		join    JoinOptions
		context string
		want    []string
	}{
		{"underscore and capitals", JoinOptions{ClusterID: "Bad_ID"}, "", []string{"--clusterid", "DNS-1123", `e.g. "bad-id"`}},
		{"leading dash", JoinOptions{ClusterID: "-x"}, "", []string{"--clusterid", `e.g. "x"`}},
		{"64 characters", JoinOptions{ClusterID: strings.Repeat("c", 64)}, "", []string{"--clusterid", "at most 63"}},
		{"no ID", JoinOptions{}, "", []string{"--clusterid is required"}},
		{"unknown cable driver", JoinOptions{ClusterID: "c3", CableDriver: "ipsec"}, "", []string{"--cable-driver", "wireguard, esp, vxlan"}},
		{"host bits in the Pod CIDR", JoinOptions{ClusterID: "c3", ClusterCIDRs: []string{"10.7.0.1/16"}}, "", []string{"--clustercidr", "10.7.0.0/16"}},
		{"a Service CIDR that is none", JoinOptions{ClusterID: "c3", ServiceCIDRs: []string{"services"}}, "", []string{"--servicecidr"}},
		{"a global CIDR that is none", JoinOptions{ClusterID: "c3", GlobalCIDR: "global"}, "", []string{"--globalnet-cidr"}},
		{"no Pod CIDR known", JoinOptions{ClusterID: "c3"}, "", []string{"--clustercidr", "no nodes"}},
		{"unknown context", JoinOptions{ClusterID: "c3"}, "nowhere", []string{"--context nowhere", "nowhere"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := JoinCommand{InfoFile: cs.infoPath, Kubeconfig: cs.c3.Kubeconfig, Context: cs.c3.Name, Join: tc.join}
			if tc.context != "" {
				c.Context = tc.context
			}
			_, err := joinCLI(c)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
	_, dc := client(t, cs.broker.Config())
	list, err := dc.Resource(submv1.ClusterResource).Namespace(api.DefaultBrokerNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("refused joins left %d Clusters on the broker (%v)", len(list.Items), err)
	}
}

func clusterOnBroker(t *testing.T, cs *clusterset, id string) *submv1.Cluster {
	t.Helper()
	_, dc := client(t, cs.broker.Config())
	u, err := dc.Resource(submv1.ClusterResource).Namespace(api.DefaultBrokerNamespace).Get(t.Context(), id, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Cluster %s on the broker: %v", id, err)
	}
	c, err := submv1.FromUnstructured[submv1.Cluster](u)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func kubeSystemUID(t *testing.T, s *kubelocal.Server) string {
	t.Helper()
	kc, _ := client(t, s.Config())
	ns, err := kc.CoreV1().Namespaces().Get(t.Context(), metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(ns.UID)
}

// testJoinParallel joins c1 through the CLI while c2 and c3 join through
// the library, all at once: the three race for the Globalnet ConfigMap.
func testJoinParallel(t *testing.T, cs *clusterset) {
	ctx := t.Context()
	// c1 tells its Pod CIDR through its one node.
	kc1, _ := client(t, cs.c1.Config())
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "c1-node", Labels: map[string]string{GatewayLabel: "true"}},
		Spec:       corev1.NodeSpec{PodCIDR: "10.8.0.0/16", PodCIDRs: []string{"10.8.0.0/16"}},
	}
	if _, err := kc1.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// c1 runs CoreDNS as kubeadm sets it up; join adds the forward.
	coredns := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: CoreDNSConfigMap, Namespace: metav1.NamespaceSystem},
		Data:       map[string]string{corefileKey: kubeadmCorefile},
	}
	if _, err := kc1.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, coredns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// c2 tells its Pod CIDR through its kube-controller-manager's flags.
	kc2, _ := client(t, cs.c2.Config())
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: metav1.NamespaceSystem}}
	if _, err := kc2.CoreV1().ServiceAccounts(metav1.NamespaceSystem).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kcm := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-c2", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"component": "kube-controller-manager"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "kube-controller-manager", Image: "registry.k8s.io/kube-controller-manager:v1.37.2",
			Command: []string{"kube-controller-manager", "--allocate-node-cidrs=true", "--cluster-cidr=10.9.0.0/16", "--service-cluster-ip-range=10.99.0.0/16"},
		}}},
	}
	if _, err := kc2.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, kcm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]error{}
	var cliOut string
	wg.Go(func() {
		out, err := joinCLI(c1Join(cs))
		mu.Lock()
		defer mu.Unlock()
		cliOut, errs["c1"] = out, err
	})
	for _, m := range []struct {
		s    *kubelocal.Server
		opts JoinOptions
	}{
		{cs.c2, JoinOptions{ClusterID: "c2"}},
		{cs.c3, JoinOptions{ClusterID: "c3", CableDriver: "vxlan", ClusterCIDRs: []string{"10.7.0.0/16"}}},
	} {
		wg.Go(func() {
			ac, err := Join(ctx, m.s.Config(), cs.info, m.opts)
			mu.Lock()
			defer mu.Unlock()
			errs[m.opts.ClusterID] = err
			cs.joined[m.opts.ClusterID] = ac
		})
	}
	wg.Wait()
	for id, err := range errs {
		if err != nil {
			t.Fatalf("join %s: %v", id, err)
		}
	}
	ac, err := api.LoadAgentConfig(ctx, kc1, api.AgentNamespace)
	if err != nil {
		t.Fatal(err)
	}
	cs.joined["c1"] = ac
	if ac.CableDriver != transport.WireGuard {
		t.Errorf("c1's cable driver %q, want wireguard", ac.CableDriver)
	}
	if want := "cluster c1 joined the broker at " + cs.broker.URL; !strings.Contains(cliOut, want) || !strings.Contains(cliOut, "global CIDR "+ac.GlobalCIDR) {
		t.Errorf("CLI output %q, want %q and the global CIDR", cliOut, want)
	}
	for _, want := range []string{"deployed " + c1Image + ": DaemonSet submariner-operator/snorkel-agent", "CoreDNS (kube-system/coredns) now forwards clusterset.local to 10.88.", "gateway nodes: c1-node"} {
		if !strings.Contains(cliOut, want) {
			t.Errorf("CLI output %q lacks %q", cliOut, want)
		}
	}
	for _, want := range []struct {
		id, pods, services string
	}{
		{"c1", "10.8.0.0/16", "10.88.0.0/16"},
		{"c2", "10.9.0.0/16", "10.99.0.0/16"},
		{"c3", "10.7.0.0/16", "10.77.0.0/16"},
	} {
		c := clusterOnBroker(t, cs, want.id)
		if c.Spec.ClusterID != want.id || !slices.Equal(c.Spec.ClusterCIDR, []string{want.pods}) || !slices.Equal(c.Spec.ServiceCIDR, []string{want.services}) ||
			!slices.Equal(c.Spec.GlobalCIDR, []string{cs.joined[want.id].GlobalCIDR}) {
			t.Errorf("Cluster %s spec %+v, want pods %s services %s global %s", want.id, c.Spec, want.pods, want.services, cs.joined[want.id].GlobalCIDR)
		}
	}
	if c := clusterOnBroker(t, cs, "c1"); c.Annotations[api.ClusterUIDAnnotation] != kubeSystemUID(t, cs.c1) || c.Labels[api.ClusterIDLabel] != "c1" {
		t.Errorf("Cluster c1 annotations %v labels %v, want c1's kube-system UID and ID", c.Annotations, c.Labels)
	}
	got := []string{cs.joined["c1"].GlobalCIDR, cs.joined["c2"].GlobalCIDR, cs.joined["c3"].GlobalCIDR}
	slices.Sort(got)
	if !slices.Equal(got, []string{"242.0.0.0/16", "242.1.0.0/16", "242.2.0.0/16"}) {
		t.Errorf("global CIDRs %v, want the first three /16s of 242.0.0.0/8", got)
	}
	_, dc := client(t, cs.broker.Config())
	list, err := dc.Resource(submv1.ClusterResource).Namespace(api.DefaultBrokerNamespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 3 {
		t.Errorf("%d Clusters on the broker (%v), want 3", len(list.Items), err)
	}
}

func testAgentInstalled(t *testing.T, cs *clusterset) {
	for _, m := range []*kubelocal.Server{cs.c1, cs.c2, cs.c3} {
		kc, _ := client(t, m.Config())
		ctx := t.Context()
		if _, err := kc.CoreV1().ServiceAccounts(api.AgentNamespace).Get(ctx, api.AgentServiceAccount, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
		if _, err := kc.RbacV1().ClusterRoleBindings().Get(ctx, api.AgentServiceAccount, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
		if _, err := kc.RbacV1().RoleBindings(api.AgentNamespace).Get(ctx, api.AgentServiceAccount, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
		ac, err := api.LoadAgentConfig(ctx, kc, api.AgentNamespace)
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if fmt.Sprintf("%+v", ac) != fmt.Sprintf("%+v", cs.joined[m.Name]) {
			t.Errorf("%s: loaded\n%+v\nwant what Join returned\n%+v", m.Name, ac, cs.joined[m.Name])
		}
		if ac.PSK != cs.info.PSK() || ac.BrokerNamespace != api.DefaultBrokerNamespace || !ac.ServiceDiscovery || ac.GlobalCIDR == "" {
			t.Errorf("%s: %+v", m.Name, ac)
		}
		_, bdc := client(t, ac.BrokerConfig())
		list, err := bdc.Resource(submv1.ClusterResource).Namespace(ac.BrokerNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 3 {
			t.Errorf("%s: BrokerConfig lists %d Clusters (%v), want 3", m.Name, len(list.Items), err)
		}
	}
	if d := cs.joined["c2"].CableDriver; d != api.DefaultCableDriver {
		t.Errorf("c2 without --cable-driver has %q, want %q", d, api.DefaultCableDriver)
	}
}

func testAgentRBAC(t *testing.T, cs *clusterset) {
	ctx := t.Context()
	admin, _ := client(t, cs.c1.Config())
	secs := int64(600)
	tr, err := admin.CoreV1().ServiceAccounts(api.AgentNamespace).CreateToken(ctx, api.AgentServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agentCfg := rest.CopyConfig(cs.c1.Config())
	agentCfg.BearerToken = tr.Status.Token
	agentCfg.BearerTokenFile = ""
	agent, _ := client(t, agentCfg)

	_, err = agent.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	wantAllowed(t, "list services", err)
	_, err = agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	wantAllowed(t, "list nodes", err)
	_, err = api.LoadAgentConfig(ctx, agent, api.AgentNamespace)
	wantAllowed(t, "read its own Secret", err)

	mcsAdmin, err := mcsclient.NewForConfig(cs.c1.Config())
	if err != nil {
		t.Fatal(err)
	}
	se, err := mcsAdmin.MulticlusterV1alpha1().ServiceExports(metav1.NamespaceDefault).Create(ctx,
		&mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mcsAgent, err := mcsclient.NewForConfig(agentCfg)
	if err != nil {
		t.Fatal(err)
	}
	se.Status.Conditions = []metav1.Condition{{Type: "Valid", Status: metav1.ConditionTrue, Reason: "Exported", Message: "ok", LastTransitionTime: metav1.Now()}}
	_, err = mcsAgent.MulticlusterV1alpha1().ServiceExports(metav1.NamespaceDefault).UpdateStatus(ctx, se, metav1.UpdateOptions{})
	wantAllowed(t, "update serviceexports/status", err)
	_, err = mcsAgent.MulticlusterV1alpha1().ServiceExports(metav1.NamespaceDefault).Update(ctx, se, metav1.UpdateOptions{})
	wantForbidden(t, "update a ServiceExport itself", err)

	_, err = agent.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	wantForbidden(t, "list secrets in kube-system", err)
	_, err = agent.CoreV1().Secrets(metav1.NamespaceDefault).Get(ctx, "anything", metav1.GetOptions{})
	wantForbidden(t, "get a secret in default", err)
	_, err = agent.CoreV1().Secrets(api.AgentNamespace).Get(ctx, "another", metav1.GetOptions{})
	wantForbidden(t, "get another secret in its namespace", err)
	_, err = agent.CoreV1().ConfigMaps(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	wantForbidden(t, "list configmaps", err)
	err = agent.CoreV1().Nodes().Delete(ctx, "c1-node", metav1.DeleteOptions{})
	wantForbidden(t, "delete a node", err)
}

func testJoinRefusesConflicts(t *testing.T, cs *clusterset) {
	ctx := t.Context()
	before := clusterOnBroker(t, cs, "c1")
	_, err := Join(ctx, cs.c2.Config(), cs.info, JoinOptions{ClusterID: "c1"})
	if err == nil || !strings.Contains(err.Error(), "--clusterid") || !strings.Contains(err.Error(), "taken by another cluster") {
		t.Errorf("c2 joining as c1: %v, want the ID refused", err)
	}
	if after := clusterOnBroker(t, cs, "c1"); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the refused join changed Cluster c1")
	}
	c1Global := cs.joined["c1"].GlobalCIDR
	for _, tc := range []struct {
		cidr string
		want string
	}{
		{c1Global, `overlaps ` + c1Global + ` of cluster "c1"`},
		{"10.200.0.0/16", "outside the broker's Globalnet range 242.0.0.0/8"},
		{"242.9.0.1/24", "not a network address; did you mean 242.9.0.0/24?"},
	} {
		_, err := Join(ctx, cs.c3.Config(), cs.info, JoinOptions{ClusterID: "c4", ClusterCIDRs: []string{"10.7.0.0/16"}, GlobalCIDR: tc.cidr})
		if err == nil || !strings.Contains(err.Error(), "--globalnet-cidr") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--globalnet-cidr %s: %v, want %q", tc.cidr, err, tc.want)
		}
	}
	_, err = Join(ctx, cs.c1.Config(), cs.info, JoinOptions{ClusterID: "c1", GlobalCIDR: "242.9.0.0/16"})
	if err == nil || !strings.Contains(err.Error(), "already holds global CIDR "+c1Global) {
		t.Errorf("c1 asking for another global CIDR: %v", err)
	}
	_, dc := client(t, cs.broker.Config())
	if _, err := dc.Resource(submv1.ClusterResource).Namespace(api.DefaultBrokerNamespace).Get(ctx, "c4", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("refused joins left Cluster c4: %v", err)
	}
}

func globalnetClusters(t *testing.T, cs *clusterset) *globalnetInfo {
	t.Helper()
	kc, _ := client(t, cs.broker.Config())
	g, _, err := readGlobalnet(t.Context(), kc, api.DefaultBrokerNamespace)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// c1Image is the image c1 joins with.
const c1Image = "registry.example/snorkel:test"

func c1Join(cs *clusterset) JoinCommand {
	return JoinCommand{
		InfoFile: cs.infoPath, Kubeconfig: cs.c1.Kubeconfig, Context: "c1",
		Join: JoinOptions{ClusterID: "c1", CableDriver: "wireguard"}, Member: MemberOptions{Image: c1Image},
	}
}

// kubeadmCorefile is the Corefile kubeadm (and so kind) installs.
const kubeadmCorefile = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
`

// memberState is the resource versions of what join installs in a member.
func memberState(t *testing.T, s *kubelocal.Server) map[string]string {
	t.Helper()
	kc, _ := client(t, s.Config())
	ctx := t.Context()
	out := map[string]string{}
	get := func(what string, obj metav1.Object, err error) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		out[what] = obj.GetResourceVersion()
	}
	ds, err := kc.AppsV1().DaemonSets(api.AgentNamespace).Get(ctx, AgentDaemonSet, metav1.GetOptions{})
	get("DaemonSet", ds, err)
	d, err := kc.AppsV1().Deployments(api.AgentNamespace).Get(ctx, DNSDeployment, metav1.GetOptions{})
	get("Deployment", d, err)
	svc, err := kc.CoreV1().Services(api.AgentNamespace).Get(ctx, DNSService, metav1.GetOptions{})
	get("Service", svc, err)
	cm, err := kc.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, CoreDNSConfigMap, metav1.GetOptions{})
	get("CoreDNS ConfigMap", cm, err)
	sec, err := kc.CoreV1().Secrets(api.AgentNamespace).Get(ctx, api.AgentSecretName, metav1.GetOptions{})
	get("Secret", sec, err)
	cr, err := kc.RbacV1().ClusterRoles().Get(ctx, DNSServiceAccount, metav1.GetOptions{})
	get("dnsd ClusterRole", cr, err)
	ns, err := kc.CoreV1().Namespaces().Get(ctx, api.AgentNamespace, metav1.GetOptions{})
	get("Namespace", ns, err)
	return out
}

func testMemberDeployed(t *testing.T, cs *clusterset) {
	ctx := t.Context()
	kc, _ := client(t, cs.c1.Config())
	ds, err := kc.AppsV1().DaemonSets(api.AgentNamespace).Get(ctx, AgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := ds.Spec.Template.Spec
	if pod.Containers[0].Image != c1Image || pod.NodeSelector[GatewayLabel] != "true" || !pod.HostNetwork || pod.ServiceAccountName != api.AgentServiceAccount {
		t.Errorf("DaemonSet runs %s on %v (host network %v) as %s", pod.Containers[0].Image, pod.NodeSelector, pod.HostNetwork, pod.ServiceAccountName)
	}
	d, err := kc.AppsV1().Deployments(api.AgentNamespace).Get(ctx, DNSDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].Image != c1Image || d.Spec.Template.Spec.ServiceAccountName != DNSServiceAccount {
		t.Errorf("dnsd Deployment: %d replicas of %s as %s", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image, d.Spec.Template.Spec.ServiceAccountName)
	}
	// dnsd's flags come from the agent Secret's keys through the kubelet.
	sec, err := kc.CoreV1().Secrets(api.AgentNamespace).Get(ctx, api.AgentSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refs := 0
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
			refs++
			if r.SecretKeyRef.Name != api.AgentSecretName {
				t.Errorf("dnsd's %s comes from Secret %s", e.Name, r.SecretKeyRef.Name)
			} else if _, ok := sec.Data[r.SecretKeyRef.Key]; !ok {
				t.Errorf("dnsd's %s comes from key %q, which the agent Secret lacks", e.Name, r.SecretKeyRef.Key)
			}
		}
	}
	if refs != 3 || string(sec.Data[api.AgentGlobalnetKey]) != "true" || string(sec.Data[api.AgentClusterIDKey]) != "c1" || string(sec.Data[api.AgentDNSZonesKey]) != "clusterset.local" {
		t.Errorf("%d keys from the Secret; globalnet %q, cluster ID %q, zones %q", refs, sec.Data[api.AgentGlobalnetKey], sec.Data[api.AgentClusterIDKey], sec.Data[api.AgentDNSZonesKey])
	}
	svc, err := kc.CoreV1().Services(api.AgentNamespace).Get(ctx, DNSService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil || !netip.MustParsePrefix("10.88.0.0/16").Contains(ip) {
		t.Errorf("dnsd's ClusterIP %q, want one of c1's service CIDR", svc.Spec.ClusterIP)
	}
	cm, err := kc.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, CoreDNSConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "#lighthouse-start AUTO-GENERATED SECTION. DO NOT EDIT\nclusterset.local:53 {\n    forward . " + svc.Spec.ClusterIP + "\n}\n#lighthouse-end\n" + kubeadmCorefile
	if cm.Data[corefileKey] != want {
		t.Errorf("Corefile\n%s\nwant\n%s", cm.Data[corefileKey], want)
	}

	kc2, _ := client(t, cs.c2.Config())
	if _, err := kc2.AppsV1().DaemonSets(api.AgentNamespace).Get(ctx, AgentDaemonSet, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("c2, joined without DeployMember, has the agent DaemonSet (%v)", err)
	}

	// c3 has neither CoreDNS nor a gateway node: DeployMember tells what
	// is left to do.
	d3, err := DeployMember(ctx, cs.c3.Config(), MemberOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printMemberDeployment(&out, d3)
	if d3.CoreDNS != CoreDNSNotFound || d3.Image != deploy.DefaultImage || len(d3.GatewayNodes) != 0 ||
		!strings.Contains(d3.Stanza, "clusterset.local:53 {\n    forward . "+d3.DNSAddress+"\n}") {
		t.Errorf("c3: %+v", d3)
	}
	for _, w := range []string{"no ConfigMap kube-system/coredns", "forward . " + d3.DNSAddress, "no gateway node yet: label one with `kubectl label node NODE submariner.io/gateway=true`"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("c3's output %q lacks %q", out.String(), w)
		}
	}

	// The broker cluster never joined: there is nothing to run.
	if _, err := DeployMember(ctx, cs.broker.Config(), MemberOptions{}); err == nil || !strings.Contains(err.Error(), "run `snorkel join`") {
		t.Errorf("deploying into a cluster that never joined: %v", err)
	}
	kcb, _ := client(t, cs.broker.Config())
	if _, err := kcb.AppsV1().DaemonSets(api.AgentNamespace).Get(ctx, AgentDaemonSet, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused deploy left a DaemonSet on the broker (%v)", err)
	}
}

// serviceAccountConfig is cfg with a token of ServiceAccount ns/name.
func serviceAccountConfig(t *testing.T, cfg *rest.Config, ns, name string) *rest.Config {
	t.Helper()
	admin, _ := client(t, cfg)
	secs := int64(600)
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := rest.CopyConfig(cfg)
	out.BearerToken, out.BearerTokenFile = tr.Status.Token, ""
	return out
}

func testDNSRBAC(t *testing.T, cs *clusterset) {
	ctx := t.Context()
	cfg := serviceAccountConfig(t, cs.c1.Config(), api.AgentNamespace, DNSServiceAccount)
	kc, dc := client(t, cfg)
	mcs, err := mcsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = mcs.MulticlusterV1alpha1().ServiceImports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	wantAllowed(t, "list serviceimports", err)
	_, err = kc.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	wantAllowed(t, "list endpointslices", err)
	_, err = dc.Resource(submv1.GatewayResource).Namespace(api.AgentNamespace).List(ctx, metav1.ListOptions{})
	wantAllowed(t, "list the gateways", err)

	_, err = kc.CoreV1().Secrets(api.AgentNamespace).Get(ctx, api.AgentSecretName, metav1.GetOptions{})
	wantForbidden(t, "get the agent Secret", err)
	_, err = dc.Resource(submv1.GatewayResource).Namespace(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	wantForbidden(t, "list gateways in another namespace", err)
	_, err = kc.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	wantForbidden(t, "list services", err)
	si := &mcsv1a1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: mcsv1a1.ServiceImportSpec{Type: mcsv1a1.Headless}}
	_, err = mcs.MulticlusterV1alpha1().ServiceImports(metav1.NamespaceDefault).Create(ctx, si, metav1.CreateOptions{})
	wantForbidden(t, "create a serviceimport", err)
	err = kc.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Delete(ctx, "x", metav1.DeleteOptions{})
	wantForbidden(t, "delete an endpointslice", err)
}

// readKindManifest reads a manifest of the Kind lab as lab.sh fills it in.
func readKindManifest(t *testing.T, name, cluster string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kind", name))
	if err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.NewReplacer("@CLUSTER@", cluster, "@IMAGE@", c1Image, "@CLIENT_IMAGE@", "nicolaka/netshoot:v0.13").Replace(string(b)))
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(b), "\n---\n") {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, u)
	}
	return out
}

func testDryRun(t *testing.T, cs *clusterset) {
	ctx := t.Context()
	dryRun := func(s *kubelocal.Server, what string, objs []*unstructured.Unstructured) {
		t.Helper()
		if len(objs) == 0 {
			t.Errorf("%s: no objects", what)
		}
		if err := deploy.Apply(ctx, s.Config(), objs, true); err != nil {
			t.Errorf("%s on %s: %v", what, s.Name, err)
		}
	}
	manifests := func(base string, o deploy.ManifestOptions) []*unstructured.Unstructured {
		t.Helper()
		objs, err := deploy.Manifests(base, o)
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	access := func(objs []any) []*unstructured.Unstructured {
		t.Helper()
		out, err := unstructuredObjects(objs)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	dryRun(cs.broker, "the broker base", manifests("broker", deploy.ManifestOptions{}))
	dryRun(cs.broker, "deploy-broker's access objects", access(brokerAccessObjects(api.DefaultBrokerNamespace)))
	for _, base := range []string{"agent", "dnsd", MemberManifests} {
		dryRun(cs.c1, "the "+base+" base", manifests(base, deploy.ManifestOptions{}))
	}
	dryRun(cs.c1, "the member base with --image", manifests(MemberManifests, deploy.ManifestOptions{Image: "localhost:5000/snorkel:dev"}))
	dryRun(cs.c1, "join's access objects", access(memberAccessObjects()))
	workloads, err := memberWorkloads(deploy.DefaultImage)
	if err != nil {
		t.Fatal(err)
	}
	dryRun(cs.c2, "DeployMember's workloads", workloads)
	kc1, _ := client(t, cs.c1.Config())
	secret := agentSecret(cs.joined["c1"])
	if _, err := kc1.CoreV1().Secrets(api.AgentNamespace).Apply(ctx, secret, metav1.ApplyOptions{FieldManager: deploy.FieldManager, Force: true, DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the agent Secret: %v", err)
	}
	// The Kind lab's workloads: their namespace for real (and its default
	// ServiceAccount, which no controller makes here), the rest dry.
	kc2, _ := client(t, cs.c2.Config())
	sa := corev1apply.ServiceAccount("default", "sample")
	for _, name := range []string{"whereami.yaml", "client.yaml"} {
		objs := readKindManifest(t, name, "c2")
		if objs[0].GetKind() != "Namespace" {
			t.Fatalf("%s does not start with its namespace", name)
		}
		if err := deploy.Apply(ctx, cs.c2.Config(), objs[:1], false); err != nil {
			t.Fatal(err)
		}
		if _, err := kc2.CoreV1().ServiceAccounts("sample").Apply(ctx, sa, metav1.ApplyOptions{FieldManager: "test"}); err != nil {
			t.Fatal(err)
		}
		dryRun(cs.c2, "the Kind lab's "+name, objs[1:])
	}

	if _, err := kc2.AppsV1().DaemonSets(api.AgentNamespace).Get(ctx, AgentDaemonSet, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a dry run stored the DaemonSet on c2 (%v)", err)
	}
	// A dry run is a real check: the API server refuses what it would.
	bad := manifests("agent", deploy.ManifestOptions{})
	for _, u := range bad {
		if u.GetKind() == "DaemonSet" {
			if err := unstructured.SetNestedField(u.Object, "no-such-field", "spec", "template", "spec", "hostNetwrk"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := deploy.Apply(ctx, cs.c1.Config(), bad, true); err == nil || !strings.Contains(err.Error(), "hostNetwrk") {
		t.Errorf("a misspelt field: %v, want it refused", err)
	}
}

func testRejoin(t *testing.T, cs *clusterset) {
	before := clusterOnBroker(t, cs, "c1")
	gBefore := globalnetClusters(t, cs)
	ac, err := Join(t.Context(), cs.c1.Config(), cs.info, JoinOptions{ClusterID: "c1", CableDriver: "wireguard"})
	if err != nil {
		t.Fatal(err)
	}
	after := clusterOnBroker(t, cs, "c1")
	if after.UID != before.UID || after.ResourceVersion != before.ResourceVersion || ac.GlobalCIDR != cs.joined["c1"].GlobalCIDR {
		t.Errorf("re-join changed Cluster c1 (rv %s → %s) or its global CIDR (%s)", before.ResourceVersion, after.ResourceVersion, ac.GlobalCIDR)
	}
	if g := globalnetClusters(t, cs); fmt.Sprint(g.Clusters) != fmt.Sprint(gBefore.Clusters) {
		t.Errorf("re-join changed the Globalnet records: %v → %v", gBefore.Clusters, g.Clusters)
	}

	// Joining again through the CLI, which deploys too, changes nothing.
	mBefore := memberState(t, cs.c1)
	out, err := joinCLI(c1Join(cs))
	if err != nil {
		t.Fatal(err)
	}
	if mAfter := memberState(t, cs.c1); fmt.Sprint(mAfter) != fmt.Sprint(mBefore) {
		t.Errorf("joining again changed c1:\n%v\n%v", mBefore, mAfter)
	}
	if !strings.Contains(out, "CoreDNS (kube-system/coredns) already forwards clusterset.local") {
		t.Errorf("output %q does not tell CoreDNS was left alone", out)
	}
	// --no-deploy only configures.
	out, err = joinCLI(JoinCommand{InfoFile: cs.infoPath, Kubeconfig: cs.c2.Kubeconfig, Context: "c2", Join: JoinOptions{ClusterID: "c2"}, NoDeploy: true})
	if err != nil {
		t.Fatal(err)
	}
	kc2, _ := client(t, cs.c2.Config())
	if _, err := kc2.AppsV1().DaemonSets(api.AgentNamespace).Get(t.Context(), AgentDaemonSet, metav1.GetOptions{}); !apierrors.IsNotFound(err) || !strings.Contains(out, "not deployed (--no-deploy)") {
		t.Errorf("join --no-deploy: DaemonSet %v, output %q", err, out)
	}
	// A new --image rolls the agent and dnsd onto it.
	next := c1Join(cs)
	next.Member.Image = "registry.example/snorkel:next"
	if _, err := joinCLI(next); err != nil {
		t.Fatal(err)
	}
	kc, _ := client(t, cs.c1.Config())
	ds, err := kc.AppsV1().DaemonSets(api.AgentNamespace).Get(t.Context(), AgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "registry.example/snorkel:next" {
		t.Errorf("after joining with another --image the DaemonSet runs %s", img)
	}
}

func testConcurrentAllocation(t *testing.T, cs *clusterset) {
	kc, _ := client(t, cs.info.RESTConfig())
	const n = 8
	got := make([]netip.Prefix, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = recordGlobalCIDR(t.Context(), kc, api.DefaultBrokerNamespace, fmt.Sprint("p", i), netip.Prefix{}, 0)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("p%d: %v", i, err)
		}
	}
	g := globalnetClusters(t, cs)
	if len(g.Clusters) != 3+n {
		t.Errorf("%d records, want %d", len(g.Clusters), 3+n)
	}
	all := slices.Clone(got)
	for _, id := range []string{"c1", "c2", "c3"} {
		p, _ := g.lookup(id)
		all = append(all, p)
	}
	for i := range all {
		for j := range i {
			if all[i].Overlaps(all[j]) {
				t.Errorf("%v and %v overlap", all[i], all[j])
			}
		}
	}
	for i := range n {
		if err := releaseGlobalCIDR(t.Context(), kc, api.DefaultBrokerNamespace, fmt.Sprint("p", i)); err != nil {
			t.Fatal(err)
		}
	}
	if g := globalnetClusters(t, cs); len(g.Clusters) != 3 {
		t.Errorf("%d records after the releases, want 3", len(g.Clusters))
	}
}

func testLeave(t *testing.T, cs *clusterset) {
	ctx := t.Context()
	ns := api.DefaultBrokerNamespace
	kc, dc := client(t, cs.info.RESTConfig())
	mcs, err := mcsclient.NewForConfig(cs.info.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Objects of c3 and of c1, as the agents would have synced them.
	for _, id := range []string{"c1", "c3"} {
		es := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "web-default-" + id, Labels: map[string]string{SourceClusterLabel: id}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		label := SourceClusterLabel
		if id == "c3" {
			label = legacySourceClusterLabel
		}
		si := &mcsv1a1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Name: "web-default-" + id, Labels: map[string]string{label: id}},
			Spec:       mcsv1a1.ServiceImportSpec{Type: mcsv1a1.ClusterSetIP, Ports: []mcsv1a1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		}
		if _, err := mcs.MulticlusterV1alpha1().ServiceImports(ns).Create(ctx, si, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ep, _ := submv1.ToUnstructured(&submv1.Endpoint{
			ObjectMeta: metav1.ObjectMeta{Name: id + "-submariner-cable-" + id + "-10-0-0-1"},
			Spec: submv1.EndpointSpec{ClusterID: id, CableName: "submariner-cable-" + id + "-10-0-0-1", Hostname: "gw", Subnets: []string{"10.0.0.0/16"},
				PrivateIP: "10.0.0.1", PublicIP: "192.0.2.1", Backend: "wireguard"},
		}, "Endpoint")
		if _, err := dc.Resource(submv1.EndpointResource).Namespace(ns).Create(ctx, ep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c3Global, _ := globalnetClusters(t, cs).lookup("c3")
	if err := Leave(ctx, cs.info.RESTConfig(), ns, "c3"); err != nil {
		t.Fatal(err)
	}
	for _, gvr := range []schema.GroupVersionResource{submv1.ClusterResource, submv1.EndpointResource, serviceImportResource, endpointSliceResource} {
		list, err := dc.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, u := range list.Items {
			names = append(names, u.GetName())
			if strings.Contains(u.GetName(), "c3") {
				t.Errorf("%s %s outlived the leave", gvr.Resource, u.GetName())
			}
		}
		if !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, "c1") }) {
			t.Errorf("%s: the leave of c3 removed c1's too (left %v)", gvr.Resource, names)
		}
	}
	g := globalnetClusters(t, cs)
	if _, ok := g.lookup("c3"); ok {
		t.Errorf("c3 still has a Globalnet record")
	}
	if p, err := allocateGlobalCIDR(g, "next", 0); err != nil || p != c3Global {
		t.Errorf("the next cluster gets %v (%v), want c3's freed %v", p, err, c3Global)
	}
	if err := Leave(ctx, cs.info.RESTConfig(), ns, "c3"); err != nil {
		t.Errorf("leaving again: %v", err)
	}
}

func testRedeployRefusesGlobalnetChange(t *testing.T, cs *clusterset) {
	_, err := Deploy(context.Background(), cs.broker.Config(), BrokerOptions{})
	if err == nil || !strings.Contains(err.Error(), "same Globalnet flags") {
		t.Errorf("turning Globalnet off under two clusters: %v, want a refusal", err)
	}
	if g := globalnetClusters(t, cs); !g.Enabled || len(g.Clusters) != 2 {
		t.Errorf("the refused deploy changed Globalnet: %+v", g)
	}
}
