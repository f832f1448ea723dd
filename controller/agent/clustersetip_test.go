package agent

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/gateway"
)

// testClustersetIP runs after testRemotes, with c1's and c2's agents
// active. Join gave c1 and c2 the first two /20s of the broker's default
// clusterset IP range; a service c2 exports with a clusterset IP reaches
// c1's data plane with c2's ClusterIP as its backend, c1 exporting it too
// adds c1's, and unexporting both withdraws the VIP.
func testClustersetIP(t *testing.T, e *env) {
	ctx := t.Context()
	c1 := e.active["c1"]
	want := map[string]netip.Addr{"c1": netip.MustParseAddr("243.0.0.1"), "c2": netip.MustParseAddr("243.0.16.1")}
	for id, snat := range want {
		r := e.active[id]
		eventually(t, settle, id+"'s data plane has the clusterset IP range and its gateway's own address", func() (bool, string) {
			s := r.dp.lastSpec()
			if s == nil || s.ClustersetIP == nil {
				return false, "no clusterset IP section"
			}
			cs := s.ClustersetIP
			return cs.CIDR == netip.MustParsePrefix("243.0.0.0/8") && cs.SNATAddr == snat,
				fmt.Sprintf("CIDR %s SNAT %s, want 243.0.0.0/8 and %s", cs.CIDR, cs.SNATAddr, snat)
		})
	}

	const ns, name = "csip", "web"
	clusterIPs := map[string]netip.Addr{}
	for _, srv := range []*kubelocal.Server{e.c1, e.c2} {
		kc, err := srv.Client()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", srv.Name, err)
		}
		svc, err := kc.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		clusterIPs[srv.Name] = netip.MustParseAddr(svc.Spec.ClusterIP)
		port := int32(8080)
		if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-abcde", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.8.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: &port, Protocol: new(corev1.ProtocolTCP)}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	export := func(srv *kubelocal.Server) {
		t.Helper()
		mcs, err := mcsclient.NewForConfig(srv.Config())
		if err != nil {
			t.Fatal(err)
		}
		se := &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Annotations: map[string]string{api.UseClustersetIPAnnotation: "true"}}}
		if _, err := mcs.MulticlusterV1alpha1().ServiceExports(ns).Create(ctx, se, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	unexport := func(srv *kubelocal.Server) {
		t.Helper()
		mcs, err := mcsclient.NewForConfig(srv.Config())
		if err != nil {
			t.Fatal(err)
		}
		if err := mcs.MulticlusterV1alpha1().ServiceExports(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	keyFile := filepath.Join(t.TempDir(), "wg.key")
	services := func(want ...gateway.ClustersetService) func() (bool, string) {
		return func() (bool, string) {
			s := c1.dp.lastSpec()
			if s == nil || s.ClustersetIP == nil {
				return false, "no clusterset IP section"
			}
			got := s.ClustersetIP.Services
			if !reflect.DeepEqual(got, want) {
				return false, fmt.Sprintf("services %+v, want %+v", got, want)
			}
			// The recorder's spec lacks the key file a gateway node's
			// settings name; the rest is the gateway's to refuse.
			v := *s
			v.Transport.WireGuard = &gateway.WireGuardSpec{PrivateKeyFile: keyFile}
			if err := v.Validate(); err != nil {
				return false, "the gateway refuses the spec: " + err.Error()
			}
			return true, ""
		}
	}
	vip := netip.MustParseAddr("243.0.16.2")
	http := []gateway.ClustersetPort{{Proto: 6, Port: 80}}

	export(e.c2)
	eventually(t, settle, "c1's data plane carries c2's VIP to c2's ClusterIP", services(gateway.ClustersetService{
		VIP: vip, Ports: http, Backends: []gateway.ClustersetBackend{{Cluster: "c2", Addr: clusterIPs["c2"]}},
	}))
	export(e.c1)
	eventually(t, settle, "c1's data plane adds its own ClusterIP as a backend", services(gateway.ClustersetService{
		VIP: vip, Ports: http, Backends: []gateway.ClustersetBackend{{Cluster: "c1", Addr: clusterIPs["c1"]}, {Cluster: "c2", Addr: clusterIPs["c2"]}},
	}))
	unexport(e.c2)
	unexport(e.c1)
	eventually(t, settle, "c1's data plane drops the VIP once nobody exports it", services())
}
