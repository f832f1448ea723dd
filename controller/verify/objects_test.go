package verify

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
)

// TestAPIServerAcceptsTheObjects creates what verify creates in a
// cluster, with and without a non-gateway node, on a real API server,
// whose validation a fake clientset does not run.
func TestAPIServerAcceptsTheObjects(t *testing.T) {
	apis := kubetest.Start(t, kubelocal.Options{Name: "c1"})
	kc, err := apis[0].Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b := Cluster{Context: "ctx-b", ID: "b", ServiceDiscovery: true, Gateway: "b-gw", Other: "b-worker"}
	for i, c := range []Cluster{b, {Context: "ctx-b", ID: "b", ServiceDiscovery: true, Gateway: "b-gw"}} {
		ns := fmt.Sprintf("verify-%d", i)
		if _, err := kc.CoreV1().Namespaces().Create(ctx, namespace(ns), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, svc := range services(ns) {
			if _, err := kc.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Errorf("Service %s: %v", svc.Name, err)
			}
		}
		if _, err := kc.AppsV1().StatefulSets(ns).Create(ctx, serverStatefulSet(ns, "snorkel:test", c), metav1.CreateOptions{}); err != nil {
			t.Errorf("StatefulSet with nodes %v: %v", c.Nodes(), err)
		}
		// The controller manager, which kubelocal does not run, would
		// make the ServiceAccount pods need.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
		if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		a := Cluster{Context: "ctx-a", ID: "a", ServiceDiscovery: true, Gateway: "a-gw", Other: "a-worker"}
		s := servers(gwPod, otherPod)
		s.Namespace = ns
		for j, check := range Plan(a, c, s, Kinds, Tries{Retry: time.Minute, Attempt: 20 * time.Second, PacketSize: 3000}) {
			pod := checkPod(ns, fmt.Sprintf("check-%02d", j), "snorkel:test", check)
			if _, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Errorf("check pod %q: %v", check.Args, err)
			}
		}
	}
}
