package broker

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
)

// TestCustomCoreDNSConfigMap checks --coredns-custom-configmap's writes on
// a real API server: the forwards go into their own key of the custom
// ConfigMap (made if missing), again changes nothing, and removing them
// leaves the ConfigMap's other keys.
func TestCustomCoreDNSConfigMap(t *testing.T) {
	kc, err := kubetest.Start(t, kubelocal.Options{Name: "c1"})[0].Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const ref = "kube-system/coredns-custom"
	for i, want := range []CoreDNSResult{CoreDNSUpdated, CoreDNSUnchanged} {
		got, err := configureCustomCoreDNS(ctx, kc, ref, "10.96.0.53", []string{"supercluster.local"})
		if err != nil || got != want {
			t.Fatalf("configure #%d: %v, %v; want %v", i+1, got, err, want)
		}
	}
	cms := kc.CoreV1().ConfigMaps(metav1.NamespaceSystem)
	cm, err := cms.Get(ctx, "coredns-custom", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := cm.Data[customCoreDNSKey]; !strings.Contains(s, "clusterset.local:53 {") || !strings.Contains(s, "supercluster.local:53 {") || !strings.Contains(s, "forward . 10.96.0.53") {
		t.Errorf("%s:\n%s", customCoreDNSKey, s)
	}
	cm.Data["other.server"] = "example.org:53 {\n    forward . 192.0.2.1\n}\n"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if removed, err := removeCustomCoreDNS(ctx, kc, ref); err != nil || !removed {
		t.Fatalf("remove: %v, %v", removed, err)
	}
	cm, err = cms.Get(ctx, "coredns-custom", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cm.Data[customCoreDNSKey]; ok || cm.Data["other.server"] == "" {
		t.Errorf("after removal: %v", cm.Data)
	}
	if removed, err := removeCustomCoreDNS(ctx, kc, ref); err != nil || removed {
		t.Errorf("remove again: %v, %v; want nothing to remove", removed, err)
	}
	if _, err := removeCustomCoreDNS(ctx, kc, "kube-system/absent"); err != nil {
		t.Errorf("remove from a missing ConfigMap: %v", err)
	}
}
