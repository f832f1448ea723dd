package broker

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
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
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
)

// clusterset is a broker and three members, shared by the subtests of
// TestClusterset, which run in order: each builds on the state the earlier
// ones left.
type clusterset struct {
	broker, c1, c2, c3 *kubelocal.Server
	infoPath           string
	info               *Info
	// joined holds each member's AgentConfig as Join returned it.
	joined map[string]*AgentConfig
}

func TestClusterset(t *testing.T) {
	servers := kubelocal.ForTest(t,
		kubelocal.Options{Name: "broker"},
		kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"},
		kubelocal.Options{Name: "c2", ServiceCIDR: "10.99.0.0/16"},
		kubelocal.Options{Name: "c3", ServiceCIDR: "10.77.0.0/16"})
	cs := &clusterset{
		broker: servers[0], c1: servers[1], c2: servers[2], c3: servers[3],
		infoPath: filepath.Join(t.TempDir(), InfoFileName),
		joined:   map[string]*AgentConfig{},
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

func runCLI(run func([]string, *bytes.Buffer) error, args ...string) (string, error) {
	var out bytes.Buffer
	err := run(args, &out)
	return out.String(), err
}

func deployCLI(args []string, out *bytes.Buffer) error { return RunDeployBroker(args, out) }
func joinCLI(args []string, out *bytes.Buffer) error   { return RunJoin(args, out) }

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
	ns, err := kc.CoreV1().Namespaces().Get(ctx, DefaultBrokerNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := kc.CoreV1().ServiceAccounts(DefaultBrokerNamespace).Get(ctx, BrokerClientServiceAccount, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role, err := kc.RbacV1().Roles(DefaultBrokerNamespace).Get(ctx, BrokerClientServiceAccount, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := kc.RbacV1().RoleBindings(DefaultBrokerNamespace).Get(ctx, BrokerClientServiceAccount, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := kc.CoreV1().ConfigMaps(DefaultBrokerNamespace).Get(ctx, GlobalnetConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	psk, err := kc.CoreV1().Secrets(DefaultBrokerNamespace).Get(ctx, PSKSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return brokerState{
		nsUID: string(ns.UID), saUID: string(sa.UID), roleUID: string(role.UID), bindingUID: string(rb.UID),
		roleRules: fmt.Sprint(role.Rules), globalnet: cm.Data, psk: psk.Data[pskKey],
	}
}

func testDeployBrokerTwice(t *testing.T, cs *clusterset) {
	args := []string{"--kubeconfig", cs.broker.Kubeconfig, "--context", cs.broker.Name, "--globalnet", "--out", cs.infoPath}
	out, err := runCLI(deployCLI, args...)
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
	if _, err := runCLI(deployCLI, args...); err != nil {
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
	want := map[string]string{globalnetEnabledKey: "true", globalnetCIDRRangeKey: `"242.0.0.0/8"`, globalnetClusterSizeKey: "65536"}
	for k, v := range want {
		if second.globalnet[k] != v {
			t.Errorf("Globalnet ConfigMap %s = %q, want %q", k, second.globalnet[k], v)
		}
	}
	if info2.BrokerURL != cs.broker.URL || info2.Namespace() != DefaultBrokerNamespace || !bytes.Equal(info2.CA(), cs.broker.CA) ||
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
	ns := DefaultBrokerNamespace
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
	_, err = kc.CoreV1().ConfigMaps(ns).Get(ctx, GlobalnetConfigMapName, metav1.GetOptions{})
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
	base := []string{cs.infoPath, "--kubeconfig", cs.c3.Kubeconfig, "--context", cs.c3.Name}
	for _, tc := range []struct {
		name  string
		extra []string
		want  []string
	}{
		{"underscore and capitals", []string{"--clusterid", "Bad_ID"}, []string{"--clusterid", "DNS-1123", `e.g. "bad-id"`}},
		{"leading dash", []string{"--clusterid=-x"}, []string{"--clusterid", `e.g. "x"`}},
		{"64 characters", []string{"--clusterid", strings.Repeat("c", 64)}, []string{"--clusterid", "at most 63"}},
		{"no ID", nil, []string{"--clusterid is required"}},
		{"unknown cable driver", []string{"--clusterid", "c3", "--cable-driver", "ipsec"}, []string{"--cable-driver", "wireguard, esp, vxlan"}},
		{"host bits in the Pod CIDR", []string{"--clusterid", "c3", "--clustercidr", "10.7.0.1/16"}, []string{"--clustercidr", "10.7.0.0/16"}},
		{"a Service CIDR that is none", []string{"--clusterid", "c3", "--servicecidr", "services"}, []string{"--servicecidr"}},
		{"a global CIDR that is none", []string{"--clusterid", "c3", "--globalnet-cidr", "global"}, []string{"--globalnet-cidr"}},
		{"no Pod CIDR known", []string{"--clusterid", "c3"}, []string{"--clustercidr", "no nodes"}},
		{"unknown context", []string{"--clusterid", "c3", "--context", "nowhere"}, []string{"--context nowhere", "nowhere"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runCLI(joinCLI, append(slices.Clone(base), tc.extra...)...)
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
	if _, err := runCLI(joinCLI, "--clusterid", "c3"); err == nil || !strings.Contains(err.Error(), "broker information file") {
		t.Errorf("no file: %v", err)
	}
	_, dc := client(t, cs.broker.Config())
	list, err := dc.Resource(submv1.ClusterResource).Namespace(DefaultBrokerNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("refused joins left %d Clusters on the broker (%v)", len(list.Items), err)
	}
}

func clusterOnBroker(t *testing.T, cs *clusterset, id string) *submv1.Cluster {
	t.Helper()
	_, dc := client(t, cs.broker.Config())
	u, err := dc.Resource(submv1.ClusterResource).Namespace(DefaultBrokerNamespace).Get(t.Context(), id, metav1.GetOptions{})
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
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c1-node"}, Spec: corev1.NodeSpec{PodCIDR: "10.8.0.0/16", PodCIDRs: []string{"10.8.0.0/16"}}}
	if _, err := kc1.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
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
		out, err := runCLI(joinCLI, cs.infoPath, "--clusterid", "c1", "--kubeconfig", cs.c1.Kubeconfig, "--context", "c1", "--cable-driver", "wireguard")
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
	ac, err := LoadAgentConfig(ctx, kc1, AgentNamespace)
	if err != nil {
		t.Fatal(err)
	}
	cs.joined["c1"] = ac
	if ac.CableDriver != CableDriverWireGuard {
		t.Errorf("c1's cable driver %q, want wireguard", ac.CableDriver)
	}
	if want := "cluster c1 joined the broker at " + cs.broker.URL; !strings.Contains(cliOut, want) || !strings.Contains(cliOut, "global CIDR "+ac.GlobalCIDR) {
		t.Errorf("CLI output %q, want %q and the global CIDR", cliOut, want)
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
	if c := clusterOnBroker(t, cs, "c1"); c.Annotations[ClusterUIDAnnotation] != kubeSystemUID(t, cs.c1) || c.Labels[ClusterIDLabel] != "c1" {
		t.Errorf("Cluster c1 annotations %v labels %v, want c1's kube-system UID and ID", c.Annotations, c.Labels)
	}
	got := []string{cs.joined["c1"].GlobalCIDR, cs.joined["c2"].GlobalCIDR, cs.joined["c3"].GlobalCIDR}
	slices.Sort(got)
	if !slices.Equal(got, []string{"242.0.0.0/16", "242.1.0.0/16", "242.2.0.0/16"}) {
		t.Errorf("global CIDRs %v, want the first three /16s of 242.0.0.0/8", got)
	}
	_, dc := client(t, cs.broker.Config())
	list, err := dc.Resource(submv1.ClusterResource).Namespace(DefaultBrokerNamespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 3 {
		t.Errorf("%d Clusters on the broker (%v), want 3", len(list.Items), err)
	}
}

func testAgentInstalled(t *testing.T, cs *clusterset) {
	for _, m := range []*kubelocal.Server{cs.c1, cs.c2, cs.c3} {
		kc, _ := client(t, m.Config())
		ctx := t.Context()
		if _, err := kc.CoreV1().ServiceAccounts(AgentNamespace).Get(ctx, AgentServiceAccount, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
		if _, err := kc.RbacV1().ClusterRoleBindings().Get(ctx, AgentServiceAccount, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
		if _, err := kc.RbacV1().RoleBindings(AgentNamespace).Get(ctx, AgentServiceAccount, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", m.Name, err)
		}
		ac, err := LoadAgentConfig(ctx, kc, AgentNamespace)
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if fmt.Sprintf("%+v", ac) != fmt.Sprintf("%+v", cs.joined[m.Name]) {
			t.Errorf("%s: loaded\n%+v\nwant what Join returned\n%+v", m.Name, ac, cs.joined[m.Name])
		}
		if ac.PSK != cs.info.PSK() || ac.BrokerNamespace != DefaultBrokerNamespace || !ac.ServiceDiscovery || ac.GlobalCIDR == "" {
			t.Errorf("%s: %+v", m.Name, ac)
		}
		_, bdc := client(t, ac.BrokerConfig())
		list, err := bdc.Resource(submv1.ClusterResource).Namespace(ac.BrokerNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 3 {
			t.Errorf("%s: BrokerConfig lists %d Clusters (%v), want 3", m.Name, len(list.Items), err)
		}
	}
	if d := cs.joined["c2"].CableDriver; d != DefaultCableDriver {
		t.Errorf("c2 without --cable-driver has %q, want %q", d, DefaultCableDriver)
	}
}

func testAgentRBAC(t *testing.T, cs *clusterset) {
	ctx := t.Context()
	admin, _ := client(t, cs.c1.Config())
	secs := int64(600)
	tr, err := admin.CoreV1().ServiceAccounts(AgentNamespace).CreateToken(ctx, AgentServiceAccount,
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
	_, err = LoadAgentConfig(ctx, agent, AgentNamespace)
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
	_, err = agent.CoreV1().Secrets(AgentNamespace).Get(ctx, "another", metav1.GetOptions{})
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
		{"242.9.0.0/24", "wrong size"},
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
	if _, err := dc.Resource(submv1.ClusterResource).Namespace(DefaultBrokerNamespace).Get(ctx, "c4", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("refused joins left Cluster c4: %v", err)
	}
}

func globalnetClusters(t *testing.T, cs *clusterset) *globalnetInfo {
	t.Helper()
	kc, _ := client(t, cs.broker.Config())
	g, _, err := readGlobalnet(t.Context(), kc, DefaultBrokerNamespace)
	if err != nil {
		t.Fatal(err)
	}
	return g
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
}

func testConcurrentAllocation(t *testing.T, cs *clusterset) {
	kc, _ := client(t, cs.info.RESTConfig())
	const n = 8
	got := make([]netip.Prefix, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = recordGlobalCIDR(t.Context(), kc, DefaultBrokerNamespace, fmt.Sprint("p", i), netip.Prefix{})
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
		if err := releaseGlobalCIDR(t.Context(), kc, DefaultBrokerNamespace, fmt.Sprint("p", i)); err != nil {
			t.Fatal(err)
		}
	}
	if g := globalnetClusters(t, cs); len(g.Clusters) != 3 {
		t.Errorf("%d records after the releases, want 3", len(g.Clusters))
	}
}

func testLeave(t *testing.T, cs *clusterset) {
	ctx := t.Context()
	ns := DefaultBrokerNamespace
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
	if p, err := allocateGlobalCIDR(g, "next"); err != nil || p != c3Global {
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
