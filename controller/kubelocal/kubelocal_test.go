package kubelocal

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TestTwoIndependentClusters starts two servers and checks that each is a
// real API server of its own: objects do not leak between them, the admin
// kubeconfig works, ClusterIPs come from each one's range, a wrong token is
// refused, and Stop ends the processes.
func TestTwoIndependentClusters(t *testing.T) {
	s := ForTest(t, Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"}, Options{Name: "c2", ServiceCIDR: "10.99.0.0/16"})
	ctx := context.Background()
	for i, want := range []string{"10.88.", "10.99."} {
		cfg, err := clientcmd.BuildConfigFromFlags("", s[i].Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		c := kubernetes.NewForConfigOrDie(cfg)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}
		got, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", s[i].Name, err)
		}
		if ip := got.Spec.ClusterIP; len(ip) < len(want) || ip[:len(want)] != want {
			t.Errorf("%s: ClusterIP %s, want one in %s0.0/16", s[i].Name, ip, want)
		}
	}
	// The second create in each cluster would conflict if they shared a store.
	c1, err := s[0].Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c2, _ := s[1].Client()
	if _, err := c2.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("c2's service went with c1's: %v", err)
	}

	bad := s[0].Config()
	bad.BearerToken = "not-the-token"
	_, err = kubernetes.NewForConfigOrDie(bad).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("a wrong token got %v, want 401 Unauthorized", err)
	}
	insecure := &rest.Config{Host: s[0].URL, BearerToken: s[0].Token}
	if _, err := kubernetes.NewForConfigOrDie(insecure).CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("a client without the CA trusted the server's certificate")
	}

	s[0].Stop()
	if !s[0].api.done() || !s[0].etcd.done() {
		t.Error("Stop returned with a process still running")
	}
	if _, err := os.Stat(s[0].dir); !os.IsNotExist(err) {
		t.Errorf("state directory %s left behind", s[0].dir)
	}
}
