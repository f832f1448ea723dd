package broker

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// TestDiscoverPodCIDRs checks where join finds a cluster's Pod CIDRs when
// --clustercidr is not given, in subctl's order of sources.
func TestDiscoverPodCIDRs(t *testing.T) {
	kcm := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-cp", Namespace: "kube-system", Labels: map[string]string{"component": "kube-controller-manager"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "kcm", Command: []string{"kube-controller-manager", "--cluster-cidr=10.244.0.0/16"}}}},
	}
	proxy := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
		Data:       map[string]string{"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.8.0.0/16\nmode: nftables\n"},
	}
	node := func(name, cidr string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
	}
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		want    string
		wantWhy string
	}{
		{"kube-controller-manager's flag first", []runtime.Object{kcm, proxy}, "10.244.0.0/16", ""},
		{"then kube-proxy's configuration, as kubeadm keeps it", []runtime.Object{proxy, node("a", "10.8.0.0/24"), node("b", "10.8.1.0/24")}, "10.8.0.0/16", ""},
		{"then a single node's podCIDRs", []runtime.Object{node("a", "10.8.0.0/24")}, "10.8.0.0/24", ""},
		{"several nodes tell nothing", []runtime.Object{node("a", "10.8.0.0/24"), node("b", "10.8.1.0/24")}, "", "ConfigMap kube-system/kube-proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := discoverPodCIDRs(context.Background(), fake.NewClientset(tc.objs...))
			if strings.Join(got, ",") != tc.want {
				t.Errorf("got %v (%s), want %s", got, why, tc.want)
			}
			if !strings.Contains(why, tc.wantWhy) {
				t.Errorf("why %q does not mention %q", why, tc.wantWhy)
			}
		})
	}
}
