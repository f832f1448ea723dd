package kube

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/deploy"
	"github.com/snorkel-net/snorkel/perf"
)

// settle bounds a wait for something that takes milliseconds on an idle
// machine, an API request or this test's stand-in kubelet answering one:
// beside the rest of `go test ./...` on two busy cores, API servers can
// take seconds. A passing run never waits it out, except where Run's pod
// timeout is itself the subject (20 s there).
const settle = 60 * time.Second

// The API servers run no kubelet, so pods never start by themselves: each
// case plays the kubelet (and Globalnet) as far as it needs, and checks
// the objects Run creates, the timeout it reports for the first pod left
// alone or the cleanup after the test stops it, and that it deletes
// everything. A pod the test plays the kubelet for gets settle to start.
func TestRunAgainstRealAPIServers(t *testing.T) {
	servers := kubetest.Start(t, kubelocal.Options{Name: "c1"}, kubelocal.Options{Name: "c2", ServiceCIDR: "10.88.0.0/16"})
	kubeconfig := servers[0].Kubeconfig + string(filepath.ListSeparator) + servers[1].Kubeconfig
	c1, err := servers[0].Client()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := servers[1].Client()
	if err != nil {
		t.Fatal(err)
	}
	run := func(ctx context.Context, t *testing.T, benchmark string, globalnet bool, podTimeout time.Duration) (*perf.Results, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 3*settle)
		defer cancel()
		return Run(ctx, Options{
			Kubeconfig: kubeconfig,
			Contexts:   [2]string{"c1", "c2"},
			Benchmark:  benchmark,
			Globalnet:  globalnet,
			Reps:       1,
			Duration:   time.Second,
			PodTimeout: podTimeout,
			OutDir:     t.TempDir(),
			Progress:   testWriter{t},
		})
	}

	t.Run("a_server_pod_that_never_starts_fails_the_run_by_name", func(t *testing.T) {
		// Nothing plays the kubelet here, so the short timeout cannot
		// pass early.
		seen := watchPods(t, c2, nil)
		_, err := run(t.Context(), t, perf.BenchmarkThroughput, false, 2*time.Second)
		wantErr(t, err, "pod snorkel-benchmark-", "/iperf3-server in context c2 did not start within 2s", "not scheduled to a node")
		p := seen.get(t, IperfServer)
		ctr := p.Spec.Containers[0]
		if ctr.Image != DefaultImage || strings.Join(ctr.Command, " ") != "iperf3 -s -p 5201" || p.Spec.RestartPolicy != corev1.RestartPolicyNever ||
			p.Labels[LabelName] != "snorkel-benchmark" || p.Labels[LabelRole] != IperfServer {
			t.Errorf("server pod: image %s, command %q, restart %s, labels %v", ctr.Image, ctr.Command, p.Spec.RestartPolicy, p.Labels)
		}
		// Pod admission needs the namespace's default ServiceAccount, which
		// no controller creates here.
		if _, err := c2.CoreV1().ServiceAccounts(p.Namespace).Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
			t.Errorf("the run did not create the default ServiceAccount: %v", err)
		}
		checkCleanedUp(t, c1, c2)
	})

	t.Run("client_pods_aim_at_the_server_pod_ip", func(t *testing.T) {
		seen := watchPods(t, c2, func(p *corev1.Pod) *corev1.PodStatus {
			return &corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.88.7.7"}
		})
		clients := watchPods(t, c1, nil)
		// The timeout covers the server pod, which the stand-in kubelet
		// starts in milliseconds, and then runs out on the client pod, so
		// the test waits it out: long enough for a busy machine, short
		// enough not to idle a minute.
		const podTimeout = 20 * time.Second
		_, err := run(t.Context(), t, perf.BenchmarkThroughput, false, podTimeout)
		wantErr(t, err, "client pod snorkel-benchmark-", "/tcp-1-rep1 in context c1 did not start within "+podTimeout.String())
		seen.get(t, IperfServer)
		p := clients.get(t, "tcp-1-rep1")
		if got, want := strings.Join(p.Spec.Containers[0].Command, " "), "iperf3 -c 10.88.7.7 -p 5201 -t 1 -J -P 1"; got != want {
			t.Errorf("client command %q, want %q", got, want)
		}
		checkCleanedUp(t, c1, c2)
	})

	t.Run("latency_runs_netserver_and_netperf", func(t *testing.T) {
		seen := watchPods(t, c2, func(p *corev1.Pod) *corev1.PodStatus {
			return &corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.88.7.8"}
		})
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		clients := watchPods(t, c1, stopAtClient(stop))
		_, err := run(ctx, t, perf.BenchmarkLatency, false, settle)
		wantStopped(t, err)
		if got := strings.Join(seen.get(t, NetperfServer).Spec.Containers[0].Command, " "); got != "netserver -D -p 12865" {
			t.Errorf("netperf server command %q", got)
		}
		want := "netperf -H 10.88.7.8 -p 12865 -l 1 -t TCP_RR -- -P ,12866 -o " + perf.NetperfRRSelectors
		if got := strings.Join(clients.get(t, "tcp-rr-rep1").Spec.Containers[0].Command, " "); got != want {
			t.Errorf("netperf client command %q, want %q", got, want)
		}
		checkCleanedUp(t, c1, c2)
	})

	t.Run("globalnet_aims_at_the_exported_service_global_ip", func(t *testing.T) {
		ctx := t.Context()
		if err := deploy.ApplyCRDs(ctx, servers[1].Config(), false); err != nil {
			t.Fatal(err)
		}
		dyn, err := dynamic.NewForConfig(servers[1].Config())
		if err != nil {
			t.Fatal(err)
		}
		mcs, err := mcsclient.NewForConfig(servers[1].Config())
		if err != nil {
			t.Fatal(err)
		}
		seen := watchPods(t, c2, func(p *corev1.Pod) *corev1.PodStatus {
			return &corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.88.7.9"}
		})
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		clients := watchPods(t, c1, stopAtClient(stop))
		// Globalnet's part: a GlobalIngressIP for the exported service.
		// It also records the Service, which Run keeps until it has its
		// global IP.
		type export struct {
			name string // of the ServiceExport, namespace/name
			svc  *corev1.Service
		}
		exported := make(chan export, 1)
		go func() {
			for ctx.Err() == nil {
				list, err := mcs.MulticlusterV1alpha1().ServiceExports("").List(ctx, metav1.ListOptions{LabelSelector: LabelName + "=snorkel-benchmark"})
				if err == nil && len(list.Items) > 0 {
					se := list.Items[0]
					svc, err := c2.CoreV1().Services(se.Namespace).Get(ctx, se.Name, metav1.GetOptions{})
					if err != nil {
						t.Errorf("the service of ServiceExport %s/%s: %v", se.Namespace, se.Name, err)
						return
					}
					g := &submv1.GlobalIngressIP{
						ObjectMeta: metav1.ObjectMeta{Name: se.Name, Namespace: se.Namespace},
						Spec:       submv1.GlobalIngressIPSpec{Target: submv1.ClusterIPService, ServiceRef: &corev1.LocalObjectReference{Name: se.Name}},
					}
					u, err := submv1.ToUnstructured(g, "GlobalIngressIP")
					if err != nil {
						t.Error(err)
						return
					}
					created, err := dyn.Resource(submv1.GlobalIngressIPResource).Namespace(se.Namespace).Create(ctx, u, metav1.CreateOptions{})
					if err != nil {
						t.Error(err)
						return
					}
					created.Object["status"] = map[string]any{"allocatedIP": "242.1.255.1"}
					if _, err := dyn.Resource(submv1.GlobalIngressIPResource).Namespace(se.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
						t.Error(err)
					}
					exported <- export{se.Namespace + "/" + se.Name, svc}
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		_, err = run(runCtx, t, perf.BenchmarkThroughput, true, settle)
		wantStopped(t, err)
		seen.get(t, IperfServer)
		// Run goes on once the status is written, maybe before the
		// goroutine that wrote it says so.
		select {
		case e := <-exported:
			if !strings.HasSuffix(e.name, "/"+IperfServer) {
				t.Errorf("exported %s, want the service %s", e.name, IperfServer)
			}
			if svc := e.svc; svc.Labels[LabelName] != "snorkel-benchmark" || svc.Spec.Selector[LabelRole] != IperfServer || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 5201 {
				t.Errorf("service labels %v, selector %v, ports %+v; want the benchmark's, selecting the server pod on 5201", svc.Labels, svc.Spec.Selector, svc.Spec.Ports)
			}
		case <-time.After(settle):
			t.Fatal("no ServiceExport was created")
		}
		if got := strings.Join(clients.get(t, "tcp-1-rep1").Spec.Containers[0].Command, " "); !strings.HasPrefix(got, "iperf3 -c 242.1.255.1 ") {
			t.Errorf("client command %q, want it aimed at the global IP 242.1.255.1", got)
		}
		checkCleanedUp(t, c1, c2)
		if list, err := mcs.MulticlusterV1alpha1().ServiceExports("").List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
			t.Errorf("ServiceExports left: %v %v", list, err)
		}
		if list, err := c2.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: LabelName + "=snorkel-benchmark"}); err != nil || len(list.Items) != 0 {
			t.Errorf("Services left: %v %v", list, err)
		}
	})
}

