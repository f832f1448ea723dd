package agent

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
)

// The benchmark cluster: benchNamespaces × benchPodsPerNS pods, and in
// each of the first benchExportNS namespaces benchSvcsPerNS exported
// ClusterIP services.
const (
	benchNamespaces = 100
	benchPodsPerNS  = 100
	benchExportNS   = 10
	benchSvcsPerNS  = 10
)

// BenchmarkAgentMemory10kPods runs a whole agent — leader election, the
// broker's watches, Globalnet's IPAM and the service sync — on a cluster
// of 10,000 pods with 100 exported services, and reports the heap it adds
// once everything is allocated and exported.
func BenchmarkAgentMemory10kPods(b *testing.B) {
	servers := kubetest.Start(b, kubelocal.Options{Name: "broker"}, kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"})
	ctx := context.Background()
	d, err := broker.Deploy(ctx, servers[0].Config(), broker.BrokerOptions{Globalnet: true})
	if err != nil {
		b.Fatal(err)
	}
	member, err := broker.Join(ctx, servers[1].Config(), d.Info, broker.JoinOptions{
		ClusterID: "c1", CableDriver: transport.ESP, ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"},
	})
	if err != nil {
		b.Fatal(err)
	}
	populateCluster(b, servers[1])
	mcsB, err := mcsclient.NewForConfig(servers[0].Config())
	if err != nil {
		b.Fatal(err)
	}

	var syncTotal time.Duration
	var liveTotal uint64
	b.ResetTimer()
	for i := range b.N {
		base := heapLive()
		start := time.Now()
		dp := &lastConfig{}
		a, err := New(Config{
			Member:      member,
			LocalConfig: servers[1].Config(),
			Identity:    fmt.Sprintf("bench-%d", i),
			PrivateIP:   "127.0.0.31",
			Dataplane:   dp,
			Logger:      slog.New(slog.DiscardHandler),
		})
		if err != nil {
			b.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			a.Run(runCtx)
		}()
		want := benchExportNS * benchSvcsPerNS
		deadline := time.Now().Add(5 * time.Minute)
		for {
			cfg := dp.get()
			imports, err := mcsB.MulticlusterV1alpha1().ServiceImports(d.Info.Namespace()).List(ctx, metav1.ListOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if cfg.Globalnet != nil && len(cfg.Globalnet.Ingress) == want && len(imports.Items) == want {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("not synced after 5 minutes: data plane %+v, %d imports on the broker of %d", cfg.Globalnet, len(imports.Items), want)
			}
			time.Sleep(100 * time.Millisecond)
		}
		syncTotal += time.Since(start)
		liveTotal += heapLive() - min(base, heapLive())
		stop()
		<-done
	}
	b.StopTimer()
	b.ReportMetric(float64(syncTotal.Milliseconds())/float64(b.N), "sync-ms")
	b.ReportMetric(float64(liveTotal)/float64(b.N)/(1<<20), "heap-live-MB")
}

// lastConfig is a Dataplane that keeps only the latest configuration, so
// that it adds no memory of its own as configurations come.
type lastConfig struct {
	mu  sync.Mutex
	cfg gateway.Config
}

func (l *lastConfig) Apply(_ context.Context, s *gateway.Spec) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cfg = s.Config()
	return nil
}

func (l *lastConfig) Status() []RemoteStatus { return nil }

func (l *lastConfig) get() gateway.Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg
}

// heapLive is the heap's live bytes after a collection.
func heapLive() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// populateCluster writes the benchmark's pods (running, with addresses)
// and its exported services with their EndpointSlices, eight requests at
// a time.
func populateCluster(b *testing.B, srv *kubelocal.Server) {
	b.Helper()
	ctx := context.Background()
	kc, err := srv.Client()
	if err != nil {
		b.Fatal(err)
	}
	mcs, err := mcsclient.NewForConfig(srv.Config())
	if err != nil {
		b.Fatal(err)
	}
	jobs := make(chan func() error)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 8 {
		wg.Go(func() {
			for job := range jobs {
				if err := job(); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for n := range benchNamespaces {
		ns := fmt.Sprintf("ns-%03d", n)
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		for k := range benchPodsPerNS {
			name, ip := fmt.Sprintf("pod-%03d", k), fmt.Sprintf("10.8.%d.%d", n, k+1)
			jobs <- func() error { return benchPod(ctx, kc, ns, name, ip) }
		}
		if n < benchExportNS {
			for k := range benchSvcsPerNS {
				name := fmt.Sprintf("svc-%d", k)
				jobs <- func() error { return benchService(ctx, kc, mcs, ns, name) }
			}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

func benchPod(ctx context.Context, kc kubernetes.Interface, ns, name, ip string) error {
	p, err := kc.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	_, err = kc.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

func benchService(ctx context.Context, kc kubernetes.Interface, mcs mcsclient.Interface, ns, name string) error {
	if _, err := kc.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-x1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.8.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := mcs.MulticlusterV1alpha1().ServiceExports(ns).Create(ctx, &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, metav1.CreateOptions{})
	return err
}
