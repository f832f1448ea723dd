package deploy_test

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/deploy"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// submarinerCRD is what each submariner.io CRD must declare.
type submarinerCRD struct {
	resource  schema.GroupVersionResource
	kind      string
	scope     string
	shortName string
	status    bool // has a status subresource
}

var submarinerCRDs = []submarinerCRD{
	{submv1.ClusterResource, "Cluster", "Namespaced", "", false},
	{submv1.EndpointResource, "Endpoint", "Namespaced", "", false},
	{submv1.GatewayResource, "Gateway", "Namespaced", "", true},
	{submv1.ClusterGlobalEgressIPResource, "ClusterGlobalEgressIP", "Cluster", "cgeip", true},
	{submv1.GlobalEgressIPResource, "GlobalEgressIP", "Namespaced", "geip", true},
	{submv1.GlobalIngressIPResource, "GlobalIngressIP", "Namespaced", "giip", true},
}

var mcsCRDNames = []string{"serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io"}

func loadCRDs(t *testing.T) map[string]*unstructured.Unstructured {
	t.Helper()
	crds, err := deploy.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	return crds
}

// crdFile returns the file name a submariner.io CRD lives in.
func crdFile(r schema.GroupVersionResource) string { return r.Group + "_" + r.Resource + ".yaml" }

// TestCRDFiles checks the embedded CRDs: the six submariner.io ones and the
// two of the Multi-Cluster Services API, all apiextensions.k8s.io/v1, each
// submariner.io one named, scoped and versioned as the API types expect.
func TestCRDFiles(t *testing.T) {
	crds := loadCRDs(t)
	if len(crds) != 8 {
		t.Errorf("CRDs() returned %d CRDs, want 8 (6 submariner.io + 2 MCS): %v", len(crds), slices.Sorted(maps.Keys(crds)))
	}
	var names []string
	for file, u := range crds {
		if u.GetAPIVersion() != "apiextensions.k8s.io/v1" || u.GetKind() != "CustomResourceDefinition" {
			t.Errorf("%s: %s %s, want apiextensions.k8s.io/v1 CustomResourceDefinition", file, u.GetAPIVersion(), u.GetKind())
		}
		names = append(names, u.GetName())
	}
	for _, name := range mcsCRDNames {
		if !slices.Contains(names, name) {
			t.Errorf("the MCS CRD %s is missing", name)
		}
	}
	for _, want := range submarinerCRDs {
		file := crdFile(want.resource)
		u, ok := crds[file]
		if !ok {
			t.Errorf("%s is missing", file)
			continue
		}
		str := func(path ...string) string {
			s, _, _ := unstructured.NestedString(u.Object, path...)
			return s
		}
		if got, name := u.GetName(), want.resource.Resource+"."+want.resource.Group; got != name {
			t.Errorf("%s: metadata.name %q, want %q", file, got, name)
		}
		if got := str("spec", "group"); got != want.resource.Group {
			t.Errorf("%s: group %q, want %q", file, got, want.resource.Group)
		}
		if got := str("spec", "names", "kind"); got != want.kind {
			t.Errorf("%s: kind %q, want %q", file, got, want.kind)
		}
		if got := str("spec", "names", "plural"); got != want.resource.Resource {
			t.Errorf("%s: plural %q, want %q", file, got, want.resource.Resource)
		}
		if got := str("spec", "scope"); got != want.scope {
			t.Errorf("%s: scope %q, want %q", file, got, want.scope)
		}
		short, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "names", "shortNames")
		if want.shortName != "" && !slices.Equal(short, []string{want.shortName}) || want.shortName == "" && len(short) > 0 {
			t.Errorf("%s: shortNames %v, want %q", file, short, want.shortName)
		}
		versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
		if len(versions) != 1 {
			t.Errorf("%s: %d versions, want exactly v1", file, len(versions))
			continue
		}
		v := versions[0].(map[string]any)
		if v["name"] != want.resource.Version || v["served"] != true || v["storage"] != true {
			t.Errorf("%s: version %v served %v storage %v, want v1 served and stored", file, v["name"], v["served"], v["storage"])
		}
		_, hasStatus, _ := unstructured.NestedMap(v, "subresources", "status")
		if hasStatus != want.status {
			t.Errorf("%s: status subresource %v, want %v", file, hasStatus, want.status)
		}
	}
}