func TestClientCommands(t *testing.T) {
	d := 10 * time.Second
	for _, w := range Workloads(perf.BenchmarkAll) {
		got := strings.Join(clientCommand(w, "10.9.0.11", d), " ")
		want := map[string]string{
			perf.WorkloadTCP1:     "iperf3 -c 10.9.0.11 -p 5201 -t 10 -J -P 1",
			perf.WorkloadTCP1Rev:  "iperf3 -c 10.9.0.11 -p 5201 -t 10 -J -P 1 -R",
			perf.WorkloadTCP10:    "iperf3 -c 10.9.0.11 -p 5201 -t 10 -J -P 10 -w 256K",
			perf.WorkloadTCP10Rev: "iperf3 -c 10.9.0.11 -p 5201 -t 10 -J -P 10 -w 256K -R",
			perf.WorkloadRR:       "netperf -H 10.9.0.11 -p 12865 -l 10 -t TCP_RR -- -P ,12866 -o " + perf.NetperfRRSelectors,
		}[w.Name]
		if got != want {
			t.Errorf("%s: %q, want %q", w.Name, got, want)
		}
	}
	var names []string
	for _, w := range Workloads(perf.BenchmarkAll) {
		names = append(names, w.Name)
	}
	if want := []string{"tcp-1", "tcp-1-rev", "tcp-10", "tcp-10-rev", "tcp-rr"}; !slices.Equal(names, want) {
		t.Errorf("workloads %v, want %v: UDP and ping need tools of the lab", names, want)
	}
}

