package v1_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/deploy"
)

const ns = "submariner-operator"

func endpointSpec(cluster, ip string) submv1.EndpointSpec {
	return submv1.EndpointSpec{
		ClusterID:     cluster,
		CableName:     "submariner-cable-" + cluster + "-" + strings.ReplaceAll(ip, ".", "-"),
		HealthCheckIP: "10.8.255.254",
		Hostname:      cluster + "-worker",
		Subnets:       []string{"10.8.0.0/16", "10.88.0.0/16", "fd00:8::/64"},
		PrivateIP:     ip,
		PublicIP:      "198.51.100.7",
		NATEnabled:    true,
		Backend:       "wireguard",
		BackendConfig: map[string]string{"udp-port": "4500", "natt-discovery-port": "4490"},
	}
}

// conditions are as a status writer sets them; metav1.Unix keeps the
// location a read-back time gets, so that DeepEqual compares the instant.
func conditions(reason string) []metav1.Condition {
	return []metav1.Condition{{
		Type:               submv1.GlobalEgressIPAllocated,
		Status:             metav1.ConditionTrue,
		ObservedGeneration: 1,
		LastTransitionTime: metav1.Unix(1780000000, 0),
		Reason:             reason,
		Message:            "allocated from 242.1.0.0/16",
	}}
}

func fullCluster() *submv1.Cluster {
	return &submv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: ns},
		Spec: submv1.ClusterSpec{
			ClusterID:   "c1",
			ColorCodes:  []string{"blue"},
			ServiceCIDR: []string{"10.88.0.0/16"},
			ClusterCIDR: []string{"10.8.0.0/16"},
			GlobalCIDR:  []string{"242.1.0.0/16"},
		},
	}
}

func fullEndpoint() *submv1.Endpoint {
	return &submv1.Endpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "c1-submariner-cable-c1-172-18-0-5", Namespace: ns},
		Spec:       endpointSpec("c1", "172.18.0.5"),
	}
}

func gatewayStatus(ha submv1.HAStatus, conn submv1.ConnectionStatus) submv1.GatewayStatus {
	return submv1.GatewayStatus{
		Version:       "v0.1.0",
		HAStatus:      ha,
		LocalEndpoint: endpointSpec("c1", "172.18.0.5"),
		StatusFailure: "",
		Connections: []submv1.Connection{{
			Status:        conn,
			StatusMessage: "handshake completed",
			Endpoint:      endpointSpec("c2", "172.18.0.6"),
			UsingIP:       "198.51.100.8",
			UsingNAT:      true,
			LatencyRTT:    &submv1.LatencyRTTSpec{Last: "1.2ms", Min: "850µs", Average: "1.1ms", Max: "2ms", StdDev: "200µs"},
		}},
	}
}

func fullGateway() *submv1.Gateway {
	return &submv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "c1-worker", Namespace: ns},
		Status:     gatewayStatus(submv1.HAStatusActive, submv1.Connected),
	}
}

func fullClusterGlobalEgressIP() *submv1.ClusterGlobalEgressIP {
	n := 3
	return &submv1.ClusterGlobalEgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: submv1.ClusterGlobalEgressIPName},
		Spec:       submv1.ClusterGlobalEgressIPSpec{NumberOfIPs: &n},
		Status: submv1.GlobalEgressIPStatus{
			Conditions:   conditions("Success"),
			AllocatedIPs: []string{"242.1.0.1", "242.1.0.2", "242.1.0.3"},
		},
	}
}

func fullGlobalEgressIP() *submv1.GlobalEgressIP {
	n := 2
	return &submv1.GlobalEgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "billing-db", Namespace: ns},
		Spec: submv1.GlobalEgressIPSpec{
			NumberOfIPs: &n,
			PodSelector: &metav1.LabelSelector{
				MatchLabels:      map[string]string{"app": "db"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}},
			},
		},
		Status: submv1.GlobalEgressIPStatus{
			Conditions:   conditions("Success"),
			AllocatedIPs: []string{"242.1.1.1", "242.1.1.2"},
		},
	}
}

func fullGlobalIngressIP() *submv1.GlobalIngressIP {
	return &submv1.GlobalIngressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-db-0", Namespace: ns},
		Spec: submv1.GlobalIngressIPSpec{
			Target:     submv1.HeadlessServicePod,
			ServiceRef: &corev1.LocalObjectReference{Name: "db"},
			PodRef:     &corev1.LocalObjectReference{Name: "db-0"},
		},
		Status: submv1.GlobalIngressIPStatus{
			Conditions:  conditions("Success"),
			AllocatedIP: "242.1.0.21",
		},
	}
}

