package dnsfeed

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/controller/servicesync"
	"github.com/snorkel-net/snorkel/deploy"
	"github.com/snorkel-net/snorkel/dnsd"
)

const brokerNS = "submariner-k8s-broker"

// cluster is one real API server with its clients.
type cluster struct {
	name string
	srv  *kubelocal.Server
	kc   kubernetes.Interface
	mcs  mcsclient.Interface
	dyn  dynamic.Interface
}

func (c *cluster) namespace(t *testing.T, ns string) {
	t.Helper()
	_, err := c.kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("%s: namespace %s: %v", c.name, ns, err)
	}
}

// service creates a Service with the TCP port http/80 (headless with
// clusterIP "None"), its EndpointSlice with the given endpoints, and its
// ServiceExport; it returns the ClusterIP.
func (c *cluster) service(t *testing.T, name, clusterIP string, eps ...discoveryv1.Endpoint) string {
	t.Helper()
	return c.serviceExported(t, name, clusterIP, nil, eps...)
}

// serviceExported is service with annotations on the ServiceExport.
func (c *cluster) serviceExported(t *testing.T, name, clusterIP string, annotations map[string]string, eps ...discoveryv1.Endpoint) string {
	t.Helper()
	ctx := context.Background()
	svc, err := c.kc.CoreV1().Services("sample").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sample"},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("%s: Service %s: %v", c.name, name, err)
	}
	_, err = c.kc.DiscoveryV1().EndpointSlices("sample").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-x1", Namespace: "sample", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("%s: EndpointSlice of %s: %v", c.name, name, err)
	}
	_, err = c.mcs.MulticlusterV1alpha1().ServiceExports("sample").Create(ctx, &mcsv1a1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sample", Annotations: annotations},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("%s: ServiceExport %s: %v", c.name, name, err)
	}
	return svc.Spec.ClusterIP
}

// gateway writes the status of this cluster's Gateway: active, with the
// given connection statuses by cluster.
func (c *cluster) gateway(t *testing.T, conns map[string]submv1.ConnectionStatus) {
	t.Helper()
	ctx := context.Background()
	r := c.dyn.Resource(submv1.GatewayResource).Namespace(api.AgentNamespace)
	gw := &submv1.Gateway{Status: submv1.GatewayStatus{
		HAStatus:      submv1.HAStatusActive,
		LocalEndpoint: submv1.EndpointSpec{ClusterID: c.name, Backend: "vxlan", Subnets: []string{}},
		Connections:   []submv1.Connection{},
	}}
	ids := make([]string, 0, len(conns))
	for id := range conns {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		gw.Status.Connections = append(gw.Status.Connections, submv1.Connection{
			Status:   conns[id],
			Endpoint: submv1.EndpointSpec{ClusterID: id, Backend: "vxlan", Subnets: []string{}},
		})
	}
	u, err := submv1.ToUnstructured(gw, "Gateway")
	if err != nil {
		t.Fatal(err)
	}
	u.SetName("gw-node")
	cur, err := r.Get(ctx, "gw-node", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cur, err = r.Create(ctx, u, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("%s: Gateway: %v", c.name, err)
	}
	cur.Object["status"] = u.Object["status"]
	if _, err := r.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("%s: Gateway status: %v", c.name, err)
	}
}

// answer asks dnsd at addr; it returns the rcode and the addresses.
func answer(addr, name string, qtype uint16) (int, []string, error) {
	r := new(dns.Msg)
	r.SetQuestion(name, qtype)
	m, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(r, addr)
	if err != nil {
		return 0, nil, err
	}
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.SRV:
			out = append(out, fmt.Sprintf("%d %s", rr.Port, rr.Target))
		}
	}
	sort.Strings(out)
	return m.Rcode, out, nil
}