// TestGatewayEndpointSchemas checks that a Gateway's own and its
// connections' endpoints are validated exactly as an Endpoint's spec is:
// the three copies of the schema must not drift apart.
func TestGatewayEndpointSchemas(t *testing.T) {
	crds := loadCRDs(t)
	schemaAt := func(r schema.GroupVersionResource, path ...string) map[string]any {
		t.Helper()
		versions, _, _ := unstructured.NestedSlice(crds[crdFile(r)].Object, "spec", "versions")
		if len(versions) == 0 {
			t.Fatalf("%s has no versions", crdFile(r))
		}
		m, ok, err := unstructured.NestedMap(versions[0].(map[string]any), append([]string{"schema", "openAPIV3Schema"}, path...)...)
		if !ok || err != nil {
			t.Fatalf("%s: no schema at %s (%v)", crdFile(r), strings.Join(path, "."), err)
		}
		delete(m, "description")
		return m
	}
	want := schemaAt(submv1.EndpointResource, "properties", "spec")
	for _, path := range [][]string{
		{"properties", "status", "properties", "localEndpoint"},
		{"properties", "status", "properties", "connections", "items", "properties", "endpoint"},
	} {
		if got := schemaAt(submv1.GatewayResource, path...); !reflect.DeepEqual(got, want) {
			t.Errorf("gateways %s differs from endpoints spec:\n got %s\nwant %s", strings.Join(path, "."), toJSON(got), toJSON(want))
		}
	}
}

// TestCRDsOnAPIServer applies the CRDs to a real API server and checks
// what a user sees: dry-run leaves nothing behind, a real apply serves every
// API and a second one changes nothing, bad objects are refused naming the
// field, defaults are filled in, kubectl get shows the useful columns, and
// the MCS API works through its typed client.
func TestCRDsOnAPIServer(t *testing.T) {
	srv := kubetest.Start(t, kubelocal.Options{Name: "c1"})[0]
	ctx := t.Context()
	cfg := srv.Config()
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	crds := loadCRDs(t)
	var names []string
	for _, u := range crds {
		names = append(names, u.GetName())
	}

	t.Run("dry run creates nothing", func(t *testing.T) {
		if err := deploy.ApplyCRDs(ctx, cfg, true); err != nil {
			t.Fatalf("dry-run apply: %v", err)
		}
		for _, name := range names {
			_, err := dc.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("after a dry run, getting CRD %s gave %v, want NotFound", name, err)
			}
		}
	})

	applied := t.Run("apply establishes all eight", func(t *testing.T) {
		if err := deploy.ApplyCRDs(ctx, cfg, false); err != nil {
			t.Fatalf("apply: %v", err)
		}
		for _, name := range names {
			u, err := dc.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Errorf("CRD %s: %v", name, err)
				continue
			}
			if !conditionTrue(u, "Established") || !conditionTrue(u, "NamesAccepted") {
				t.Errorf("CRD %s is not established with accepted names: %v", name, u.Object["status"])
			}
		}
		list, err := kc.Discovery().ServerResourcesForGroupVersion("submariner.io/v1")
		if err != nil {
			t.Fatalf("discovery of submariner.io/v1: %v", err)
		}
		var served []string
		for _, r := range list.APIResources {
			served = append(served, r.Name)
		}
		for _, want := range submarinerCRDs {
			if !slices.Contains(served, want.resource.Resource) {
				t.Errorf("submariner.io/v1 does not serve %s (it serves %v)", want.resource.Resource, served)
			}
		}
	})
	if !applied {
		t.FailNow()
	}

	t.Run("applying twice is idempotent", func(t *testing.T) {
		before := map[string]*unstructured.Unstructured{}
		for _, name := range names {
			u, err := dc.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			before[name] = u
		}
		if err := deploy.ApplyCRDs(ctx, cfg, false); err != nil {
			t.Fatalf("second apply: %v", err)
		}
		for _, name := range names {
			u, err := dc.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if u.GetGeneration() != before[name].GetGeneration() || !reflect.DeepEqual(u.Object["spec"], before[name].Object["spec"]) {
				t.Errorf("CRD %s changed on the second apply: generation %d → %d", name, before[name].GetGeneration(), u.GetGeneration())
			}
		}
	})

	const ns = "submariner-operator"
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("validation refuses bad objects naming the field", func(t *testing.T) {
		testValidation(t, dc, ns)
	})
	t.Run("status validation refuses bad states naming the field", func(t *testing.T) {
		testStatusValidation(t, dc, ns)
	})
	t.Run("defaults", func(t *testing.T) {
		testDefaults(t, dc, ns)
	})
	t.Run("printer columns", func(t *testing.T) {
		testPrinterColumns(t, kc, dc, ns)
	})
	t.Run("MCS ServiceExport and ServiceImport", func(t *testing.T) {
		testMCS(t, mcsclient.NewForConfigOrDie(cfg), ns)
	})
}

