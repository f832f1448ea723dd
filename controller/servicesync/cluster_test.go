package servicesync

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/deploy"
)

const brokerNS = "submariner-k8s-broker"

// clusterset is a broker and three members, each a real API server.
type clusterset struct {
	tb      testing.TB // owns the Syncers
	broker  *member
	members map[string]*member // c1, c2, c3
}

// member is one cluster and its running Syncer.
type member struct {
	name string
	srv  *kubelocal.Server
	kc   kubernetes.Interface
	mcs  mcsclient.Interface

	mu   sync.Mutex
	stop func()               // stops the Syncer; nil when none runs
	reg  *prometheus.Registry // the running Syncer's metrics
}

// startClusterset starts the four API servers in one go, applies the CRDs
// to each and creates the broker's namespace.
func startClusterset(tb testing.TB) *clusterset {
	tb.Helper()
	servers := kubetest.Start(tb,
		kubelocal.Options{Name: "broker", ServiceCIDR: "10.80.0.0/16"},
		kubelocal.Options{Name: "c1", ServiceCIDR: "10.81.0.0/16"},
		kubelocal.Options{Name: "c2", ServiceCIDR: "10.82.0.0/16"},
		kubelocal.Options{Name: "c3", ServiceCIDR: "10.83.0.0/16"})
	cs := &clusterset{tb: tb, members: map[string]*member{}}
	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	for i, srv := range servers {
		m := &member{name: srv.Name, srv: srv}
		var err error
		if m.kc, err = kubernetes.NewForConfig(srv.Config()); err != nil {
			tb.Fatal(err)
		}
		if m.mcs, err = mcsclient.NewForConfig(srv.Config()); err != nil {
			tb.Fatal(err)
		}
		if i == 0 {
			cs.broker = m
		} else {
			cs.members[m.name] = m
		}
		wg.Go(func() { errs[i] = deploy.ApplyCRDs(context.Background(), srv.Config(), false) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			tb.Fatalf("%s: %v", servers[i].Name, err)
		}
	}
	cs.broker.createNamespace(tb, brokerNS)
	return cs
}

// run starts name's Syncer (with gips, nil without Globalnet) until the
// clusterset's test ends or stopSyncer is called.
func (cs *clusterset) run(name string, gips GlobalIPs) *Syncer {
	return cs.runWith(name, gips, nil)
}

// runWith is run with the clusterset IP configuration csip (nil for none).
func (cs *clusterset) runWith(name string, gips GlobalIPs, csip *ClustersetIPConfig) *Syncer {
	tb := cs.tb
	m := cs.members[name]
	local := m.srv.Config()
	local.QPS, local.Burst = 1000, 2000
	broker := cs.broker.srv.Config()
	broker.QPS, broker.Burst = 1000, 2000
	reg := prometheus.NewRegistry()
	s, err := New(Config{
		ClusterID: name, Local: kubernetes.NewForConfigOrDie(local), LocalConfig: local,
		Broker: broker, BrokerNamespace: brokerNS, GlobalIPs: gips, ClustersetIP: csip,
		Logger:     slog.New(slog.NewTextHandler(logWriter{tb}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Registerer: reg,
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// The deadlines the tests check are for changes to a running
	// clusterset, not for a Syncer's start on a loaded machine.
	synced := make([]cache.InformerSynced, 0, 8)
	for _, inf := range s.informers() {
		synced = append(synced, inf.HasSynced)
	}
	syncCtx, syncCancel := context.WithTimeout(ctx, settle)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), synced...) {
		tb.Fatalf("%s: the Syncer's caches did not sync within %v", name, settle)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("%s: Run: %v", name, err)
			}
		})
	}
	m.mu.Lock()
	m.stop, m.reg = stop, reg
	m.mu.Unlock()
	tb.Cleanup(stop)
	// Deadlines in the tests count from a change, not from the start.
	eventually(tb, time.Minute, name+"'s Syncer syncs its caches", func() string {
		for _, inf := range s.informers() {
			if !inf.HasSynced() {
				return "not yet"
			}
		}
		return ""
	})
	return s
}

// stopSyncer stops name's Syncer and waits for Run to return.
func (cs *clusterset) stopSyncer(name string) {
	m := cs.members[name]
	m.mu.Lock()
	stop := m.stop
	m.stop = nil
	m.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// logWriter sends the Syncers' warnings to the test's log.
type logWriter struct{ tb testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func (m *member) createNamespace(tb testing.TB, ns string) {
	tb.Helper()
	_, err := m.kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatalf("%s: namespace %s: %v", m.name, ns, err)
	}
}

// namespace creates ns in the named members.
func (cs *clusterset) namespace(tb testing.TB, ns string, members ...string) {
	tb.Helper()
	for _, n := range members {
		cs.members[n].createNamespace(tb, ns)
	}
}

// service creates a Service with TCP ports named "p<port>"; clusterIP
// "None" makes it headless.
func (m *member) service(tb testing.TB, ns, name, clusterIP string, ports ...int32) *corev1.Service {
	tb.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP},
	}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Port: p, Protocol: corev1.ProtocolTCP})
	}
	got, err := m.kc.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("%s: Service %s/%s: %v", m.name, ns, name, err)
	}
	return got
}

