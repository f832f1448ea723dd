package broker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/controller/servicesync"
)

// settle bounds a wait for a change to show: milliseconds on an idle
// machine, far more on a loaded one.
const settle = 60 * time.Second

// eventually polls check until it returns "" or settle passes, then
// fails with its last complaint.
func eventually(t *testing.T, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(settle)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		complaint := check()
		if complaint == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so after %v: %s", what, settle, complaint)
		}
		<-tick.C
	}
}

// allObjects names every object the API server s serves, as
// "group/resource namespace/name", but for Events, which only tell, and
// ComponentStatuses, which are not stored. An IPAddress is named by the
// Service it is allocated to.
func allObjects(t *testing.T, s *kubelocal.Server) map[string]bool {
	t.Helper()
	cfg := s.Config()
	cfg.WarningHandler = rest.NoWarnings{}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := disc.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	_, dc := client(t, cfg)
	out := map[string]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") || r.Name == "events" || r.Name == "componentstatuses" {
				continue
			}
			gvr := gv.WithResource(r.Name)
			items, err := dc.Resource(gvr).List(t.Context(), metav1.ListOptions{})
			if apierrors.IsNotFound(err) {
				continue // a CRD being deleted
			}
			if err != nil {
				t.Fatalf("listing %s: %v", gvr, err)
			}
			for _, u := range items.Items {
				name := objectKey(&u)
				if r.Name == "ipaddresses" {
					ns, _, _ := unstructured.NestedString(u.Object, "spec", "parentRef", "namespace")
					svc, _, _ := unstructured.NestedString(u.Object, "spec", "parentRef", "name")
					name = "of Service " + ns + "/" + svc
				}
				out[fmt.Sprintf("%s %s", gvr.GroupResource(), name)] = true
			}
		}
	}
	return out
}

// diff lists the names in one map and not the other, but for those kept
// says may differ.
func diff(before, after map[string]bool, kept func(string) bool) string {
	var d []string
	for k := range after {
		if !before[k] && !kept(k) {
			d = append(d, "+"+k)
		}
	}
	for k := range before {
		if !after[k] && !kept(k) {
			d = append(d, "-"+k)
		}
	}
	slices.Sort(d)
	return strings.Join(d, "\n")
}