func conditionTrue(u *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

func validEndpoint() *submv1.Endpoint {
	return &submv1.Endpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "c1-submariner-cable-c1-172-18-0-5"},
		Spec: submv1.EndpointSpec{
			ClusterID:     "c1",
			CableName:     "submariner-cable-c1-172-18-0-5",
			HealthCheckIP: "10.8.255.254",
			Hostname:      "c1-worker",
			Subnets:       []string{"10.8.0.0/16", "10.88.0.0/16"},
			PrivateIP:     "172.18.0.5",
			PublicIP:      "",
			NATEnabled:    false,
			Backend:       "wireguard",
			BackendConfig: map[string]string{"udp-port": "4500"},
		},
	}
}

func validCluster() *submv1.Cluster {
	return &submv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c1"},
		Spec: submv1.ClusterSpec{
			ClusterID:   "c1",
			ServiceCIDR: []string{"10.88.0.0/16"},
			ClusterCIDR: []string{"10.8.0.0/16"},
			GlobalCIDR:  []string{"242.1.0.0/16"},
		},
	}
}

// mustUnstructured converts obj, failing t on error.
func mustUnstructured[T submv1.Object](t *testing.T, obj *T, kind string) *unstructured.Unstructured {
	t.Helper()
	u, err := submv1.ToUnstructured(obj, kind)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func set(t *testing.T, u *unstructured.Unstructured, value any, path ...string) *unstructured.Unstructured {
	t.Helper()
	if err := unstructured.SetNestedField(u.Object, value, path...); err != nil {
		t.Fatal(err)
	}
	return u
}

// testValidation creates each valid object, then variants each broken in
// one field, which the API server must refuse with that field and a hint
// of what it expects in the message.
func testValidation(t *testing.T, dc dynamic.Interface, ns string) {
	cgeip := func(n int64) *unstructured.Unstructured {
		u := mustUnstructured(t, &submv1.ClusterGlobalEgressIP{ObjectMeta: metav1.ObjectMeta{Name: "cgeip-bad"}}, "ClusterGlobalEgressIP")
		return set(t, u, n, "spec", "numGlobalIPs")
	}
	geip := func(n int64) *unstructured.Unstructured {
		u := mustUnstructured(t, &submv1.GlobalEgressIP{ObjectMeta: metav1.ObjectMeta{Name: "geip-bad"}}, "GlobalEgressIP")
		return set(t, u, n, "spec", "numberOfIPs")
	}
	giip := func(spec submv1.GlobalIngressIPSpec) *unstructured.Unstructured {
		return mustUnstructured(t, &submv1.GlobalIngressIP{ObjectMeta: metav1.ObjectMeta{Name: "giip-bad"}, Spec: spec}, "GlobalIngressIP")
	}
	endpoint := func(mutate func(*submv1.EndpointSpec)) *unstructured.Unstructured {
		ep := validEndpoint()
		ep.Name = "ep-bad"
		mutate(&ep.Spec)
		return mustUnstructured(t, ep, "Endpoint")
	}
	cluster := func(mutate func(*submv1.ClusterSpec)) *unstructured.Unstructured {
		c := validCluster()
		c.Name = "cluster-bad"
		mutate(&c.Spec)
		return mustUnstructured(t, c, "Cluster")
	}
	selector := func(expr metav1.LabelSelectorRequirement) *unstructured.Unstructured {
		return mustUnstructured(t, &submv1.GlobalEgressIP{
			ObjectMeta: metav1.ObjectMeta{Name: "geip-bad-selector"},
			Spec:       submv1.GlobalEgressIPSpec{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{expr}}},
		}, "GlobalEgressIP")
	}

	valid := []struct {
		resource schema.GroupVersionResource
		obj      *unstructured.Unstructured
	}{
		{submv1.ClusterResource, mustUnstructured(t, validCluster(), "Cluster")},
		{submv1.EndpointResource, mustUnstructured(t, validEndpoint(), "Endpoint")},
		{submv1.EndpointResource, endpoint(func(s *submv1.EndpointSpec) {
			s.Backend, s.PrivateIP, s.PublicIP, s.HealthCheckIP = "libreswan", "fd00::5", "2001:db8::7", ""
			s.Subnets = []string{"fd00:8::/64"}
		})},
		{submv1.ClusterGlobalEgressIPResource, cgeip(0)},
		{submv1.ClusterGlobalEgressIPResource, cgeip(20)},
		{submv1.GlobalEgressIPResource, geip(20)},
		{submv1.GlobalIngressIPResource, giip(submv1.GlobalIngressIPSpec{Target: submv1.ClusterIPService, ServiceRef: &corev1.LocalObjectReference{Name: "web"}})},
		{submv1.GlobalIngressIPResource, giip(submv1.GlobalIngressIPSpec{Target: submv1.HeadlessServicePod, ServiceRef: &corev1.LocalObjectReference{Name: "db"}, PodRef: &corev1.LocalObjectReference{Name: "db-0"}})},
		{submv1.GlobalEgressIPResource, selector(metav1.LabelSelectorRequirement{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"db"}})},
	}
	for _, c := range valid {
		t.Run("accepts "+c.resource.Resource+" "+toJSON(c.obj.Object["spec"]), func(t *testing.T) {
			if _, err := resource(dc, c.resource, ns).Create(t.Context(), c.obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Errorf("a valid %s was refused: %v", c.obj.GetKind(), err)
			}
		})
	}

	for _, c := range []struct {
		name     string
		resource schema.GroupVersionResource
		obj      *unstructured.Unstructured
		field    string // the field the error must name
		hint     string // and a fragment of what it must say
	}{
		{"numGlobalIPs above 20", submv1.ClusterGlobalEgressIPResource, cgeip(21), "spec.numGlobalIPs", "less than or equal to 20"},
		{"numGlobalIPs below 0", submv1.ClusterGlobalEgressIPResource, cgeip(-1), "spec.numGlobalIPs", "greater than or equal to 0"},
		{"numberOfIPs above 20", submv1.GlobalEgressIPResource, geip(21), "spec.numberOfIPs", "less than or equal to 20"},
		{"numberOfIPs below 0", submv1.GlobalEgressIPResource, geip(-1), "spec.numberOfIPs", "greater than or equal to 0"},
		{"cluster_id not a DNS-1123 label", submv1.ClusterResource, cluster(func(s *submv1.ClusterSpec) { s.ClusterID = "Bad_ID" }), "spec.cluster_id", "should match"},
		{"cluster_id longer than 63", submv1.ClusterResource, cluster(func(s *submv1.ClusterSpec) { s.ClusterID = strings.Repeat("c", 64) }), "spec.cluster_id", "Too long"},
		{"cluster_id missing", submv1.ClusterResource, cluster(func(s *submv1.ClusterSpec) { s.ClusterID = "" }), "spec.cluster_id", "should match"},
		{"cluster_cidr not a CIDR", submv1.ClusterResource, cluster(func(s *submv1.ClusterSpec) { s.ClusterCIDR = []string{"10.8.0.0"} }), "spec.cluster_cidr[0]", "must be a CIDR"},
		{"service_cidr not a CIDR", submv1.ClusterResource, cluster(func(s *submv1.ClusterSpec) { s.ServiceCIDR = []string{"10.88.0.0/16", "ten"} }), "spec.service_cidr[1]", "must be a CIDR"},
		{"global_cidr prefix too long", submv1.ClusterResource, cluster(func(s *submv1.ClusterSpec) { s.GlobalCIDR = []string{"242.1.0.0/40"} }), "spec.global_cidr[0]", "must be a CIDR"},
		{"endpoint cluster_id not a DNS-1123 label", submv1.EndpointResource, endpoint(func(s *submv1.EndpointSpec) { s.ClusterID = "Bad_ID" }), "spec.cluster_id", "should match"},
		{"subnet prefix too long", submv1.EndpointResource, endpoint(func(s *submv1.EndpointSpec) { s.Subnets = []string{"10.0.0.0/33"} }), "spec.subnets[0]", "must be a CIDR"},
		{"private_ip out of range", submv1.EndpointResource, endpoint(func(s *submv1.EndpointSpec) { s.PrivateIP = "300.1.1.1" }), "spec.private_ip", "must be an IP address"},
		{"public_ip a host name", submv1.EndpointResource, endpoint(func(s *submv1.EndpointSpec) { s.PublicIP = "gw.example.com" }), "spec.public_ip", "must be an IP address"},
		{"healthCheckIP a CIDR", submv1.EndpointResource, endpoint(func(s *submv1.EndpointSpec) { s.HealthCheckIP = "10.8.0.1/32" }), "spec.healthCheckIP", "must be an IP address"},
		{"unknown backend", submv1.EndpointResource, endpoint(func(s *submv1.EndpointSpec) { s.Backend = "ipsec" }), "spec.backend", `supported values: "wireguard", "esp", "vxlan", "libreswan"`},
		{"subnets missing", submv1.EndpointResource, endpoint(func(s *submv1.EndpointSpec) { s.Subnets = nil }), "spec.subnets", "Required value"},
		{"ClusterIPService without serviceRef", submv1.GlobalIngressIPResource, giip(submv1.GlobalIngressIPSpec{Target: submv1.ClusterIPService}), "spec.serviceRef", "target ClusterIPService needs serviceRef"},
		{"HeadlessServicePod without podRef", submv1.GlobalIngressIPResource, giip(submv1.GlobalIngressIPSpec{Target: submv1.HeadlessServicePod, ServiceRef: &corev1.LocalObjectReference{Name: "db"}}), "spec.podRef", "target HeadlessServicePod needs podRef"},
		{"serviceRef without a name", submv1.GlobalIngressIPResource, giip(submv1.GlobalIngressIPSpec{Target: submv1.ClusterIPService, ServiceRef: &corev1.LocalObjectReference{}}), "spec.serviceRef.name", "Required value"},
		{"unknown target", submv1.GlobalIngressIPResource, giip(submv1.GlobalIngressIPSpec{Target: "NodePortService", ServiceRef: &corev1.LocalObjectReference{Name: "web"}}), "spec.target", `supported values: "ClusterIPService", "HeadlessServicePod"`},
		{"In without values", submv1.GlobalEgressIPResource, selector(metav1.LabelSelectorRequirement{Key: "app", Operator: metav1.LabelSelectorOpIn}), "spec.podSelector.matchExpressions[0].values", "In and NotIn need at least one value"},
		{"unknown selector operator", submv1.GlobalEgressIPResource, selector(metav1.LabelSelectorRequirement{Key: "app", Operator: "Like", Values: []string{"db"}}), "spec.podSelector.matchExpressions[0].operator", "supported values"},
	} {
		t.Run("refuses "+c.name, func(t *testing.T) {
			_, err := resource(dc, c.resource, ns).Create(t.Context(), c.obj, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want an Invalid error naming %s", err, c.field)
			}
			if msg := err.Error(); !strings.Contains(msg, c.field+":") || !strings.Contains(msg, c.hint) {
				t.Errorf("the error does not name %s and say %q: %v", c.field, c.hint, msg)
			}
		})
	}
}