// resolves polls dnsd until name answers rcode with want, or within ends.
func resolves(t *testing.T, addr string, within time.Duration, name string, qtype uint16, rcode int, want ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		rc, got, err := answer(addr, name, qtype)
		if err == nil && rc == rcode && slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: %s %v (%v) after %v, want %s %v", name, dns.TypeToString[qtype], dns.RcodeToString[rc], got, err, within, dns.RcodeToString[rcode], want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// A service exported in c2 resolves through c1's dnsd, fed by the
// controller from c1's API server, as the agents' Syncers import it;
// c1's own export wins; the Gateway's connection status decides whether
// c2 is answered; unexporting removes the name.
func TestExportInOneClusterResolvesInAnother(t *testing.T) {
	servers := kubetest.Start(t,
		kubelocal.Options{Name: "broker", ServiceCIDR: "10.80.0.0/16"},
		kubelocal.Options{Name: "c1", ServiceCIDR: "10.81.0.0/16"},
		kubelocal.Options{Name: "c2", ServiceCIDR: "10.82.0.0/16"})
	clusters := map[string]*cluster{}
	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	for i, srv := range servers {
		cfg := srv.Config()
		c := &cluster{name: srv.Name, srv: srv, kc: kubernetes.NewForConfigOrDie(cfg)}
		c.mcs = mcsclient.NewForConfigOrDie(cfg)
		c.dyn = dynamic.NewForConfigOrDie(cfg)
		clusters[c.name] = c
		wg.Go(func() { errs[i] = deploy.ApplyCRDs(context.Background(), cfg, false) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", servers[i].Name, err)
		}
	}
	clusters["broker"].namespace(t, brokerNS)
	c1, c2 := clusters["c1"], clusters["c2"]
	for _, c := range []*cluster{c1, c2} {
		c.namespace(t, "sample")
		c.namespace(t, api.AgentNamespace)
	}
	logger := slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		running.Wait()
	})
	blocks := map[string]string{"c1": "243.0.0.0/20", "c2": "243.0.16.0/20"}
	for _, c := range []*cluster{c1, c2} {
		local := c.srv.Config()
		local.QPS, local.Burst = 1000, 2000
		s, err := servicesync.New(servicesync.Config{
			ClusterID: c.name, Local: kubernetes.NewForConfigOrDie(local), LocalConfig: local,
			Broker: clusters["broker"].srv.Config(), BrokerNamespace: brokerNS, Logger: logger,
			ClustersetIP: &servicesync.ClustersetIPConfig{CIDR: netip.MustParsePrefix(blocks[c.name])},
		})
		if err != nil {
			t.Fatal(err)
		}
		running.Go(func() { s.Run(ctx) })
	}

	// c1's dnsd, fed from c1 only.
	server, err := dnsd.New(dnsd.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := New(Config{
		ClusterID: "c1", Local: c1.kc, LocalConfig: c1.srv.Config(), Namespace: api.AgentNamespace,
		Sink: server.Store(), Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	running.Go(func() {
		if err := feed.Run(ctx); err != nil {
			t.Error(err)
		}
	})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	running.Go(func() { server.Serve(ctx, pc, nil) })
	addr := pc.LocalAddr().String()

	const within = 60 * time.Second
	cs := "whereami-cs.sample.svc.clusterset.local."
	ss := "whereami-ss.sample.svc.clusterset.local."
	resolves(t, addr, within, "nothing.sample.svc.clusterset.local.", dns.TypeA, dns.RcodeNameError)

	ip2 := c2.service(t, "whereami-cs", "",
		endpoint("10.9.0.20", yes, "", "web-0"), endpoint("10.9.0.21", no, "", "web-1"))
	c2.service(t, "whereami-ss", "None",
		endpoint("10.9.0.12", yes, "whereami-0", "whereami-0"),
		endpoint("10.9.0.13", yes, "", "whereami-1"),
		endpoint("10.9.0.14", no, "whereami-2", "whereami-2"))

	// c2's gateway connection is not reported yet: its export exists, but
	// only the <cluster> name answers.
	resolves(t, addr, within, "c2."+cs, dns.TypeA, dns.RcodeSuccess, ip2)
	resolves(t, addr, within, cs, dns.TypeA, dns.RcodeSuccess)
	resolves(t, addr, within, "whereami-0.c2."+ss, dns.TypeA, dns.RcodeSuccess, "10.9.0.12")

	c1.gateway(t, map[string]submv1.ConnectionStatus{"c2": submv1.Connected})
	resolves(t, addr, within, cs, dns.TypeA, dns.RcodeSuccess, ip2)
	resolves(t, addr, within, ss, dns.TypeA, dns.RcodeSuccess, "10.9.0.12", "10.9.0.13")
	// A pod without a hostname is named by its address, as Lighthouse
	// names it.
	resolves(t, addr, within, "10-9-0-13.c2."+ss, dns.TypeA, dns.RcodeSuccess, "10.9.0.13")
	resolves(t, addr, within, "_http._tcp."+ss, dns.TypeSRV, dns.RcodeSuccess,
		"8080 10-9-0-13.c2."+ss, "8080 whereami-0.c2."+ss)
	resolves(t, addr, within, "_http._tcp."+cs, dns.TypeSRV, dns.RcodeSuccess, "80 "+cs)

	// A service exported with a clusterset IP answers c2's first VIP, the
	// address after its gateway's; its <cluster> name still answers the
	// cluster's own ClusterIP.
	vip := "whereami-vip.sample.svc.clusterset.local."
	vip2 := c2.serviceExported(t, "whereami-vip", "", map[string]string{api.UseClustersetIPAnnotation: "true"}, endpoint("10.9.0.30", yes, "", "vip-0"))
	resolves(t, addr, within, vip, dns.TypeA, dns.RcodeSuccess, "243.0.16.2")
	resolves(t, addr, within, "c2."+vip, dns.TypeA, dns.RcodeSuccess, vip2)

	// The local cluster exports too: its address wins.
	ip1 := c1.service(t, "whereami-cs", "", endpoint("10.8.0.20", yes, "", "web-0"))
	resolves(t, addr, within, cs, dns.TypeA, dns.RcodeSuccess, ip1)
	resolves(t, addr, within, "c2."+cs, dns.TypeA, dns.RcodeSuccess, ip2)

	// c2 disconnects: its pods go; the local export stays.
	c1.gateway(t, map[string]submv1.ConnectionStatus{"c2": submv1.Connecting})
	resolves(t, addr, within, ss, dns.TypeA, dns.RcodeSuccess)
	resolves(t, addr, within, cs, dns.TypeA, dns.RcodeSuccess, ip1)

	// c2 unexports: its names go.
	if err := c2.mcs.MulticlusterV1alpha1().ServiceExports("sample").Delete(context.Background(), "whereami-ss", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c2.mcs.MulticlusterV1alpha1().ServiceExports("sample").Delete(context.Background(), "whereami-cs", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	resolves(t, addr, within, ss, dns.TypeA, dns.RcodeNameError)
	resolves(t, addr, within, "c2."+cs, dns.TypeA, dns.RcodeNameError)
	resolves(t, addr, within, cs, dns.TypeA, dns.RcodeSuccess, ip1)
}
