package servicesync

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// benchServices is the number of services each of c2 and c3 exports.
const benchServices = 1000

// BenchmarkExportPropagation exports benchServices services from each of
// c2 and c3 at once and reports, over all the exports, the time from a
// ServiceExport's creation (the moment its Create request is sent) to
// its cluster's EndpointSlice appearing in c1: the median and the 99th
// percentile in milliseconds.
func BenchmarkExportPropagation(b *testing.B) {
	cs := startClusterset(b)
	for _, n := range []string{"c1", "c2", "c3"} {
		cs.run(n, nil)
	}
	exporters := []*member{cs.members["c2"], cs.members["c3"]}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		ns := fmt.Sprintf("bench-%d", i)
		cs.namespace(b, ns, "c1", "c2", "c3")
		for _, m := range exporters {
			parallel(b, benchServices, func(j int) error {
				name := fmt.Sprintf("svc-%04d", j)
				svc := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
					Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
				}
				if _, err := m.kc.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
					return err
				}
				eps := &discoveryv1.EndpointSlice{
					ObjectMeta:  metav1.ObjectMeta{Name: name + "-x1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
					AddressType: discoveryv1.AddressTypeIPv4,
					Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
				}
				_, err := m.kc.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), eps, metav1.CreateOptions{})
				return err
			})
		}

		seen := newArrivals()
		inf := discoveryinformers.NewFilteredEndpointSliceInformer(cs.members["c1"].kc, ns, 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.LabelSelector = sliceManagedBy })
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
			eps := obj.(*discoveryv1.EndpointSlice)
			seen.arrive(eps.Labels[LabelSourceCluster] + "/" + eps.Labels[LabelServiceName])
		}}); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go inf.RunWithContext(ctx)
		cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)

		b.StartTimer()
		start := time.Now()
		var wg sync.WaitGroup
		for _, m := range exporters {
			wg.Go(func() {
				parallel(b, benchServices, func(j int) error {
					name := fmt.Sprintf("svc-%04d", j)
					seen.start(m.name + "/" + name)
					se := &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
					_, err := m.mcs.MulticlusterV1alpha1().ServiceExports(ns).Create(context.Background(), se, metav1.CreateOptions{})
					return err
				})
			})
		}
		wg.Wait()
		if !seen.wait(2*benchServices, 10*time.Minute) {
			b.Fatalf("after 10 minutes c1 has %d of the %d exported services' slices", seen.count(), 2*benchServices)
		}
		total := time.Since(start)
		b.StopTimer()
		cancel()

		lat := seen.latencies()
		b.ReportMetric(percentile(lat, 50), "p50-ms")
		b.ReportMetric(percentile(lat, 99), "p99-ms")
		b.ReportMetric(float64(2*benchServices)/total.Seconds(), "exports/s")
	}
}

// parallel runs f(0..n-1) on 8 goroutines and fails b on the first error.
func parallel(b *testing.B, n int, f func(i int) error) {
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, 1)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// arrivals records when each export started and when c1 first saw it.
type arrivals struct {
	mu      sync.Mutex
	cond    *sync.Cond
	started map[string]time.Time
	arrived map[string]time.Time
}

func newArrivals() *arrivals {
	a := &arrivals{started: map[string]time.Time{}, arrived: map[string]time.Time{}}
	a.cond = sync.NewCond(&a.mu)
	return a
}

func (a *arrivals) start(k string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.started[k] = time.Now()
}

func (a *arrivals) arrive(k string) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.arrived[k]; !ok {
		a.arrived[k] = now
		a.cond.Broadcast()
	}
}

func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.arrived)
}

// wait reports whether n arrivals come within d.
func (a *arrivals) wait(n int, d time.Duration) bool {
	timer := time.AfterFunc(d, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.cond.Broadcast()
	})
	defer timer.Stop()
	deadline := time.Now().Add(d)
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.arrived) < n && time.Now().Before(deadline) {
		a.cond.Wait()
	}
	return len(a.arrived) >= n
}

// latencies are the arrival delays in milliseconds, sorted.
func (a *arrivals) latencies() []float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]float64, 0, len(a.arrived))
	for k, t := range a.arrived {
		if s, ok := a.started[k]; ok {
			out = append(out, float64(t.Sub(s).Microseconds())/1000)
		}
	}
	slices.Sort(out)
	return out
}

// percentile of sorted values (nearest rank).
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// BenchmarkSingleExportPropagation exports one ClusterIP service from c2
// at a time and reports the time from the ServiceExport's Create request
// to c1 holding the whole import (its ServiceImport listing c2 and c2's
// EndpointSlice), then the same for the unexport until c1 holds nothing:
// the median and the 99th percentile of each, in milliseconds. This is
// the figure behind "a change reaches every member within 2 s"; the
// tests themselves wait far longer, so a loaded machine cannot fail them.
func BenchmarkSingleExportPropagation(b *testing.B) {
	cs := startClusterset(b)
	for _, n := range []string{"c1", "c2", "c3"} {
		cs.run(n, nil)
	}
	c1, c2 := cs.members["c1"], cs.members["c2"]
	const ns = "single"
	cs.namespace(b, ns, "c1", "c2", "c3")
	var exports, unexports []float64
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		name := fmt.Sprintf("svc-%d", i)
		ip := c2.service(b, ns, name, "", 80).Spec.ClusterIP
		c2.writeSlice(b, ns, name, name+"-x1", 8080, endpoint{addr: "10.2.0.5", ready: true})
		b.StartTimer()

		start := time.Now()
		c2.export(b, ns, name)
		poll(b, time.Minute, 2*time.Millisecond, name+" imported in c1", func() string {
			return clusterIPImport(b, c1, ns, name, map[string]string{"c2": ip}, true, "p80:80/TCP")
		})
		exports = append(exports, float64(time.Since(start).Microseconds())/1000)

		start = time.Now()
		c2.unexport(b, ns, name)
		poll(b, time.Minute, 2*time.Millisecond, name+" gone from c1", func() string { return nothingImported(b, c1, ns, name) })
		unexports = append(unexports, float64(time.Since(start).Microseconds())/1000)
	}
	b.StopTimer()
	slices.Sort(exports)
	slices.Sort(unexports)
	b.ReportMetric(percentile(exports, 50), "export-p50-ms")
	b.ReportMetric(percentile(exports, 99), "export-p99-ms")
	b.ReportMetric(percentile(unexports, 50), "unexport-p50-ms")
	b.ReportMetric(percentile(unexports, 99), "unexport-p99-ms")
}
