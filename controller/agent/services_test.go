package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/servicesync"
	"github.com/snorkel-net/snorkel/gateway"
)

// testGlobalnetServices runs after testGlobalnet, with its agents active:
// the IPAM's cluster egress IPs reach the data plane, and a service
// exported in c2 gets a global ingress IP in c2's data plane and is
// imported into c1 at that address.
func testGlobalnetServices(t *testing.T, e *env) {
	g1, g2 := e.active["g1"], e.active["g2"]
	for _, r := range []*runningAgent{g1, g2} {
		id := r.cfg.Member.ClusterID
		eventually(t, 10*time.Second, id+"'s data plane has the IPAM's cluster egress IPs", func() (bool, string) {
			cfg, _ := r.dp.last()
			if cfg.Globalnet == nil {
				return false, "no Globalnet section"
			}
			ips := cfg.Globalnet.ClusterEgress.IPs
			if len(ips) != gateway.DefaultClusterEgressIPs {
				return false, fmt.Sprintf("cluster egress %+v", cfg.Globalnet.ClusterEgress)
			}
			return true, ""
		})
	}

	ctx := t.Context()
	const ns, name = "sample", "web"
	for _, srv := range []*kubelocal.Server{e.c1, e.c2} {
		kc, err := srv.Client()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", srv.Name, err)
		}
	}
	kc2, err := e.c2.Client()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := kc2.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port := int32(8080)
	if _, err := kc2.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-abcde", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.8.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: &port, Protocol: new(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mcs2, err := mcsclient.NewForConfig(e.c2.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mcs2.MulticlusterV1alpha1().ServiceExports(ns).Create(ctx, &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var global string
	eventually(t, 10*time.Second, "c2's data plane has a global ingress IP for the ClusterIP "+svc.Spec.ClusterIP, func() (bool, string) {
		cfg, _ := g2.dp.last()
		if cfg.Globalnet == nil {
			return false, "no Globalnet section"
		}
		for _, in := range cfg.Globalnet.Ingress {
			if in.Kind == gateway.IngressKindService && in.LocalIP == svc.Spec.ClusterIP {
				global = in.GlobalIP
				cidr := netip.MustParsePrefix(g2.cfg.Member.GlobalCIDR)
				a, err := netip.ParseAddr(global)
				return err == nil && cidr.Contains(a), fmt.Sprintf("global IP %q outside %s", global, cidr)
			}
		}
		return false, fmt.Sprintf("ingress %+v", cfg.Globalnet.Ingress)
	})

	kc1, err := e.c1.Client()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "c1 imports sample/web at its global IP", func() (bool, string) {
		l, err := kc1.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
			LabelSelector: servicesync.LabelSourceCluster + "=c2," + servicesync.LabelServiceName + "=" + name,
		})
		if err != nil {
			return false, err.Error()
		}
		var addrs []string
		for _, s := range l.Items {
			for _, ep := range s.Endpoints {
				addrs = append(addrs, ep.Addresses...)
			}
		}
		return slices.Equal(addrs, []string{global}), fmt.Sprintf("addresses %v, want [%s]", addrs, global)
	})
}
