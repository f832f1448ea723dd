package kubelocal_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
)

// TestTwoIndependentClusters starts two servers and checks that each is a
// real API server of its own: objects do not leak between them, the admin
// kubeconfig works, ClusterIPs come from each one's range, a wrong token is
// refused, and Stop ends the processes.
//
// The second listens on another address and is reached through a dialer of
// the test's, as a lab's servers in a network namespace are.
func TestTwoIndependentClusters(t *testing.T) {
	var dials atomic.Int32
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	s := kubetest.Start(t, kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"}, kubelocal.Options{Name: "c2", ServiceCIDR: "10.99.0.0/16", Address: "127.0.0.2", Dial: dial})
	ctx := context.Background()
	if u := s[1].URL; !strings.HasPrefix(u, "https://127.0.0.2:") {
		t.Errorf("c2 is at %s, want its Options.Address 127.0.0.2", u)
	}
	if dials.Load() == 0 {
		t.Error("c2's readiness checks did not go through Options.Dial")
	}
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
	if api, etcd := s[0].Processes(); !kubelocal.Exited(api) || !kubelocal.Exited(etcd) {
		t.Error("Stop returned with a process still running")
	}
	if _, err := os.Stat(s[0].StateDir()); !os.IsNotExist(err) {
		t.Errorf("state directory %s left behind", s[0].StateDir())
	}
}

// TestStartTriesAgainWhenItsPortIsTaken takes the API server's port
// between the moment Start finds it free and the server's bind, as
// another process can: Start sees the clash in the log and starts both
// processes again on other ports.
func TestStartTriesAgainWhenItsPortIsTaken(t *testing.T) {
	dir := t.TempDir()
	var apiservers int
	var held net.Listener
	spawn := func(name, bin string, args ...string) (kubelocal.Process, error) {
		short := strings.TrimPrefix(name, "clash-")
		if short == "apiserver" {
			apiservers++
			if apiservers == 1 {
				port := args[slices.Index(args, "--secure-port")+1]
				l, err := net.Listen("tcp", "127.0.0.1:"+port)
				if err != nil {
					return nil, err
				}
				held = l
			}
		}
		return kubelocal.StartChild(filepath.Join(dir, short+".log"), bin, args...)
	}
	s := kubetest.Start(t, kubelocal.Options{Name: "clash", Dir: dir, Spawn: spawn})[0]
	if held == nil {
		t.Fatal("the test never took the API server's port")
	}
	defer held.Close()
	if apiservers != 2 {
		t.Errorf("%d API servers started, want 2: one that found its port taken, one that runs", apiservers)
	}
	if strings.HasSuffix(s.URL, ":"+strconv.Itoa(held.Addr().(*net.TCPAddr).Port)) {
		t.Errorf("the server is at %s, the port the test holds", s.URL)
	}
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Errorf("the restarted server does not answer: %v", err)
	}
}
