package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/gateway"
)

// TestAgentMetricsServeTheRegistryAndAnswerHealthWhilePassive checks the
// agent's metrics listener: /metrics is the agent's registry, which holds
// the in-process gateway's metrics as well, and /healthz answers while no
// gateway runs, as on a passive gateway node.
func TestAgentMetricsServeTheRegistryAndAnswerHealthWhilePassive(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := gateway.NewRunner(nil)
	defer r.Close()
	reg.MustRegister(r)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "submariner_service_export", Help: "test"})
	reg.MustRegister(g)
	srv := httptest.NewServer(agentMetrics(reg))
	defer srv.Close()
	for path, want := range map[string]string{"/metrics": "submariner_service_export 0", "/healthz": "ok"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %q, want 200 and %q", path, resp.StatusCode, b, want)
		}
	}
}

// TestLoadBalancerIPWaitsForTheIngress has the cloud's part played by the
// test: it writes the load balancer's status once the agent waits for it.
func TestLoadBalancerIPWaitsForTheIngress(t *testing.T) {
	kc, err := kubetest.Start(t, kubelocal.Options{Name: "c1"})[0].Client()
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: api.AgentNamespace}}
	if _, err := kc.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name    string
		ingress corev1.LoadBalancerIngress
		want    string
	}{
		{"an ingress IP is the public IP", corev1.LoadBalancerIngress{IP: "198.51.100.20"}, "198.51.100.20"},
		{"an ingress host name is resolved", corev1.LoadBalancerIngress{Hostname: "localhost"}, "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: api.GatewayLoadBalancer, Namespace: api.AgentNamespace},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app.kubernetes.io/name": "snorkel-agent"},
					Ports: []corev1.ServicePort{{Name: "cable-encaps", Protocol: corev1.ProtocolUDP, Port: 4500}}},
			}
			created, err := kc.CoreV1().Services(api.AgentNamespace).Create(t.Context(), svc, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer kc.CoreV1().Services(api.AgentNamespace).Delete(context.WithoutCancel(t.Context()), api.GatewayLoadBalancer, metav1.DeleteOptions{})
			type result struct {
				ip  string
				err error
			}
			got := make(chan result, 1)
			go func() {
				ip, err := loadBalancerIP(t.Context(), kc, api.AgentNamespace, net.DefaultResolver, log)
				got <- result{ip, err}
			}()
			select {
			case r := <-got:
				t.Fatalf("returned %q, %v before the load balancer had an address", r.ip, r.err)
			default:
			}
			created.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{tc.ingress}
			if _, err := kc.CoreV1().Services(api.AgentNamespace).UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-got:
				if r.err != nil || r.ip != tc.want {
					t.Errorf("public IP %q, %v; want %s", r.ip, r.err, tc.want)
				}
			case <-time.After(time.Minute):
				t.Fatal("no public IP a minute after the load balancer got its address")
			}
		})
	}
}
