package agent

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/snorkel-net/snorkel/controller/api"
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
		eventually(t, settle, id+"'s data plane has the IPAM's cluster egress IPs", func() (bool, string) {
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
	eventually(t, settle, "c2's data plane has a global ingress IP for the ClusterIP "+svc.Spec.ClusterIP, func() (bool, string) {
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
	eventually(t, settle, "c1 imports sample/web at its global IP", func() (bool, string) {
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

	// The agents' registries carry the service sync's and the IPAM's
	// metrics under Submariner's names.
	for _, w := range []struct {
		r      *runningAgent
		metric string
	}{
		{g2, "submariner_service_export"},
		{g1, "submariner_service_import"},
		{g2, "submariner_global_ingress_IP_allocated"},
		{g1, "submariner_cluster_global_egress_IP_allocated"},
	} {
		eventually(t, settle, w.r.cfg.Member.ClusterID+"'s registry has "+w.metric, func() (bool, string) {
			fams, err := w.r.metrics.Gather()
			if err != nil {
				return false, err.Error()
			}
			for _, f := range fams {
				if f.GetName() == w.metric {
					return true, ""
				}
			}
			return false, "no " + w.metric
		})
	}
}

// globalIPs are the addresses a data plane configuration gives out: the
// cluster egress IPs and each ingress entry's, by entry.
func globalIPs(cfg gateway.Config) (egress []string, ingress map[string]string) {
	ingress = map[string]string{}
	if cfg.Globalnet == nil {
		return nil, ingress
	}
	for _, in := range cfg.Globalnet.Ingress {
		ingress[in.Name] = in.GlobalIP
	}
	return cfg.Globalnet.ClusterEgress.IPs, ingress
}

// testFailoverKeepsGlobalIPs stops c2's active gateway: the gateway that
// takes over configures its data plane with the same global IPs, because
// its IPAM reads the allocations back from the objects' status.
func testFailoverKeepsGlobalIPs(t *testing.T, e *env) {
	old := e.active["g2"]
	cfg, _ := old.dp.last()
	egress, ingress := globalIPs(cfg)
	if len(egress) == 0 || len(ingress) == 0 {
		t.Fatalf("c2's data plane gives out no global IPs before the failover: %+v", cfg.Globalnet)
	}
	old.halt()
	next := start(t, e, e.c2, old.cfg.Member, "gw-g2-next", "127.0.0.24", "")
	eventually(t, settle, "the next gateway of c2 configured with the same global IPs", func() (bool, string) {
		cfg, n := next.dp.last()
		if n == 0 || len(cfg.Remotes) == 0 {
			return false, "not configured yet"
		}
		e2, in2 := globalIPs(cfg)
		return slices.Equal(e2, egress) && reflect.DeepEqual(in2, ingress),
			fmt.Sprintf("egress %v ingress %v; before the failover egress %v ingress %v", e2, in2, egress, ingress)
	})
	e.active["g2"] = next
}

// testDeadLeader leaves c1's Lease held by a gateway that no longer
// renews it, as one that crashed would: a new gateway stays passive while
// the lease can still be the dead one's, then takes over.
func testDeadLeader(t *testing.T, e *env) {
	ctx := t.Context()
	prev := e.active["g1"]
	prev.halt()
	kc, err := e.c1.Client()
	if err != nil {
		t.Fatal(err)
	}
	leases := kc.CoordinationV1().Leases(api.AgentNamespace)
	l, err := leases.Get(ctx, DefaultLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NowMicro()
	secs := int32(DefaultLeaseDuration / time.Second)
	l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime, l.Spec.LeaseDurationSeconds = new("gw-crashed"), &now, &now, &secs
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	next := start(t, e, e.c1, prev.cfg.Member, "gw-g1-next", "127.0.0.14", "")
	// A candidate counts the lease duration from when it first sees the
	// holder; a second of slack covers the test's own steps.
	for time.Since(started) < DefaultLeaseDuration-time.Second {
		if next.Active() {
			t.Fatalf("gw-g1-next became active %v after starting, while the crashed gateway's lease (%v) could still be valid", time.Since(started), DefaultLeaseDuration)
		}
		time.Sleep(10 * time.Millisecond)
	}
	eventually(t, settle, "gw-g1-next active after the crashed gateway's lease expired", func() (bool, string) {
		return next.Active(), "still passive"
	})
	eventually(t, settle, "gw-g1-next's data plane configured", func() (bool, string) {
		cfg, n := next.dp.last()
		return n > 0 && len(cfg.Remotes) == 1, fmt.Sprintf("%d configurations, remotes %+v", n, cfg.Remotes)
	})
	e.active["g1"] = next
}
