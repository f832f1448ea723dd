package globalnet

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/deploy"
)

// The benchmark cluster: benchNamespaces × benchPodsPerNS pods; in each of
// the first benchExportNS namespaces, benchSvcsPerNS exported services, the
// last of them headless and selecting benchPodsPerNS/10 pods; three
// namespace and three pod-selector GlobalEgressIPs.
const (
	benchNamespaces = 100
	benchPodsPerNS  = 100
	benchExportNS   = 10
	benchSvcsPerNS  = 10
	benchIngress    = benchExportNS * (benchSvcsPerNS - 1 + benchPodsPerNS/10)
)

// BenchmarkIPAMMemory10kPods measures an IPAM over 10,000 pods: the time
// from Run to the first rules that carry every allocation (sync-ms; the
// first round creates the 190 GlobalIngressIPs, later rounds read them back
// as on a failover), and the heap it holds once synced (heap-bytes).
//
//	go test -run '^$' -bench IPAMMemory10kPods -benchtime 3x ./controller/globalnet/
func BenchmarkIPAMMemory10kPods(b *testing.B) {
	servers := kubetest.Start(b, kubelocal.Options{Name: "bench", ServiceCIDR: "10.88.0.0/16"})
	must(b, deploy.ApplyCRDs(ctx, servers[0].Config(), false))
	c := newCluster(b, servers[0].Config())
	populate(b, c)

	var syncTotal time.Duration
	var inuseTotal, liveTotal uint64
	b.ResetTimer()
	for range b.N {
		baseInuse, baseLive := heapInUse()
		start := time.Now()
		r := startIPAM(b, c, "242.1.0.0/16", netip.MustParsePrefix(remoteGlobal))
		deadline := time.Now().Add(5 * time.Minute)
		for {
			rules := r.last()
			if len(rules.Ingress) == benchIngress && len(rules.Pools) == 6 && len(rules.ClusterEgress) == v1.DefaultClusterEgressIPs {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("not synced after 5 minutes: %d ingress rules of %d, %d pools", len(rules.Ingress), benchIngress, len(rules.Pools))
			}
			time.Sleep(10 * time.Millisecond)
		}
		syncTotal += time.Since(start)
		inuse, live := heapInUse()
		inuseTotal += inuse - min(baseInuse, inuse)
		liveTotal += live - min(baseLive, live)
		r.stop(b)
	}
	b.StopTimer()
	b.ReportMetric(float64(syncTotal.Milliseconds())/float64(b.N), "sync-ms")
	b.ReportMetric(float64(inuseTotal)/float64(b.N), "heap-inuse-bytes")
	b.ReportMetric(float64(liveTotal)/float64(b.N), "heap-live-bytes")
	b.ReportMetric(float64(liveTotal)/float64(b.N)/benchNamespaces/benchPodsPerNS, "live-bytes/pod")
}

// heapInUse returns the heap's spans in use and its live bytes (HeapInuse,
// HeapAlloc) after a collection.
func heapInUse() (uint64, uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.HeapAlloc
}

// populate writes the benchmark cluster, a few requests at a time.
func populate(b *testing.B, c *cluster) {
	b.Helper()
	jobs := make(chan func() error, 256)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for job := range jobs {
				if err := job(); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for n := range benchNamespaces {
		ns := fmt.Sprintf("ns-%03d", n)
		c.namespace(b, ns)
		for k := range benchPodsPerNS {
			name, ip := fmt.Sprintf("pod-%03d", k), fmt.Sprintf("10.8.%d.%d", n, k+1)
			lbls := map[string]string{"app": fmt.Sprintf("a%d", k%10)}
			jobs <- func() error { return c.makePod(ns, name, ip, corev1.PodRunning, lbls) }
		}
		if n < benchExportNS {
			for k := range benchSvcsPerNS {
				name := fmt.Sprintf("svc-%d", k)
				headless := k == benchSvcsPerNS-1
				jobs <- func() error {
					if _, err := c.makeService(ns, name, headless, map[string]string{"app": "a0"}); err != nil {
						return err
					}
					return c.makeExport(ns, name)
				}
			}
		}
		if n < 6 {
			g := &v1.GlobalEgressIP{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns}}
			if n >= 3 {
				g.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a1"}}
			}
			u, err := v1.ToUnstructured(g, "GlobalEgressIP")
			must(b, err)
			c.create(b, geip, u)
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}