// updateService applies change to the Service ns/name.
func (m *member) updateService(tb testing.TB, ns, name string, change func(*corev1.Service)) {
	tb.Helper()
	ctx := context.Background()
	svc, err := m.kc.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	change(svc)
	if _, err := m.kc.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		tb.Fatalf("%s: updating Service %s/%s: %v", m.name, ns, name, err)
	}
}

// endpoint is a test backend: address, pod, hostname ("" for none), ready.
type endpoint struct {
	addr, pod, hostname string
	ready               bool
}

// writeSlice creates or replaces the EndpointSlice sliceName of service
// svc, as the EndpointSlice controller would.
func (m *member) writeSlice(tb testing.TB, ns, svc, sliceName string, port int32, eps ...endpoint) {
	tb.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: sliceName, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{},
		Ports:       []discoveryv1.EndpointPort{{Name: new(fmt.Sprintf("p%d", port)), Port: &port, Protocol: new(corev1.ProtocolTCP)}},
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: new(e.ready)}}
		if e.pod != "" {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.pod}
		}
		if e.hostname != "" {
			ep.Hostname = new(e.hostname)
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	ctx := context.Background()
	c := m.kc.DiscoveryV1().EndpointSlices(ns)
	cur, err := c.Get(ctx, sliceName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.Create(ctx, s, metav1.CreateOptions{})
	case err == nil:
		s.ResourceVersion = cur.ResourceVersion
		_, err = c.Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		tb.Fatalf("%s: EndpointSlice %s/%s: %v", m.name, ns, sliceName, err)
	}
}

func (m *member) export(tb testing.TB, ns, name string) {
	tb.Helper()
	m.exportAnnotated(tb, ns, name, nil)
}

// exportAnnotated exports ns/name with annotations on its ServiceExport.
func (m *member) exportAnnotated(tb testing.TB, ns, name string, annotations map[string]string) {
	tb.Helper()
	se := &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations}}
	if _, err := m.mcs.MulticlusterV1alpha1().ServiceExports(ns).Create(context.Background(), se, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("%s: ServiceExport %s/%s: %v", m.name, ns, name, err)
	}
}

func (m *member) unexport(tb testing.TB, ns, name string) {
	tb.Helper()
	if err := m.mcs.MulticlusterV1alpha1().ServiceExports(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		tb.Fatalf("%s: deleting ServiceExport %s/%s: %v", m.name, ns, name, err)
	}
}

// importedSlices lists the EndpointSlices the Syncer wrote in ns of
// service name, by source cluster.
func (m *member) importedSlices(tb testing.TB, ns, name string) map[string][]discoveryv1.EndpointSlice {
	tb.Helper()
	l, err := m.kc.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: sliceManagedBy + "," + LabelServiceName + "=" + name,
	})
	if err != nil {
		tb.Fatalf("%s: %v", m.name, err)
	}
	out := map[string][]discoveryv1.EndpointSlice{}
	for _, s := range l.Items {
		out[s.Labels[LabelSourceCluster]] = append(out[s.Labels[LabelSourceCluster]], s)
	}
	return out
}

// serviceImport is the ServiceImport ns/name, nil if there is none.
func (m *member) serviceImport(tb testing.TB, ns, name string) *mcsv1a1.ServiceImport {
	tb.Helper()
	si, err := m.mcs.MulticlusterV1alpha1().ServiceImports(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		tb.Fatalf("%s: %v", m.name, err)
	}
	return si
}

// condition is the ServiceExport ns/name's condition of type t.
func (m *member) condition(tb testing.TB, ns, name, t string) *metav1.Condition {
	tb.Helper()
	se, err := m.mcs.MulticlusterV1alpha1().ServiceExports(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		tb.Fatalf("%s: %v", m.name, err)
	}
	for i := range se.Status.Conditions {
		if se.Status.Conditions[i].Type == t {
			return &se.Status.Conditions[i]
		}
	}
	return nil
}

// eventually polls check until it returns "" or within passes, then
// fails with its last complaint.
func eventually(tb testing.TB, within time.Duration, what string, check func() string) {
	tb.Helper()
	poll(tb, within, 20*time.Millisecond, what, check)
}

// poll is eventually with the polling interval given.
func poll(tb testing.TB, within, every time.Duration, what string, check func() string) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		complaint := check()
		if complaint == "" {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not so after %v: %s", what, within, complaint)
		}
		time.Sleep(every)
	}
}

// fakeGlobalIPs is an in-memory GlobalIPs.
type fakeGlobalIPs struct {
	mu       sync.Mutex
	services map[string]string
	pods     map[string]string
}

func newFakeGlobalIPs() *fakeGlobalIPs {
	return &fakeGlobalIPs{services: map[string]string{}, pods: map[string]string{}}
}

func (f *fakeGlobalIPs) ServiceGlobalIP(ns, name string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ip, ok := f.services[key(ns, name)]
	return ip, ok
}

func (f *fakeGlobalIPs) PodGlobalIP(ns, name string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ip, ok := f.pods[key(ns, name)]
	return ip, ok
}

func (f *fakeGlobalIPs) set(m map[string]string, ns, name, ip string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m[key(ns, name)] = ip
}