// TestConvert checks that ToUnstructured names the API version and kind
// and that FromUnstructured gives the object back unchanged.
func TestConvert(t *testing.T) {
	t.Run("Cluster", func(t *testing.T) { testConvert(t, fullCluster(), "Cluster") })
	t.Run("Endpoint", func(t *testing.T) { testConvert(t, fullEndpoint(), "Endpoint") })
	t.Run("Gateway", func(t *testing.T) { testConvert(t, fullGateway(), "Gateway") })
	t.Run("ClusterGlobalEgressIP", func(t *testing.T) { testConvert(t, fullClusterGlobalEgressIP(), "ClusterGlobalEgressIP") })
	t.Run("GlobalEgressIP", func(t *testing.T) { testConvert(t, fullGlobalEgressIP(), "GlobalEgressIP") })
	t.Run("GlobalIngressIP", func(t *testing.T) { testConvert(t, fullGlobalIngressIP(), "GlobalIngressIP") })
}

func testConvert[T submv1.Object](t *testing.T, obj *T, kind string) {
	u, err := submv1.ToUnstructured(obj, kind)
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAPIVersion() != "submariner.io/v1" || u.GetKind() != kind {
		t.Errorf("ToUnstructured gave %s %s, want submariner.io/v1 %s", u.GetAPIVersion(), u.GetKind(), kind)
	}
	back, err := submv1.FromUnstructured[T](u)
	if err != nil {
		t.Fatal(err)
	}
	want := *obj
	reflect.ValueOf(&want).Elem().FieldByName("TypeMeta").Set(reflect.ValueOf(metav1.TypeMeta{APIVersion: "submariner.io/v1", Kind: kind}))
	if !reflect.DeepEqual(*back, want) {
		t.Errorf("FromUnstructured(ToUnstructured(x)) differs from x:\n got %+v\nwant %+v", *back, want)
	}
}

// TestFromUnstructuredNamesTheObject checks that a conversion error says
// which object could not be read.
func TestFromUnstructuredNamesTheObject(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "submariner.io/v1",
		"kind":       "GlobalEgressIP",
		"metadata":   map[string]any{"name": "billing", "namespace": "shop"},
		"spec":       map[string]any{"numberOfIPs": "two"},
	}}
	_, err := submv1.FromUnstructured[submv1.GlobalEgressIP](u)
	if err == nil || !strings.Contains(err.Error(), "GlobalEgressIP shop/billing") {
		t.Errorf("got %v, want an error naming GlobalEgressIP shop/billing", err)
	}
}

// TestThroughAPIServer stores each type in a real API server with the
// CRDs applied: every field survives the trip, and the types with a status
// subresource keep spec and status apart.
func TestThroughAPIServer(t *testing.T) {
	srv := kubetest.Start(t, kubelocal.Options{Name: "c1"})[0]
	ctx := t.Context()
	kc, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := deploy.ApplyCRDs(ctx, srv.Config(), false); err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("round trip Cluster", func(t *testing.T) {
		want := fullCluster()
		got := store(t, dc.Resource(submv1.ClusterResource).Namespace(ns), want, "Cluster", false)
		if !reflect.DeepEqual(got.Spec, want.Spec) {
			t.Errorf("spec read back as %+v, want %+v", got.Spec, want.Spec)
		}
	})
	t.Run("round trip Endpoint", func(t *testing.T) {
		want := fullEndpoint()
		got := store(t, dc.Resource(submv1.EndpointResource).Namespace(ns), want, "Endpoint", false)
		if !reflect.DeepEqual(got.Spec, want.Spec) {
			t.Errorf("spec read back as %+v, want %+v", got.Spec, want.Spec)
		}
	})
	t.Run("round trip Gateway", func(t *testing.T) {
		want := fullGateway()
		got := store(t, dc.Resource(submv1.GatewayResource).Namespace(ns), want, "Gateway", true)
		if !reflect.DeepEqual(got.Status, want.Status) {
			t.Errorf("status read back as %+v, want %+v", got.Status, want.Status)
		}
	})
	t.Run("round trip ClusterGlobalEgressIP", func(t *testing.T) {
		want := fullClusterGlobalEgressIP()
		got := store(t, dc.Resource(submv1.ClusterGlobalEgressIPResource), want, "ClusterGlobalEgressIP", true)
		if !reflect.DeepEqual(got.Spec, want.Spec) || !reflect.DeepEqual(got.Status, want.Status) {
			t.Errorf("read back as %+v %+v, want %+v %+v", got.Spec, got.Status, want.Spec, want.Status)
		}
	})
	t.Run("round trip GlobalEgressIP", func(t *testing.T) {
		want := fullGlobalEgressIP()
		got := store(t, dc.Resource(submv1.GlobalEgressIPResource).Namespace(ns), want, "GlobalEgressIP", true)
		if !reflect.DeepEqual(got.Spec, want.Spec) || !reflect.DeepEqual(got.Status, want.Status) {
			t.Errorf("read back as %+v %+v, want %+v %+v", got.Spec, got.Status, want.Spec, want.Status)
		}
	})
	t.Run("round trip GlobalIngressIP", func(t *testing.T) {
		want := fullGlobalIngressIP()
		got := store(t, dc.Resource(submv1.GlobalIngressIPResource).Namespace(ns), want, "GlobalIngressIP", true)
		if !reflect.DeepEqual(got.Spec, want.Spec) || !reflect.DeepEqual(got.Status, want.Status) {
			t.Errorf("read back as %+v %+v, want %+v %+v", got.Spec, got.Status, want.Spec, want.Status)
		}
	})

	t.Run("status subresource Gateway", func(t *testing.T) {
		first := fullGateway()
		first.Name = "c1-worker-2"
		second := *first
		second.Status = gatewayStatus(submv1.HAStatusPassive, submv1.ConnectionError)
		testStatusSubresource(t, dc.Resource(submv1.GatewayResource).Namespace(ns), first, &second, "Gateway",
			func(g *submv1.Gateway) any { return g.Status })
	})
	t.Run("status subresource ClusterGlobalEgressIP", func(t *testing.T) {
		first := fullClusterGlobalEgressIP()
		first.Name = "second-pool"
		second := *first
		second.Status = submv1.GlobalEgressIPStatus{Conditions: conditions("Reallocated"), AllocatedIPs: []string{"242.1.0.9"}}
		testStatusSubresource(t, dc.Resource(submv1.ClusterGlobalEgressIPResource), first, &second, "ClusterGlobalEgressIP",
			func(c *submv1.ClusterGlobalEgressIP) any { return c.Status })
	})
	t.Run("status subresource GlobalEgressIP", func(t *testing.T) {
		first := fullGlobalEgressIP()
		first.Name = "billing-web"
		second := *first
		second.Status = submv1.GlobalEgressIPStatus{Conditions: conditions("Reallocated"), AllocatedIPs: []string{"242.1.1.9"}}
		testStatusSubresource(t, dc.Resource(submv1.GlobalEgressIPResource).Namespace(ns), first, &second, "GlobalEgressIP",
			func(g *submv1.GlobalEgressIP) any { return g.Status })
	})
	t.Run("status subresource GlobalIngressIP", func(t *testing.T) {
		first := fullGlobalIngressIP()
		first.Name = "pod-db-1"
		second := *first
		second.Status = submv1.GlobalIngressIPStatus{Conditions: conditions("Reallocated"), AllocatedIP: "242.1.0.22"}
		testStatusSubresource(t, dc.Resource(submv1.GlobalIngressIPResource).Namespace(ns), first, &second, "GlobalIngressIP",
			func(g *submv1.GlobalIngressIP) any { return g.Status })
	})
}