// testStatusValidation writes statuses that are wrong in one field
// through the status subresource, which must refuse them naming the field.
func testStatusValidation(t *testing.T, dc dynamic.Interface, ns string) {
	ep := validEndpoint().Spec
	gateway := mustUnstructured(t, &submv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "gw-bad"}}, "Gateway")
	giip := mustUnstructured(t, &submv1.GlobalIngressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "giip-bad-status"},
		Spec:       submv1.GlobalIngressIPSpec{Target: submv1.ClusterIPService, ServiceRef: &corev1.LocalObjectReference{Name: "web"}},
	}, "GlobalIngressIP")
	condition := metav1.Condition{Type: submv1.GlobalEgressIPAllocated, Status: metav1.ConditionTrue, LastTransitionTime: metav1.Unix(1780000000, 0), Reason: "Success"}
	for _, c := range []struct {
		name     string
		resource schema.GroupVersionResource
		obj      *unstructured.Unstructured
		status   any
		field    string
		hint     string
	}{
		{"unknown haStatus", submv1.GatewayResource, gateway,
			submv1.GatewayStatus{HAStatus: "primary", LocalEndpoint: ep},
			"status.haStatus", `supported values: "active", "passive"`},
		{"unknown connection status", submv1.GatewayResource, gateway,
			submv1.GatewayStatus{HAStatus: submv1.HAStatusActive, LocalEndpoint: ep, Connections: []submv1.Connection{{Status: "up", Endpoint: ep}}},
			"status.connections[0].status", `supported values: "connected", "connecting", "error"`},
		{"connection endpoint with a bad IP", submv1.GatewayResource, gateway,
			submv1.GatewayStatus{HAStatus: submv1.HAStatusActive, LocalEndpoint: ep, Connections: []submv1.Connection{{Status: submv1.Connected, Endpoint: func() submv1.EndpointSpec { e := ep; e.PublicIP = "1.2.3"; return e }()}}},
			"status.connections[0].endpoint.public_ip", "must be an IP address"},
		{"local endpoint missing", submv1.GatewayResource, gateway,
			map[string]any{"haStatus": "active"},
			"status.localEndpoint", "Required value"},
		{"condition status not True, False or Unknown", submv1.GlobalIngressIPResource, giip,
			submv1.GlobalIngressIPStatus{Conditions: []metav1.Condition{func() metav1.Condition { c := condition; c.Status = "Yes"; return c }()}},
			"status.conditions[0].status", `supported values: "True", "False", "Unknown"`},
		{"condition without reason", submv1.GlobalIngressIPResource, giip,
			submv1.GlobalIngressIPStatus{Conditions: []metav1.Condition{func() metav1.Condition { c := condition; c.Reason = ""; return c }()}},
			"status.conditions[0].reason", "should be at least 1 chars long"},
		{"allocatedIP not an IP", submv1.GlobalIngressIPResource, giip,
			submv1.GlobalIngressIPStatus{AllocatedIP: "242.1.0.300"},
			"status.allocatedIP", "must be an IP address"},
	} {
		t.Run("refuses "+c.name, func(t *testing.T) {
			r := resource(dc, c.resource, ns)
			created, err := r.Create(t.Context(), c.obj, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Delete(context.Background(), c.obj.GetName(), metav1.DeleteOptions{}) })
			if created.Object["status"], err = toMap(c.status); err != nil {
				t.Fatal(err)
			}
			_, err = r.UpdateStatus(t.Context(), created, metav1.UpdateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want an Invalid error naming %s", err, c.field)
			}
			if msg := err.Error(); !strings.Contains(msg, c.field+":") || !strings.Contains(msg, c.hint) {
				t.Errorf("the error does not name %s and say %q: %v", c.field, c.hint, msg)
			}
		})
	}
}