// runSyncer runs servicesync for a joined member, as its agent would,
// until the returned stop.
func runSyncer(t *testing.T, s *kubelocal.Server) (stop func()) {
	t.Helper()
	kc, _ := client(t, s.Config())
	ac, err := api.LoadAgentConfig(t.Context(), kc, api.AgentNamespace)
	if err != nil {
		t.Fatal(err)
	}
	sy, err := servicesync.New(servicesync.Config{
		ClusterID: ac.ClusterID, Local: kc, LocalConfig: s.Config(),
		Broker: ac.BrokerConfig(), BrokerNamespace: ac.BrokerNamespace,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sy.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s's Syncer: %v", s.Name, err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// imported is what member s imports of service demo/web from cluster
// "from": the ServiceImport's clusters and the EndpointSlice count.
func imported(t *testing.T, s *kubelocal.Server, from string) (clusters []string, slices int) {
	t.Helper()
	kc, _ := client(t, s.Config())
	mcs, err := mcsclient.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	si, err := mcs.MulticlusterV1alpha1().ServiceImports("demo").Get(t.Context(), "web", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatal(err)
	default:
		for _, c := range si.Status.Clusters {
			clusters = append(clusters, c.Cluster)
		}
	}
	l, err := kc.DiscoveryV1().EndpointSlices("demo").List(t.Context(), metav1.ListOptions{
		LabelSelector: discoveryv1.LabelManagedBy + "=" + servicesync.ManagedBy + "," + servicesync.LabelSourceCluster + "=" + from,
	})
	if err != nil {
		t.Fatal(err)
	}
	return clusters, len(l.Items)
}

// exportWeb makes and exports service demo/web in s, with one ready
// backend.
func exportWeb(t *testing.T, s *kubelocal.Server) {
	t.Helper()
	ctx := t.Context()
	kc, _ := client(t, s.Config())
	mcs, err := mcsclient.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	port := int32(80)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := kc.CoreV1().Services("demo").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: "demo", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: &port, Protocol: new(corev1.ProtocolTCP)}},
	}
	if _, err := kc.DiscoveryV1().EndpointSlices("demo").Create(ctx, eps, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	se := &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo"}}
	if _, err := mcs.MulticlusterV1alpha1().ServiceExports("demo").Create(ctx, se, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createNamespace(t *testing.T, kc kubernetes.Interface, name string) {
	t.Helper()
	if _, err := kc.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// finishNamespaceDeletion does what the namespace controller, which
// kubelocal lacks, does once a deleted namespace is empty: it removes the
// namespace's finalizer, and the API server removes the namespace.
func finishNamespaceDeletion(t *testing.T, kc kubernetes.Interface, name string) {
	t.Helper()
	ns, err := kc.CoreV1().Namespaces().Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if _, err := kc.CoreV1().Namespaces().Finalize(t.Context(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func wantLines(t *testing.T, what, out string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(out, l+"\n") {
			t.Errorf("%s: the output lacks the line %q:\n%s", what, l, out)
		}
	}
}

// TestUninstallAndRecover joins c1 and c2 to a broker, c1 with Snorkel
// deployed and exporting a service that c2 imports; it recovers
// broker-info.subm from each side, uninstalls c1 (twice), and joins it
// again with a recovered file.
func TestUninstallAndRecover(t *testing.T) {
	servers := kubetest.Start(t,
		kubelocal.Options{Name: "broker"},
		kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"},
		kubelocal.Options{Name: "c2", ServiceCIDR: "10.99.0.0/16"})
	bs, c1, c2 := servers[0], servers[1], servers[2]
	ctx := t.Context()
	dir := t.TempDir()
	infoPath := filepath.Join(dir, InfoFileName)
	kc1, dc1 := client(t, c1.Config())
	kc2, _ := client(t, c2.Config())

	// c1 as kind sets it up: CoreDNS, and a node the user made a gateway.
	coredns := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: CoreDNSConfigMap, Namespace: metav1.NamespaceSystem},
		Data:       map[string]string{corefileKey: kubeadmCorefile},
	}
	if _, err := kc1.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, coredns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c1-gw", Labels: map[string]string{GatewayLabel: "true"}}}
	if _, err := kc1.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server makes its own Service a moment after it serves: the
	// snapshot must not mistake it for something the join made.
	eventually(t, "c1's API server has made default/kubernetes", func() string {
		if _, err := kc1.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
			return err.Error()
		}
		return ""
	})
	before := allObjects(t, c1)

	if _, err := deployCLI(DeployBrokerCommand{Kubeconfig: bs.Kubeconfig, Context: bs.Name, Broker: BrokerOptions{Globalnet: true}, Out: infoPath}); err != nil {
		t.Fatal(err)
	}
	original, err := os.ReadFile(infoPath)
	if err != nil {
		t.Fatal(err)
	}
	info, err := ReadInfoFile(infoPath)
	if err != nil {
		t.Fatal(err)
	}
	c1Join := JoinCommand{
		InfoFile: infoPath, Kubeconfig: c1.Kubeconfig, Context: c1.Name,
		Join: JoinOptions{ClusterID: "c1", ClusterCIDRs: []string{"10.1.0.0/16"}}, Member: MemberOptions{Image: c1Image},
	}
	if _, err := joinCLI(c1Join); err != nil {
		t.Fatal(err)
	}
	if _, err := Join(ctx, c2.Config(), info, JoinOptions{ClusterID: "c2", ClusterCIDRs: []string{"10.2.0.0/16"}}); err != nil {
		t.Fatal(err)
	}

	t.Run("recover-broker-info from a joined cluster writes the file it joined with", func(t *testing.T) {
		path := filepath.Join(dir, "from-c2.subm")
		var out bytes.Buffer
		if err := RunRecoverBrokerInfo(RecoverCommand{Kubeconfig: c2.Kubeconfig, Context: c2.Name, Out: path}, &out); err != nil {
			t.Fatalf("%v\n%s", err, &out)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, original) {
			t.Errorf("recovered file\n%s\ndiffers from deploy-broker's\n%s", got, original)
		}
		wantLines(t, "recovering from c2", out.String(),
			` • Checking if the Broker is installed on cluster "c2" in namespace "submariner-k8s-broker"  ...`,
			` ⚠ Checking if the Broker is installed on cluster "c2" in namespace "submariner-k8s-broker"`,
			" ⚠ Broker not found. Trying to connect to the Broker installed on a different cluster",
			" ✓ Found Broker installed on a different cluster in namespace submariner-k8s-broker",
			" ✓ Successfully retrieved the data (Globalnet on (range 242.0.0.0/8, 65536 addresses per cluster)). Writing it to broker-info.subm",
			fmt.Sprintf(" ✓ Saving broker info to file %q", path))

		// Again: the first file is kept aside, as subctl keeps it.
		out.Reset()
		if err := RunRecoverBrokerInfo(RecoverCommand{Kubeconfig: c2.Kubeconfig, Context: c2.Name, Out: path, BrokerURL: "https://broker.example:6443"}, &out); err != nil {
			t.Fatal(err)
		}
		backups, _ := filepath.Glob(path + ".*")
		if len(backups) != 1 {
			t.Fatalf("backups %v, want one", backups)
		}
		if kept, _ := os.ReadFile(backups[0]); !bytes.Equal(kept, original) {
			t.Errorf("the backup is not the first file")
		}
		if !strings.Contains(out.String(), "Backed up previous file") {
			t.Errorf("the output does not tell the backup:\n%s", &out)
		}
		moved, err := ReadInfoFile(path)
		if err != nil || moved.BrokerURL != "https://broker.example:6443" || moved.Token() != info.Token() {
			t.Errorf("with --broker-url: %v, %+v", err, moved)
		}
	})

	fromBroker := filepath.Join(dir, "from-broker.subm")
	t.Run("recover-broker-info from the broker cluster makes a new token", func(t *testing.T) {
		var out bytes.Buffer
		if err := RunRecoverBrokerInfo(RecoverCommand{Kubeconfig: bs.Kubeconfig, Context: bs.Name, Out: fromBroker}, &out); err != nil {
			t.Fatalf("%v\n%s", err, &out)
		}
		got, err := ReadInfoFile(fromBroker)
		if err != nil {
			t.Fatal(err)
		}
		if got.Token() == info.Token() || got.Token() == "" {
			t.Errorf("the token is the old one or empty")
		}
		got.ClientToken.Data[tokenKey] = info.ClientToken.Data[tokenKey]
		a, _ := got.Encode()
		if !bytes.Equal(a, original) {
			t.Errorf("but for the token, the file differs from deploy-broker's")
		}
		wantLines(t, "recovering from the broker", out.String(), ` ✓ Checking if the Broker is installed on cluster "broker" in namespace "submariner-k8s-broker"`)
		if !strings.Contains(out.String(), "a new client token of ServiceAccount submariner-k8s-broker/submariner-k8s-broker-client is valid until") {
			t.Errorf("the output does not tell the new token:\n%s", &out)
		}
	})

	// c1's agent: its Endpoint on the broker, and its services synced both
	// ways; c2's imports c1's service.
	_, bdc := client(t, info.RESTConfig())
	ep, _ := submv1.ToUnstructured(&submv1.Endpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "c1-submariner-cable-c1-10-0-0-1", Labels: map[string]string{api.ClusterIDLabel: "c1"}},
		Spec: submv1.EndpointSpec{ClusterID: "c1", CableName: "submariner-cable-c1-10-0-0-1", Hostname: "c1-gw", Subnets: []string{"10.1.0.0/16"},
			PrivateIP: "10.0.0.1", PublicIP: "192.0.2.1", Backend: "esp"},
	}, "Endpoint")
	if _, err := bdc.Resource(submv1.EndpointResource).Namespace(info.Namespace()).Create(ctx, ep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createNamespace(t, kc1, "demo")
	createNamespace(t, kc2, "demo")
	stopC1 := runSyncer(t, c1)
	runSyncer(t, c2)
	exportWeb(t, c1)
	for _, s := range []*kubelocal.Server{c1, c2} {
		eventually(t, s.Name+" imports c1's demo/web", func() string {
			if clusters, n := imported(t, s, "c1"); !slices.Equal(clusters, []string{"c1"}) || n != 1 {
				return fmt.Sprintf("ServiceImport from %v, %d EndpointSlices", clusters, n)
			}
			return ""
		})
	}

	t.Run("uninstall asks first", func(t *testing.T) {
		var out bytes.Buffer
		if err := RunUninstall(UninstallCommand{Kubeconfig: c1.Kubeconfig, Context: c1.Name}, strings.NewReader("n\n"), &out); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), `This will completely uninstall Snorkel from the cluster "c1". Are you sure you want to continue? (y/N) Not uninstalling.`) {
			t.Errorf("declined: %s", &out)
		}
		err := RunUninstall(UninstallCommand{Kubeconfig: c1.Kubeconfig, Context: c1.Name}, strings.NewReader(""), &out)
		if err == nil || !strings.Contains(err.Error(), "--yes") {
			t.Errorf("no answer: %v", err)
		}
		if _, err := kc1.CoreV1().Secrets(api.AgentNamespace).Get(ctx, api.AgentSecretName, metav1.GetOptions{}); err != nil {
			t.Errorf("after two refusals: %v", err)
		}
	})

	t.Run("uninstall removes all the join made, and c2 stops importing c1's service", func(t *testing.T) {
		// Deleting the agent's DaemonSet ends its pods: here, its Syncer.
		stopC1()
		var out bytes.Buffer
		if err := RunUninstall(UninstallCommand{Kubeconfig: c1.Kubeconfig, Context: c1.Name}, strings.NewReader("y\n"), &out); err != nil {
			t.Fatalf("%v\n%s", err, &out)
		}
		t.Logf("uninstall:\n%s", &out)
		wantLines(t, "uninstall", out.String(),
			` ✓ Checking if Snorkel is installed on cluster "c1"`,
			` ✓ Cluster "c1" is joined to the broker at `+info.BrokerURL+` as "c1"`,
			` ✓ Deleted DaemonSet submariner-operator/snorkel-agent`,
			` ✓ Deleted DaemonSet submariner-operator/submariner-routeagent`,
			" ⚠ The route agent leaves its routes (protocol 84) and nftables table ip snorkel-routeagent on the nodes: remove them with `snorkel route-agent --uninstall` on each node",
			` ✓ Removing cluster "c1" from the broker at `+info.BrokerURL+` (namespace "submariner-k8s-broker")`,
			` ✓ Deleted 1 ServiceImports and 1 EndpointSlices`,
			` ✓ CoreDNS (kube-system/coredns) no longer forwards clusterset.local`,
			` ✓ The broker component is not installed on cluster "c1"`,
			` ✓ Deleted the "snorkel-agent" cluster role and binding`,
			` ✓ Deleted the "submariner-lighthouse-coredns" cluster role and binding`,
			` ✓ Deleting the Snorkel namespace "submariner-operator" on cluster "c1"`,
			` ✓ Deleted the "endpoints.submariner.io" custom resource definition`,
			` ✓ Node "c1-gw" is no longer a gateway`)

		eventually(t, "c2 no longer imports c1's demo/web", func() string {
			if clusters, n := imported(t, c2, "c1"); len(clusters) > 0 || n > 0 {
				return fmt.Sprintf("ServiceImport from %v, %d EndpointSlices", clusters, n)
			}
			return ""
		})
		for _, gvr := range []schema.GroupVersionResource{submv1.ClusterResource, submv1.EndpointResource, serviceImportResource, endpointSliceResource} {
			list, err := bdc.Resource(gvr).Namespace(info.Namespace()).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, u := range list.Items {
				names = append(names, u.GetName())
			}
			if slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, "c1") }) {
				t.Errorf("the broker keeps c1's %s: %v", gvr.Resource, names)
			}
		}
		kcb, _ := client(t, info.RESTConfig())
		g, _, err := readGlobalnet(ctx, kcb, info.Namespace())
		if err != nil {
			t.Fatal(err)
		}
		if _, held := g.lookup("c1"); held {
			t.Errorf("c1 still holds a global CIDR")
		}
		if _, held := g.lookup("c2"); !held {
			t.Errorf("c2 lost its global CIDR")
		}

		// What the user made stays: the service and its export, and the
		// MCS CRDs that hold it, as subctl leaves them.
		kept := func(k string) bool {
			return strings.Contains(k, " demo/") || k == "namespaces demo" ||
				strings.HasSuffix(k, ".multicluster.x-k8s.io") && (strings.HasPrefix(k, "customresourcedefinitions.") || strings.HasPrefix(k, "apiservices."))
		}
		eventually(t, "c1 holds what it held before the join", func() string {
			d := diff(before, allObjects(t, c1), kept)
			if d == "+namespaces "+api.AgentNamespace {
				// Only a namespace controller, which kubelocal lacks,
				// finishes a namespace's deletion.
				ns, err := kc1.CoreV1().Namespaces().Get(ctx, api.AgentNamespace, metav1.GetOptions{})
				if err == nil && ns.DeletionTimestamp != nil {
					return ""
				}
			}
			return d
		})
		cm, err := kc1.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, CoreDNSConfigMap, metav1.GetOptions{})
		if err != nil || cm.Data[corefileKey] != kubeadmCorefile {
			t.Errorf("Corefile after uninstall (%v):\n%s", err, cm.Data[corefileKey])
		}
		n, err := kc1.CoreV1().Nodes().Get(ctx, "c1-gw", metav1.GetOptions{})
		if err != nil || n.Labels[GatewayLabel] != "" {
			t.Errorf("node c1-gw after uninstall (%v): labels %v", err, n.Labels)
		}
		if _, err := dc1.Resource(submv1.ClusterResource).List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("c1 still serves submariner.io Clusters (%v)", err)
		}
	})

	t.Run("uninstalling again does nothing", func(t *testing.T) {
		var out bytes.Buffer
		if err := RunUninstall(UninstallCommand{Kubeconfig: c1.Kubeconfig, Context: c1.Name, Yes: true}, nil, &out); err != nil {
			t.Fatalf("%v\n%s", err, &out)
		}
		wantLines(t, "second uninstall", out.String(),
			` ✓ Snorkel's agent configuration (Secret submariner-operator/snorkel-agent) is not on cluster "c1" - skipping the broker`)
		if strings.Contains(out.String(), "Deleted") || strings.Contains(out.String(), "⚠") {
			t.Errorf("the second uninstall found something to do:\n%s", &out)
		}
		err := RunRecoverBrokerInfo(RecoverCommand{Kubeconfig: c1.Kubeconfig, Context: c1.Name, Out: filepath.Join(dir, "none.subm")}, &out)
		if err == nil || !strings.Contains(err.Error(), "has not joined a broker") {
			t.Errorf("recovering from an uninstalled cluster: %v", err)
		}
	})

	t.Run("c1 joins again with the file recovered from the broker", func(t *testing.T) {
		finishNamespaceDeletion(t, kc1, api.AgentNamespace)
		c1Join.InfoFile = fromBroker
		if out, err := joinCLI(c1Join); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if _, err := bdc.Resource(submv1.ClusterResource).Namespace(info.Namespace()).Get(ctx, "c1", metav1.GetOptions{}); err != nil {
			t.Errorf("c1's Cluster on the broker: %v", err)
		}
	})

	t.Run("uninstall keeps a broker other clusters use", func(t *testing.T) {
		var out bytes.Buffer
		if err := RunUninstall(UninstallCommand{Kubeconfig: bs.Kubeconfig, Context: bs.Name, Yes: true}, nil, &out); err != nil {
			t.Fatalf("%v\n%s", err, &out)
		}
		wantLines(t, "uninstalling the broker cluster", out.String(),
			` ⚠ Broker namespace "submariner-k8s-broker" appears to be in use by other clusters (c1, c2) - keeping the broker components`,
			` ⚠ Keeping them: broker namespace submariner-k8s-broker uses them`)
		if _, err := Join(ctx, c2.Config(), info, JoinOptions{ClusterID: "c2", ClusterCIDRs: []string{"10.2.0.0/16"}}); err != nil {
			t.Errorf("c2 joins again after the broker cluster's uninstall: %v", err)
		}
	})
}
