package agent

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/servicesync"
)

// exportWatch keeps, from watches on the broker, every change to what one
// cluster publishes for one service that would take its name from the
// clusterset: a deleted ServiceImport or EndpointSlice, or one whose
// addresses are no longer the global IP.
type exportWatch struct {
	mu       sync.Mutex
	lost     []string
	affinity corev1.ServiceAffinity // of the latest ServiceImport seen
	err      error                  // an error event a watch ended with
}

// watchExport watches the broker's ServiceImports and EndpointSlices that
// cluster publishes for service ns/name until the test ends.
func watchExport(t *testing.T, e *env, brokerNS, cluster, ns, name, global string) *exportWatch {
	t.Helper()
	ctx := t.Context()
	sel := metav1.ListOptions{LabelSelector: servicesync.LabelSourceCluster + "=" + cluster + "," +
		servicesync.LabelServiceName + "=" + name + "," + servicesync.LabelSourceNamespace + "=" + ns}
	mcs, err := mcsclient.NewForConfig(e.broker.Config())
	if err != nil {
		t.Fatal(err)
	}
	kc, err := e.broker.Client()
	if err != nil {
		t.Fatal(err)
	}
	// Watch from a list's resource version, as watchEndpoints explains.
	imps := mcs.MulticlusterV1alpha1().ServiceImports(brokerNS)
	il, err := imps.List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if len(il.Items) != 1 {
		t.Fatalf("the broker holds %d ServiceImports of %s/%s from %s before the failover, want 1", len(il.Items), ns, name, cluster)
	}
	slcs := kc.DiscoveryV1().EndpointSlices(brokerNS)
	sl, err := slcs.List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if len(sl.Items) == 0 {
		t.Fatalf("the broker holds no EndpointSlice of %s/%s from %s before the failover", ns, name, cluster)
	}
	iw, err := imps.Watch(ctx, metav1.ListOptions{LabelSelector: sel.LabelSelector, ResourceVersion: il.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iw.Stop)
	sw, err := slcs.Watch(ctx, metav1.ListOptions{LabelSelector: sel.LabelSelector, ResourceVersion: sl.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sw.Stop)

	w := &exportWatch{affinity: il.Items[0].Spec.SessionAffinity}
	go w.follow(iw, func(ev watch.Event) {
		si, ok := ev.Object.(*mcsv1a1.ServiceImport)
		if !ok {
			return
		}
		switch {
		case ev.Type == watch.Deleted:
			w.lose("ServiceImport %s deleted", si.Name)
		case !slices.Equal(si.Spec.IPs, []string{global}):
			w.lose("ServiceImport %s %s with IPs %v", si.Name, strings.ToLower(string(ev.Type)), si.Spec.IPs)
		}
		w.mu.Lock()
		w.affinity = si.Spec.SessionAffinity
		w.mu.Unlock()
	})
	go w.follow(sw, func(ev watch.Event) {
		eps, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		var addrs []string
		for _, ep := range eps.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
		switch {
		case ev.Type == watch.Deleted:
			w.lose("EndpointSlice %s deleted", eps.Name)
		case !slices.Equal(addrs, []string{global}):
			w.lose("EndpointSlice %s %s with addresses %v", eps.Name, strings.ToLower(string(ev.Type)), addrs)
		}
	})
	return w
}

// follow hands seen the events of wi until it ends.
func (w *exportWatch) follow(wi watch.Interface, seen func(watch.Event)) {
	for ev := range wi.ResultChan() {
		if ev.Type == watch.Error {
			w.mu.Lock()
			w.err = fmt.Errorf("%v", ev.Object)
			w.mu.Unlock()
			continue
		}
		seen(ev)
	}
}

func (w *exportWatch) lose(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lost = append(w.lost, fmt.Sprintf(format, args...))
}

// state is the session affinity of the latest ServiceImport the watch
// saw, what it saw withdrawn, and the error a watch failed with.
func (w *exportWatch) state() (corev1.ServiceAffinity, []string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.affinity, slices.Clone(w.lost), w.err
}

// testFailoverKeepsTheExports fails c2's active gateway over to a standby
// that ran beside it: the export of sample/web stays on the broker, with
// its global IP, throughout. The new term's IPAM reads the global IP back
// from the GlobalIngressIP's status; a service sync that ran before would
// find none and withdraw the export until it did.
func testFailoverKeepsTheExports(t *testing.T, e *env) {
	ctx := t.Context()
	const ns, name = "sample", "web"
	active := e.active["g2"]
	member := active.cfg.Member
	cfg, _ := active.dp.last()
	_, ingress := globalIPs(cfg)
	global := ingress[ns+"/"+name]
	if global == "" {
		t.Fatalf("c2's data plane has no global ingress IP for %s/%s: %v", ns, name, ingress)
	}
	mcsB, err := mcsclient.NewForConfig(e.broker.Config())
	if err != nil {
		t.Fatal(err)
	}
	imp := name + "-" + ns + "-" + member.ClusterID
	eventually(t, settle, "the broker holds c2's ServiceImport "+imp+" at the global IP "+global, func() (bool, string) {
		si, err := mcsB.MulticlusterV1alpha1().ServiceImports(member.BrokerNamespace).Get(ctx, imp, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return slices.Equal(si.Spec.IPs, []string{global}), fmt.Sprintf("IPs %v", si.Spec.IPs)
	})

	standby := start(t, e, e.c2, member, "gw-g2-standby", "127.0.0.27", "")
	eventually(t, settle, "gw-g2-standby passive", func() (bool, string) {
		g := gatewayObject(t, standby)
		if standby.Active() || g == nil || g.Status.HAStatus != submv1.HAStatusPassive {
			return false, fmt.Sprintf("active %v, Gateway %+v", standby.Active(), g)
		}
		return true, ""
	})

	w := watchExport(t, e, member.BrokerNamespace, member.ClusterID, ns, name, global)
	active.halt()
	eventually(t, settle, "gw-g2-standby takes over", func() (bool, string) { return standby.Active(), "still passive" })

	// A change made after the takeover reaches the broker only through
	// the new term's service sync: once the watch sees it, that sync has
	// run over the service, and whatever it withdrew before has been seen.
	kc2, err := e.c2.Client()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := kc2.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	if _, err := kc2.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, "the new term's service sync exports the change", func() (bool, string) {
		affinity, _, err := w.state()
		if err != nil {
			t.Fatalf("a watch of the broker failed, so it saw only part of the failover: %v", err)
		}
		return affinity == corev1.ServiceAffinityClientIP, fmt.Sprintf("session affinity %q", affinity)
	})
	if _, lost, _ := w.state(); len(lost) > 0 {
		t.Errorf("the failover withdrew c2's export of %s/%s from the broker:\n%s", ns, name, strings.Join(lost, "\n"))
	}
	e.active["g2"] = standby
}
