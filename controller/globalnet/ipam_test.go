package globalnet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/deploy"
	"github.com/snorkel-net/snorkel/natengine"
)

const remoteGlobal = "242.2.0.0/16"

var (
	svcResource = corev1.SchemeGroupVersion.WithResource("services")
	cgeip       = v1.ClusterGlobalEgressIPResource
	geip        = v1.GlobalEgressIPResource
	giip        = v1.GlobalIngressIPResource
)

// TestIPAM runs the IPAM against one real API server; the subtests build
// on each other's objects, in order.
func TestIPAM(t *testing.T) {
	servers := kubetest.Start(t, kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"})
	must(t, deploy.ApplyCRDs(ctx, servers[0].Config(), false))
	c := newCluster(t, servers[0].Config())
	ipam := startIPAM(t, c, "242.1.0.0/16", netip.MustParsePrefix(remoteGlobal))
	c.namespace(t, "billing")
	c.namespace(t, "plain")
	c.namespace(t, "shop")

	t.Run("cluster egress: created with 8 IPs, resized to 3 and 0", func(t *testing.T) {
		ips := c.allocated(t, cgeip, "", v1.ClusterGlobalEgressIPName, 8)
		if want := rangeOf("242.1.0.1", 8); !slices.Equal(ips, want) {
			t.Fatalf("cluster egress IPs %v, want the first 8 of the global CIDR %v", ips, want)
		}
		eventually(t, "rules carry the 8 cluster egress IPs", func() error {
			if got := ipam.last().ClusterEgress; !slices.Equal(got, addrs(ips...)) {
				return fmt.Errorf("Rules.ClusterEgress %v", got)
			}
			return nil
		})

		c.patch(t, cgeip, "", v1.ClusterGlobalEgressIPName, `{"spec":{"numGlobalIPs":3}}`, false)
		eventually(t, "3 cluster egress IPs in status and rules", func() error {
			a, err := c.allocation(cgeip, "", v1.ClusterGlobalEgressIPName)
			if err != nil {
				return err
			}
			want := rangeOf("242.1.0.1", 3)
			if !slices.Equal(a.ips, want) || !slices.Equal(ipam.last().ClusterEgress, addrs(want...)) {
				return fmt.Errorf("status %v, rules %v; want %v", a.ips, ipam.last().ClusterEgress, want)
			}
			return nil
		})

		c.patch(t, cgeip, "", v1.ClusterGlobalEgressIPName, `{"spec":{"numGlobalIPs":0}}`, false)
		cond := c.refused(t, cgeip, "", v1.ClusterGlobalEgressIPName, reasonZeroInput)
		if cond.Message != "The specified NumberOfIPs is 0" {
			t.Errorf("ZeroInput message %q", cond.Message)
		}
		eventually(t, "no cluster egress IPs in the rules", func() error {
			if got := ipam.last().ClusterEgress; len(got) != 0 {
				return fmt.Errorf("Rules.ClusterEgress %v", got)
			}
			return nil
		})

		other := &unstructured.Unstructured{}
		other.SetAPIVersion(v1.Group + "/" + v1.Version)
		other.SetKind("ClusterGlobalEgressIP")
		other.SetName("mine")
		other.Object["spec"] = map[string]any{"numGlobalIPs": int64(2)}
		c.create(t, cgeip, other)
		cond = c.refused(t, cgeip, "", "mine", reasonInvalidInstance)
		if !strings.Contains(cond.Message, v1.ClusterGlobalEgressIPName) {
			t.Errorf("InvalidInstance message %q does not name %s", cond.Message, v1.ClusterGlobalEgressIPName)
		}
		c.delete(t, cgeip, "", "mine")

		c.delete(t, cgeip, "", v1.ClusterGlobalEgressIPName)
		if ips := c.allocated(t, cgeip, "", v1.ClusterGlobalEgressIPName, 8); !slices.Equal(ips, rangeOf("242.1.0.1", 8)) {
			t.Fatalf("cluster egress IPs after the object was deleted and made again: %v", ips)
		}
	})

	t.Run("allocation gauges under Submariner's names, labelled with the global CIDR", func(t *testing.T) {
		const cidr = "242.1.0.0/16"
		total := natengine.NewAddrPool(netip.MustParsePrefix(cidr)).Free()
		want := func(what string, clusterEgress, egress, ingress int) {
			t.Helper()
			sum := clusterEgress + egress + ingress
			w := map[string]float64{
				"submariner_cluster_global_egress_IP_allocated": float64(clusterEgress),
				"submariner_global_egress_IP_allocated":         float64(egress),
				"submariner_global_ingress_IP_allocated":        float64(ingress),
				"submariner_global_IP_allocated":                float64(sum),
				"submariner_global_IP_availability":             float64(total - sum),
			}
			eventually(t, what, func() error {
				if got := ipam.gauges(t, cidr); !maps.Equal(got, w) {
					return fmt.Errorf("gauges %v, want %v", got, w)
				}
				return nil
			})
		}
		want("the 8 cluster egress IPs counted", 8, 0, 0)

		c.namespace(t, "metrics")
		pool, _ := v1.ToUnstructured(&v1.GlobalEgressIP{
			ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "metrics"},
			Spec:       v1.GlobalEgressIPSpec{NumberOfIPs: new(2)},
		}, "GlobalEgressIP")
		c.create(t, geip, pool)
		c.service(t, "metrics", "web", false, nil)
		c.export(t, "metrics", "web")
		want("a namespace's 2 egress IPs and an exported service's ingress IP counted", 8, 2, 1)

		c.unexport(t, "metrics", "web")
		c.delete(t, geip, "metrics", "pool")
		want("released IPs counted as available again", 8, 0, 0)
	})

	t.Run("egress pools: pod selector over namespace over cluster, members follow the pods", func(t *testing.T) {
		c.pod(t, "billing", "web-1", "10.8.1.1", corev1.PodRunning, map[string]string{"app": "web"})
		c.pod(t, "billing", "web-2", "10.8.1.2", corev1.PodRunning, map[string]string{"app": "web"})
		c.pod(t, "billing", "db-0", "10.8.1.10", corev1.PodRunning, map[string]string{"app": "db"})
		c.pod(t, "plain", "loner", "10.8.2.1", corev1.PodRunning, nil)

		nsPool, _ := v1.ToUnstructured(&v1.GlobalEgressIP{
			ObjectMeta: metav1.ObjectMeta{Name: "all", Namespace: "billing"},
			Spec:       v1.GlobalEgressIPSpec{NumberOfIPs: new(2)},
		}, "GlobalEgressIP")
		c.create(t, geip, nsPool)
		selPool, _ := v1.ToUnstructured(&v1.GlobalEgressIP{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "billing"},
			Spec:       v1.GlobalEgressIPSpec{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
		}, "GlobalEgressIP")
		c.create(t, geip, selPool)
		nsIPs := c.allocated(t, geip, "billing", "all", 2)
		selIPs := c.allocated(t, geip, "billing", "db", 1)

		expectPools := func(nsMembers, selMembers []netip.Prefix) {
			t.Helper()
			eventually(t, "rules carry both pools", func() error {
				r := ipam.last()
				ns, ok1 := findPool(r, "egress:billing/all")
				sel, ok2 := findPool(r, "egress:billing/db")
				switch {
				case !ok1 || !ok2:
					return fmt.Errorf("pools %+v", r.Pools)
				case ns.Kind != natengine.PoolNamespace || !slices.Equal(ns.IPs, addrs(nsIPs...)) || !slices.Equal(ns.Members, nsMembers):
					return fmt.Errorf("namespace pool %+v", ns)
				case sel.Kind != natengine.PoolPodSelector || !slices.Equal(sel.IPs, addrs(selIPs...)) || !slices.Equal(sel.Members, selMembers):
					return fmt.Errorf("pod-selector pool %+v", sel)
				}
				return nil
			})
		}
		expectPools(hosts("10.8.1.1", "10.8.1.2", "10.8.1.10"), hosts("10.8.1.10"))

		rules := ipam.last()
		remote := "242.2.0.5"
		if got := egressSource(t, rules, "10.8.1.10", remote); !slices.Contains(addrs(selIPs...), got) {
			t.Errorf("db-0 (both pools) left as %s, want its pod-selector pool %v", got, selIPs)
		}
		if got := egressSource(t, rules, "10.8.1.1", remote); !slices.Contains(addrs(nsIPs...), got) {
			t.Errorf("web-1 (namespace pool) left as %s, want %v", got, nsIPs)
		}
		if got := egressSource(t, rules, "10.8.2.1", remote); !slices.Contains(rules.ClusterEgress, got) {
			t.Errorf("loner (no pool) left as %s, want a cluster egress IP %v", got, rules.ClusterEgress)
		}

		c.pod(t, "billing", "db-1", "10.8.1.11", corev1.PodRunning, map[string]string{"app": "db"})
		c.deletePod(t, "billing", "web-2")
		expectPools(hosts("10.8.1.1", "10.8.1.10", "10.8.1.11"), hosts("10.8.1.10", "10.8.1.11"))

		c.patch(t, geip, "billing", "all", `{"spec":{"numberOfIPs":4}}`, false)
		nsIPs = c.allocated(t, geip, "billing", "all", 4)
		if !slices.Equal(nsIPs, rangeOf(nsIPs[0], 4)) {
			t.Fatalf("namespace pool after resize %v is not contiguous", nsIPs)
		}
		expectPools(hosts("10.8.1.1", "10.8.1.10", "10.8.1.11"), hosts("10.8.1.10", "10.8.1.11"))
	})

	var webIP string
	t.Run("exported services: ClusterIP and headless pods get GlobalIngressIPs; unexport frees them", func(t *testing.T) {
		web := c.service(t, "shop", "web", false, map[string]string{"app": "web"})
		c.export(t, "shop", "web")
		webIP = c.allocated(t, giip, "shop", "web", 1)[0]
		u, err := c.get(giip, "shop", "web")
		must(t, err)
		g, err := v1.FromUnstructured[v1.GlobalIngressIP](u)
		must(t, err)
		if g.Spec.Target != v1.ClusterIPService || g.Spec.ServiceRef == nil || g.Spec.ServiceRef.Name != "web" {
			t.Errorf("GlobalIngressIP shop/web spec %+v", g.Spec)
		}
		eventually(t, "the service's ingress rule and global IP", func() error {
			in, ok := findIngress(ipam.last(), "shop/web")
			if !ok || in.Kind != natengine.IngressService || in.Global.String() != webIP || in.Local.String() != web.Spec.ClusterIP {
				return fmt.Errorf("ingress %+v (found %v); want %s → %s", in, ok, webIP, web.Spec.ClusterIP)
			}
			if ip, ok := ipam.ipam.ServiceGlobalIP("shop", "web"); !ok || ip != webIP {
				return fmt.Errorf("ServiceGlobalIP = %q, %v", ip, ok)
			}
			if ipam.notifications("shop", "web") == 0 {
				return fmt.Errorf("OnGlobalIP not called for shop/web")
			}
			return nil
		})

		c.service(t, "shop", "db", true, map[string]string{"app": "db"})
		podIPs := map[string]string{"db-0": "10.8.3.1", "db-1": "10.8.3.2", "db-2": "10.8.3.3"}
		for _, name := range slices.Sorted(maps.Keys(podIPs)) {
			c.pod(t, "shop", name, podIPs[name], corev1.PodRunning, map[string]string{"app": "db"})
		}
		c.pod(t, "shop", "db-pending", "10.8.3.9", corev1.PodPending, map[string]string{"app": "db"})
		c.export(t, "shop", "db")
		for name, ip := range podIPs {
			gip := c.allocated(t, giip, "shop", PodIngressName(name), 1)[0]
			u, err := c.get(giip, "shop", PodIngressName(name))
			must(t, err)
			g, err := v1.FromUnstructured[v1.GlobalIngressIP](u)
			must(t, err)
			if g.Spec.Target != v1.HeadlessServicePod || g.Spec.PodRef == nil || g.Spec.PodRef.Name != name ||
				g.Labels[ServiceRefLabel] != "db" || g.Annotations[HeadlessPodIPAnnotation] != ip {
				t.Errorf("GlobalIngressIP of pod %s: labels %v annotations %v spec %+v", name, g.Labels, g.Annotations, g.Spec)
			}
			eventually(t, "pod "+name+"'s ingress rule", func() error {
				in, ok := findIngress(ipam.last(), "shop/db/"+name)
				if !ok || in.Kind != natengine.IngressHeadlessPod || in.Global.String() != gip || in.Local.String() != ip {
					return fmt.Errorf("ingress %+v (found %v); want %s → %s", in, ok, gip, ip)
				}
				if got, ok := ipam.ipam.PodGlobalIP("shop", name); !ok || got != gip {
					return fmt.Errorf("PodGlobalIP = %q, %v", got, ok)
				}
				return nil
			})
		}
		list, err := c.dyn.Resource(giip).Namespace("shop").List(ctx, metav1.ListOptions{LabelSelector: ServiceRefLabel + "=db"})
		must(t, err)
		if len(list.Items) != 3 {
			t.Errorf("%d GlobalIngressIPs for the headless service, want 3 (a pending pod gets none)", len(list.Items))
		}

		c.patch(t, svcResource, "shop", "db", `{"spec":{"publishNotReadyAddresses":true}}`, false)
		c.allocated(t, giip, "shop", PodIngressName("db-pending"), 1)
		c.deletePod(t, "shop", "db-pending")
		c.gone(t, giip, "shop", PodIngressName("db-pending"))
		c.deletePod(t, "shop", "db-1")
		c.gone(t, giip, "shop", PodIngressName("db-1"))

		// A second headless service over the same pods shares their
		// GlobalIngressIPs, and takes them over, IPs and all, when the
		// first is unexported.
		db0IP := c.allocated(t, giip, "shop", PodIngressName("db-0"), 1)[0]
		c.service(t, "shop", "db2", true, map[string]string{"app": "db"})
		c.export(t, "shop", "db2")
		c.unexport(t, "shop", "db")
		eventually(t, "the pods' GlobalIngressIPs move to db2", func() error {
			list, err := c.dyn.Resource(giip).Namespace("shop").List(ctx, metav1.ListOptions{LabelSelector: ServiceRefLabel + "=db2"})
			if err != nil || len(list.Items) != 2 {
				return fmt.Errorf("%d labelled for db2 (%v)", len(list.Items), err)
			}
			if a, err := c.allocation(giip, "shop", PodIngressName("db-0")); err != nil || len(a.ips) != 1 || a.ips[0] != db0IP {
				return fmt.Errorf("pod-db-0 has %v (%v), want %s kept", a.ips, err, db0IP)
			}
			if in, ok := findIngress(ipam.last(), "shop/db2/db-0"); !ok || in.Global.String() != db0IP {
				return fmt.Errorf("ingress rule of db-0 under db2: %+v", in)
			}
			return nil
		})

		before := ipam.notifications("shop", "web")
		c.unexport(t, "shop", "web")
		c.gone(t, giip, "shop", "web")
		eventually(t, "the unexported service leaves the rules", func() error {
			if _, ok := findIngress(ipam.last(), "shop/web"); ok {
				return fmt.Errorf("ingress shop/web still in the rules")
			}
			if ip, ok := ipam.ipam.ServiceGlobalIP("shop", "web"); ok {
				return fmt.Errorf("ServiceGlobalIP still %s", ip)
			}
			if ipam.notifications("shop", "web") == before {
				return fmt.Errorf("OnGlobalIP not called for the unexport")
			}
			return nil
		})

		c.service(t, "shop", "api", false, map[string]string{"app": "api"})
		c.export(t, "shop", "api")
		if got := c.allocated(t, giip, "shop", "api", 1)[0]; got != webIP {
			t.Errorf("the next service got %s, want the IP the unexported one freed, %s", got, webIP)
		}

		c.service(t, "shop", "brief", false, nil)
		c.export(t, "shop", "brief")
		c.allocated(t, giip, "shop", "brief", 1)
		must(t, c.kube.CoreV1().Services("shop").Delete(ctx, "brief", metav1.DeleteOptions{}))
		c.gone(t, giip, "shop", "brief")
		c.unexport(t, "shop", "brief")
	})

	// every object that holds IPs by now, for the restarts.
	holders := []struct {
		gvr      schema.GroupVersionResource
		ns, name string
	}{
		{cgeip, "", v1.ClusterGlobalEgressIPName}, {geip, "billing", "all"}, {geip, "billing", "db"},
		{giip, "shop", "api"}, {giip, "shop", PodIngressName("db-0")}, {giip, "shop", PodIngressName("db-2")},
	}
	snapshot := func(t *testing.T) map[string][]string {
		t.Helper()
		out := map[string][]string{}
		for _, h := range holders {
			a, err := c.allocation(h.gvr, h.ns, h.name)
			must(t, err)
			out[h.ns+"/"+h.name] = a.ips
		}
		return out
	}

	t.Run("restart keeps every IP and hands over the same rules", func(t *testing.T) {
		eventually(t, "the rules settle", func() error {
			if n := len(ipam.last().Ingress); n != 3 {
				return fmt.Errorf("%d ingress rules, want 3 (api, db2's db-0 and db-2)", n)
			}
			return nil
		})
		before := snapshot(t)
		rulesBefore := ipam.last()
		apiIP, _ := ipam.ipam.ServiceGlobalIP("shop", "api")
		second, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := ipam.ipam.Run(second); !errors.Is(err, errRunning) {
			t.Errorf("a second Run of a running IPAM returned %v, want errRunning", err)
		}
		cancel()
		ipam.stop(t)

		ipam = startIPAM(t, c, "242.1.0.0/16", netip.MustParsePrefix(remoteGlobal))
		eventually(t, "the new IPAM hands over the same rules", func() error {
			if got := ipam.last(); !reflect.DeepEqual(got, rulesBefore) {
				return fmt.Errorf("rules after restart:\n%+v\nbefore:\n%+v", got, rulesBefore)
			}
			if ip, ok := ipam.ipam.ServiceGlobalIP("shop", "api"); !ok || ip != apiIP {
				return fmt.Errorf("ServiceGlobalIP(shop, api) = %q, %v; want %s", ip, ok, apiIP)
			}
			return nil
		})
		if after := snapshot(t); !reflect.DeepEqual(after, before) {
			t.Errorf("allocations changed across the restart:\nbefore %v\nafter  %v", before, after)
		}
		ipam.stop(t)
	})

	t.Run("restart reallocates recorded IPs that conflict or lie outside the CIDR, saying why", func(t *testing.T) {
		before := snapshot(t)
		db0, db2 := PodIngressName("db-0"), PodIngressName("db-2")
		c.patch(t, geip, "billing", "db", `{"status":{"allocatedIPs":["10.9.9.9"]}}`, true)
		c.patch(t, giip, "shop", db2, fmt.Sprintf(`{"status":{"allocatedIP":%q}}`, before["shop/"+db0][0]), true)
		// The older object keeps a contested IP; names break a tie.
		u0, err := c.get(giip, "shop", db0)
		must(t, err)
		u2, err := c.get(giip, "shop", db2)
		must(t, err)
		keeper, loser := db0, db2
		if oldestFirst([]any{u0, u2})[0].GetName() == db2 {
			keeper, loser = db2, db0
		}

		ipam = startIPAM(t, c, "242.1.0.0/16", netip.MustParsePrefix(remoteGlobal))
		eventually(t, "the out-of-range IP is replaced, and the condition says why", func() error {
			a, err := c.allocation(geip, "billing", "db")
			switch {
			case err != nil:
				return err
			case len(a.ips) != 1 || a.ips[0] == "10.9.9.9" || a.cond == nil || a.cond.Status != metav1.ConditionTrue ||
				!strings.Contains(a.cond.Message, "10.9.9.9 is outside the global CIDR 242.1.0.0/16"):
				return fmt.Errorf("IPs %v, condition %+v", a.ips, a.cond)
			}
			return nil
		})
		eventually(t, "the contested IP goes to the older object", func() error {
			k, err := c.allocation(giip, "shop", keeper)
			if err != nil {
				return err
			}
			l, err := c.allocation(giip, "shop", loser)
			if err != nil {
				return err
			}
			switch {
			case len(k.ips) != 1 || k.ips[0] != before["shop/"+db0][0]:
				return fmt.Errorf("%s has %v, want the contested %s", keeper, k.ips, before["shop/"+db0][0])
			case len(l.ips) != 1 || l.ips[0] == k.ips[0] || l.cond == nil ||
				!strings.Contains(l.cond.Message, "also allocated to GlobalIngressIP shop/"+keeper):
				return fmt.Errorf("%s has %v, condition %+v", loser, l.ips, l.cond)
			}
			return nil
		})
		after := snapshot(t)
		for _, h := range holders {
			k := h.ns + "/" + h.name
			if h.name != "db" && h.name != loser && !slices.Equal(after[k], before[k]) {
				t.Errorf("%s changed from %v to %v", k, before[k], after[k])
			}
		}
	})

	t.Run("exhaustion in a /29 is reported, and freed IPs go to the waiting object", func(t *testing.T) {
		ipam.stop(t)
		c.delete(t, geip, "billing", "all")
		c.delete(t, geip, "billing", "db")
		c.unexport(t, "shop", "db2")
		c.unexport(t, "shop", "api")

		ipam = startIPAM(t, c, "242.9.0.0/29", netip.MustParsePrefix(remoteGlobal))
		eventually(t, "GlobalIngressIPs left by unexports made while the IPAM was down are deleted", func() error {
			list, err := c.dyn.Resource(giip).Namespace("shop").List(ctx, metav1.ListOptions{})
			if err != nil || len(list.Items) != 0 {
				return fmt.Errorf("%d left (%v)", len(list.Items), err)
			}
			return nil
		})
		cond := c.refused(t, cgeip, "", v1.ClusterGlobalEgressIPName, reasonAllocationFailed)
		if !strings.Contains(cond.Message, "242.9.0.0/29") || !strings.Contains(cond.Message, "outside the global CIDR") {
			t.Errorf("exhaustion message %q should name the CIDR and why the recorded IPs went", cond.Message)
		}

		c.patch(t, cgeip, "", v1.ClusterGlobalEgressIPName, `{"spec":{"numGlobalIPs":6}}`, false)
		if ips := c.allocated(t, cgeip, "", v1.ClusterGlobalEgressIPName, 6); !slices.Equal(ips, rangeOf("242.9.0.1", 6)) {
			t.Fatalf("6 cluster egress IPs in a /29: %v", ips)
		}
		late, _ := v1.ToUnstructured(&v1.GlobalEgressIP{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "plain"}}, "GlobalEgressIP")
		c.create(t, geip, late)
		cond = c.refused(t, geip, "plain", "late", reasonAllocationFailed)
		if !strings.Contains(cond.Message, "242.9.0.0/29") {
			t.Errorf("exhaustion message %q does not name the CIDR", cond.Message)
		}

		c.patch(t, cgeip, "", v1.ClusterGlobalEgressIPName, `{"spec":{"numGlobalIPs":5}}`, false)
		c.allocated(t, cgeip, "", v1.ClusterGlobalEgressIPName, 5)
		if ips := c.allocated(t, geip, "plain", "late", 1); ips[0] != "242.9.0.6" {
			t.Errorf("the waiting GlobalEgressIP got %v, want the freed 242.9.0.6", ips)
		}
		eventually(t, "rules with 5 cluster egress IPs and the late pool", func() error {
			r := ipam.last()
			p, ok := findPool(r, "egress:plain/late")
			if len(r.ClusterEgress) != 5 || !ok || !slices.Equal(p.IPs, addrs("242.9.0.6")) || !slices.Equal(p.Members, hosts("10.8.2.1")) {
				return fmt.Errorf("cluster egress %v, pools %+v", r.ClusterEgress, r.Pools)
			}
			return nil
		})
		ipam.stop(t)
	})
}