// testDefaults creates egress pools that leave their size out.
func testDefaults(t *testing.T, dc dynamic.Interface, ns string) {
	for _, c := range []struct {
		resource schema.GroupVersionResource
		obj      *unstructured.Unstructured
		field    string
		want     int64
	}{
		{submv1.ClusterGlobalEgressIPResource, mustUnstructured(t, &submv1.ClusterGlobalEgressIP{ObjectMeta: metav1.ObjectMeta{Name: submv1.ClusterGlobalEgressIPName}}, "ClusterGlobalEgressIP"), "numGlobalIPs", submv1.DefaultClusterEgressIPs},
		{submv1.GlobalEgressIPResource, mustUnstructured(t, &submv1.GlobalEgressIP{ObjectMeta: metav1.ObjectMeta{Name: "billing"}}, "GlobalEgressIP"), "numberOfIPs", 1},
	} {
		for _, withSpec := range []bool{true, false} {
			name := c.obj.GetKind() + " with an empty spec"
			obj := c.obj.DeepCopy()
			if !withSpec {
				name = c.obj.GetKind() + " without spec"
				delete(obj.Object, "spec")
			}
			t.Run(name, func(t *testing.T) {
				r := resource(dc, c.resource, ns)
				if _, err := r.Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = r.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
				got, err := r.Get(t.Context(), obj.GetName(), metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if n, ok, _ := unstructured.NestedInt64(got.Object, "spec", c.field); !ok || n != c.want {
					t.Errorf("spec.%s read back as %d (set %v), want the default %d", c.field, n, ok, c.want)
				}
			})
		}
	}
}

// testPrinterColumns lists objects as kubectl get does, in a Table, and
// checks the columns that matter to a user.
func testPrinterColumns(t *testing.T, kc kubernetes.Interface, dc dynamic.Interface, ns string) {
	ep := validEndpoint()
	ep.Name = "ep-columns"
	ep.Spec.PublicIP = "198.51.100.7"
	gw := &submv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "c1-gateway"}}
	gwStatus := submv1.GatewayStatus{HAStatus: submv1.HAStatusActive, LocalEndpoint: ep.Spec}
	cg := &submv1.ClusterGlobalEgressIP{ObjectMeta: metav1.ObjectMeta{Name: "cgeip-columns"}}
	cgStatus := submv1.GlobalEgressIPStatus{AllocatedIPs: []string{"242.1.0.1", "242.1.0.2"}}
	gi := &submv1.GlobalIngressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "giip-columns"},
		Spec:       submv1.GlobalIngressIPSpec{Target: submv1.ClusterIPService, ServiceRef: &corev1.LocalObjectReference{Name: "web"}},
	}
	giStatus := submv1.GlobalIngressIPStatus{AllocatedIP: "242.1.0.20"}
	c := validCluster()
	c.Name = "cluster-columns"
	c.Spec.ClusterCIDR = []string{"10.8.0.0/16", "fd00:8::/64"}

	create := func(r schema.GroupVersionResource, u *unstructured.Unstructured, status any) {
		t.Helper()
		created, err := resource(dc, r, ns).Create(t.Context(), u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if status == nil {
			return
		}
		m, err := toMap(status)
		if err != nil {
			t.Fatal(err)
		}
		created.Object["status"] = m
		if _, err := resource(dc, r, ns).UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(submv1.ClusterResource, mustUnstructured(t, c, "Cluster"), nil)
	create(submv1.EndpointResource, mustUnstructured(t, ep, "Endpoint"), nil)
	create(submv1.GatewayResource, mustUnstructured(t, gw, "Gateway"), gwStatus)
	create(submv1.ClusterGlobalEgressIPResource, mustUnstructured(t, cg, "ClusterGlobalEgressIP"), cgStatus)
	create(submv1.GlobalIngressIPResource, mustUnstructured(t, gi, "GlobalIngressIP"), giStatus)

	for _, tc := range []struct {
		resource schema.GroupVersionResource
		name     string
		want     map[string]string // column → cell
	}{
		{submv1.ClusterResource, c.Name, map[string]string{"Cluster ID": "c1", "Pod CIDRs": `["10.8.0.0/16","fd00:8::/64"]`, "Global CIDRs": `["242.1.0.0/16"]`}},
		{submv1.EndpointResource, ep.Name, map[string]string{"Cluster ID": "c1", "Backend": "wireguard", "Private IP": "172.18.0.5", "Public IP": "198.51.100.7", "Hostname": "c1-worker"}},
		{submv1.GatewayResource, gw.Name, map[string]string{"HA Status": "active", "Cluster ID": "c1", "Backend": "wireguard", "Public IP": "198.51.100.7"}},
		{submv1.ClusterGlobalEgressIPResource, cg.Name, map[string]string{"Requested": "8", "Allocated IPs": `["242.1.0.1","242.1.0.2"]`}},
		{submv1.GlobalIngressIPResource, gi.Name, map[string]string{"IP": "242.1.0.20", "Target": "ClusterIPService", "Service": "web"}},
	} {
		t.Run(tc.resource.Resource, func(t *testing.T) {
			got := tableRow(t, kc, tc.resource, ns, tc.name)
			for col, want := range tc.want {
				if got[col] != want {
					t.Errorf("column %q shows %q, want %q (row %v)", col, got[col], want, got)
				}
			}
		})
	}
}

// tableRow gets one object as a server-side Table, the way kubectl get
// asks for it, and returns its cells by column name.
func tableRow(t *testing.T, kc kubernetes.Interface, r schema.GroupVersionResource, ns, name string) map[string]string {
	t.Helper()
	path := "/apis/" + r.Group + "/" + r.Version + "/"
	if r != submv1.ClusterGlobalEgressIPResource {
		path += "namespaces/" + ns + "/"
	}
	raw, err := kc.CoreV1().RESTClient().Get().AbsPath(path+r.Resource, name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		Param("includeObject", "None").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("table of %s/%s has %d rows, want 1", r.Resource, name, len(table.Rows))
	}
	row := map[string]string{}
	for i, col := range table.ColumnDefinitions {
		if i < len(table.Rows[0].Cells) {
			switch v := table.Rows[0].Cells[i].(type) {
			case string:
				row[col.Name] = v
			case nil:
				row[col.Name] = ""
			default:
				row[col.Name] = toJSON(v)
			}
		}
	}
	return row
}

// testMCS creates a ServiceExport and a ServiceImport through the MCS
// API's typed client and reads them back.
func testMCS(t *testing.T, mc mcsclient.Interface, ns string) {
	ctx := t.Context()
	se := &mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}}
	if _, err := mc.MulticlusterV1alpha1().ServiceExports(ns).Create(ctx, se, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a ServiceExport: %v", err)
	}
	gotSE, err := mc.MulticlusterV1alpha1().ServiceExports(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the ServiceExport back: %v", err)
	}
	if gotSE.Name != "web" || gotSE.UID == "" {
		t.Errorf("ServiceExport read back as %s (uid %q)", gotSE.Name, gotSE.UID)
	}

	si := &mcsv1alpha1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: mcsv1alpha1.ServiceImportSpec{
			Type:  mcsv1alpha1.ClusterSetIP,
			Ports: []mcsv1alpha1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
			IPs:   []string{"10.88.0.10"},
		},
	}
	if _, err := mc.MulticlusterV1alpha1().ServiceImports(ns).Create(ctx, si, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a ServiceImport: %v", err)
	}
	gotSI, err := mc.MulticlusterV1alpha1().ServiceImports(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the ServiceImport back: %v", err)
	}
	if !reflect.DeepEqual(gotSI.Spec, si.Spec) {
		t.Errorf("ServiceImport spec read back as %+v, want %+v", gotSI.Spec, si.Spec)
	}
}

// resource is the dynamic client of r, in ns if r is namespaced.
func resource(dc dynamic.Interface, r schema.GroupVersionResource, ns string) dynamic.ResourceInterface {
	if r == submv1.ClusterGlobalEgressIPResource {
		return dc.Resource(r)
	}
	return dc.Resource(r).Namespace(ns)
}

func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