// store creates obj and, for a type with a status subresource, writes its
// status through UpdateStatus (create ignores it); it returns what the
// server then holds.
func store[T submv1.Object](t *testing.T, r dynamic.ResourceInterface, obj *T, kind string, hasStatus bool) *T {
	t.Helper()
	ctx := t.Context()
	u, err := submv1.ToUnstructured(obj, kind)
	if err != nil {
		t.Fatal(err)
	}
	created, err := r.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s %s: %v", kind, u.GetName(), err)
	}
	t.Cleanup(func() { _ = r.Delete(context.Background(), u.GetName(), metav1.DeleteOptions{}) })
	if hasStatus {
		if _, ok := created.Object["status"]; ok {
			t.Errorf("create kept the status of %s %s: %v", kind, u.GetName(), created.Object["status"])
		}
		created.Object["status"] = u.Object["status"]
		if _, err := r.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("writing the status of %s %s: %v", kind, u.GetName(), err)
		}
	}
	got, err := r.Get(ctx, u.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := submv1.FromUnstructured[T](got)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testStatusSubresource stores first, then sends second's status with an
// Update, which must change the labels it carries but not the status, and
// with an UpdateStatus, which must change the status.
func testStatusSubresource[T submv1.Object](t *testing.T, r dynamic.ResourceInterface, first, second *T, kind string, status func(*T) any) {
	ctx := t.Context()
	stored := store(t, r, first, kind, true)
	if !reflect.DeepEqual(status(stored), status(first)) {
		t.Fatalf("status read back as %+v, want %+v", status(stored), status(first))
	}
	secondU, err := submv1.ToUnstructured(second, kind)
	if err != nil {
		t.Fatal(err)
	}
	read := func() *T {
		t.Helper()
		u, err := r.Get(ctx, secondU.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, err := submv1.FromUnstructured[T](u)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	u, err := r.Get(ctx, secondU.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.SetLabels(map[string]string{"snorkel.test/updated": "yes"})
	u.Object["status"] = secondU.Object["status"]
	updated, err := r.Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if updated.GetLabels()["snorkel.test/updated"] != "yes" {
		t.Errorf("update did not change the labels: %v", updated.GetLabels())
	}
	if got := read(); !reflect.DeepEqual(status(got), status(first)) {
		t.Errorf("an update of the main resource changed the status to %+v, want it kept as %+v", status(got), status(first))
	}

	updated.Object["status"] = secondU.Object["status"]
	if _, err := r.UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status: %v", err)
	}
	if got := read(); !reflect.DeepEqual(status(got), status(second)) {
		t.Errorf("UpdateStatus left the status at %+v, want %+v", status(got), status(second))
	}
}