// stopAtClient is a kubelet that stops the run, by calling stop, as soon as
// a client pod exists: a case about what Run asks of the client pod need
// not wait out the pod's start timeout, which
// client_pods_aim_at_the_server_pod_ip checks.
func stopAtClient(stop context.CancelFunc) func(*corev1.Pod) *corev1.PodStatus {
	return func(*corev1.Pod) *corev1.PodStatus {
		stop()
		return nil
	}
}

// wantStopped checks that Run failed because stopAtClient stopped it.
func wantStopped(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v; want it stopped by the test once the client pod existed", err)
	}
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("Run succeeded without a kubelet")
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q lacks %q", err, p)
		}
	}
}

// seenPods collects the run's pods as they appear.
type seenPods struct {
	ch   chan *corev1.Pod
	pods map[string]*corev1.Pod
}

// watchPods records every pod of the benchmark created in cs and, when
// status is set and returns a status, writes it, as a kubelet would. (A
// watch would miss nothing, but a fresh API server's watch cache refuses
// watches for a while.)
func watchPods(t *testing.T, cs kubernetes.Interface, status func(*corev1.Pod) *corev1.PodStatus) *seenPods {
	s := &seenPods{ch: make(chan *corev1.Pod, 16), pods: map[string]*corev1.Pod{}}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	go func() {
		done := map[string]bool{}
		for ctx.Err() == nil {
			list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: LabelName + "=snorkel-benchmark"})
			if err == nil {
				for i := range list.Items {
					p := &list.Items[i]
					if done[p.Namespace+"/"+p.Name] {
						continue
					}
					done[p.Namespace+"/"+p.Name] = true
					s.ch <- p.DeepCopy()
					if status == nil {
						continue
					}
					if st := status(p); st != nil {
						p.Status = *st
						if _, err := cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
							t.Errorf("set the status of pod %s: %v", p.Name, err)
						}
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return s
}

// get returns the pod of that name once seen; the last poll may see it a
// moment after Run returned.
func (s *seenPods) get(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	timeout := time.After(settle)
	for {
		if p, ok := s.pods[name]; ok {
			return p
		}
		select {
		case p := <-s.ch:
			s.pods[p.Name] = p
		case <-timeout:
			t.Fatalf("no pod %s was created", name)
		}
	}
}

// checkCleanedUp checks that no pod of the benchmark is left in either
// cluster and that its namespaces are gone or going: with no namespace
// controller here, a deleted namespace stays Terminating.
func checkCleanedUp(t *testing.T, clusters ...kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	for i, cs := range clusters {
		nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: LabelName + "=snorkel-benchmark"})
		if err != nil {
			t.Fatal(err)
		}
		deleting := map[string]bool{}
		for _, ns := range nss.Items {
			if ns.DeletionTimestamp == nil {
				t.Errorf("cluster %d: namespace %s left behind", i+1, ns.Name)
			} else {
				deleting[ns.Name] = true
			}
		}
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: LabelName + "=snorkel-benchmark"})
		if err != nil {
			t.Fatal(err)
		}
		// A pod whose create was in flight when Run stopped exists though
		// its create reported the cancellation; the deletion of its
		// namespace removes it (these API servers run no namespace
		// controller to finish that).
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && !deleting[p.Namespace] {
				t.Errorf("cluster %d: pod %s/%s left behind", i+1, p.Namespace, p.Name)
			}
		}
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
