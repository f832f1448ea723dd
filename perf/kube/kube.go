// Package kube is the Kubernetes mode of `snorkel benchmark`: it measures
// between pods of two real clusters, as `subctl benchmark` does. It
// creates a namespace in each cluster, a server pod (iperf3, or netperf's
// netserver) in the second, and one client pod per measurement in the
// first, aimed at the server pod's IP or, with Globalnet, at the global IP
// of an exported ClusterIP service in front of it; it reads each client's
// output from its log, and deletes everything it created at the end.
//
// The results are perf.Results, written as results.json, report.md and
// plots like the lab's. Nothing here is safe for concurrent use.
package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/perf"
)

// DefaultImage is the image of the server and client pods: Submariner's
// nettest, which has iperf3 and netperf, as `subctl benchmark` uses.
const DefaultImage = "quay.io/submariner/nettest:0.24.0"

// DefaultPodTimeout is how long a pod may take to start, and a client pod
// beyond its traffic time to finish.
const DefaultPodTimeout = 2 * time.Minute

// Names and ports of what Run creates.
const (
	// NamespacePrefix starts the name of the namespace Run creates in
	// each cluster; the API server completes it.
	NamespacePrefix = "snorkel-benchmark-"
	// LabelName is set to "snorkel-benchmark" on every object, and
	// LabelRole to the pod's role.
	LabelName = "app.kubernetes.io/name"
	LabelRole = "app.kubernetes.io/component"
	labelApp  = "snorkel-benchmark"

	IperfServer   = "iperf3-server"
	NetperfServer = "netperf-server"
	iperfPort     = 5201
	// netperf's control port, and the data port the client asks for, so
	// that a Service can carry both.
	netperfPort     = 12865
	netperfDataPort = 12866
)

// Options configures Run.
type Options struct {
	// Kubeconfig is the kubeconfig file, or files separated as in
	// $KUBECONFIG; default $KUBECONFIG, then ~/.kube/config.
	Kubeconfig string
	// Contexts are the client's cluster and the server's.
	Contexts [2]string
	// Benchmark is perf.BenchmarkThroughput, perf.BenchmarkLatency or
	// perf.BenchmarkAll.
	Benchmark string
	// Globalnet reaches the server through the global IP of an exported
	// service instead of its pod IP.
	Globalnet bool
	// Reps is the number of repetitions of each workload; default 3.
	Reps int
	// Duration is the traffic time of each measurement, whole seconds;
	// default 10s.
	Duration time.Duration
	// Image is the pods' image; default DefaultImage.
	Image string
	// PodTimeout: default DefaultPodTimeout.
	PodTimeout time.Duration
	// OutDir receives results.json, report.md, the plots and each
	// client's log; it is created.
	OutDir  string
	Command string
	// Progress receives a line per step; nil discards them.
	Progress io.Writer
}

func (o *Options) applyDefaults() {
	if o.Benchmark == "" {
		o.Benchmark = perf.BenchmarkThroughput
	}
	if o.Reps == 0 {
		o.Reps = 3
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.PodTimeout == 0 {
		o.PodTimeout = DefaultPodTimeout
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

func (o *Options) validate() error {
	var errs []error
	if !slices.Contains(perf.Benchmarks, o.Benchmark) {
		errs = append(errs, fmt.Errorf("benchmark %q: use one of %s", o.Benchmark, strings.Join(perf.Benchmarks, ", ")))
	}
	if o.Contexts[0] == "" || o.Contexts[1] == "" {
		errs = append(errs, errors.New("kubecontexts: give the client's context and the server's"))
	}
	if o.Reps < 1 {
		errs = append(errs, fmt.Errorf("reps %d: give at least 1", o.Reps))
	}
	if o.Duration < time.Second || o.Duration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("duration %s: give a whole number of seconds, at least 1s", o.Duration))
	}
	if o.OutDir == "" {
		errs = append(errs, errors.New("out: give an output directory"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kube: %w", err)
	}
	return nil
}

// Workloads returns the workloads Run measures for a benchmark: iperf3's
// TCP ones as the lab runs them, and netperf's TCP_RR for latency.
func Workloads(benchmark string) []perf.Workload {
	var out []perf.Workload
	for _, w := range perf.WorkloadsOf(benchmark) {
		switch {
		case w.Primary == perf.MetricThroughput.Name:
			out = append(out, w)
		case w.Name == perf.WorkloadRR:
			out = append(out, perf.Workload{
				Name:      perf.WorkloadRR,
				Benchmark: perf.BenchmarkLatency,
				Title:     "TCP request/response (netperf)",
				Description: "netperf TCP_RR from a client pod to the netserver pod, one 1-byte transaction in flight, for the repetition's time; " +
					"netperf's own latency percentiles (it reports no p99.9)",
				Metrics: []perf.Metric{perf.MetricTransactions, perf.MetricP50, perf.MetricP99, perf.MetricRTTMean},
				Primary: perf.MetricP50.Name,
			})
		}
	}
	return out
}

// cluster is one side of the run.
type cluster struct {
	context string
	cfg     *rest.Config
	cs      kubernetes.Interface
	ns      string
}

func (c *cluster) String() string { return "context " + c.context }

// Run measures between a client pod in the first context's cluster and a
// server pod in the second's, writes results.json, report.md and the
// plots to o.OutDir, and deletes what it created, also when it fails. It
// returns the results measured so far with any error.
func Run(ctx context.Context, o Options) (*perf.Results, error) {
	o.applyDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	var sides [2]*cluster
	for i, name := range o.Contexts {
		cfg, err := loadContext(o.Kubeconfig, name)
		if err != nil {
			return nil, err
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("kube: context %s: %w", name, err)
		}
		sides[i] = &cluster{context: name, cfg: cfg, cs: cs}
	}
	if err := os.MkdirAll(filepath.Join(o.OutDir, "raw"), 0o755); err != nil {
		return nil, fmt.Errorf("kube: output directory: %w", err)
	}
	r := &runner{o: o, client: sides[0], server: sides[1]}
	defer r.cleanup()
	res, err := r.run(ctx)
	if res != nil {
		res.Finished = time.Now().UTC()
		if ferr := res.Finish(o.OutDir); ferr != nil && err == nil {
			err = ferr
		}
	}
	return res, err
}

// loadContext returns the client configuration of a kubeconfig context;
// path may list several files, as $KUBECONFIG does.
func loadContext(path, name string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.Precedence = filepath.SplitList(path)
		rules.ExplicitPath = ""
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: name}).ClientConfig()
	if err != nil {
		where := "the kubeconfig"
		if path != "" {
			where = "--kubeconfig " + path
		}
		return nil, fmt.Errorf("kube: %s, context %s: %w", where, name, err)
	}
	return cfg, nil
}

// runner is one Run: the two sides and what it created on them.
type runner struct {
	o              Options
	client, server *cluster
	// created lists what to delete, in creation order.
	created []createdObject
}

type createdObject struct {
	side   *cluster
	kind   string // pod, service, serviceexport, namespace
	name   string
	delete func(ctx context.Context) error
}

func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(r.o.Progress, format+"\n", args...)
}

func (r *runner) run(ctx context.Context) (*perf.Results, error) {
	workloads := Workloads(r.o.Benchmark)
	res := &perf.Results{
		Benchmark: r.o.Benchmark,
		Command:   r.o.Command,
		Started:   time.Now().UTC(),
		Machine:   perf.ReadMachine(ctx),
		Settings: perf.Settings{
			Reps:        r.o.Reps,
			DurationSec: r.o.Duration.Seconds(),
			Topology:    fmt.Sprintf("Kubernetes: client pods in the cluster of context %s, server pod in the cluster of context %s (image %s); the machine is where the command ran", r.client.context, r.server.context, r.o.Image),
		},
		Workloads: workloads,
	}
	sys := perf.SystemInfo{
		Name:        r.client.context + "→" + r.server.context,
		Kind:        "kubernetes",
		Globalnet:   r.o.Globalnet,
		Description: "the clusters' own data path between a pod of each",
	}
	for _, c := range []*cluster{r.client, r.server} {
		if err := r.createNamespace(ctx, c); err != nil {
			return nil, err
		}
	}
	need := map[string]bool{}
	for _, w := range workloads {
		need[w.Benchmark] = true
	}
	targets := map[string]string{}
	servers := []struct {
		benchmark, name string
		command         []string
		ports           []int32
	}{
		{perf.BenchmarkThroughput, IperfServer, []string{"iperf3", "-s", "-p", strconv.Itoa(iperfPort)}, []int32{iperfPort}},
		{perf.BenchmarkLatency, NetperfServer, []string{"netserver", "-D", "-p", strconv.Itoa(netperfPort)}, []int32{netperfPort, netperfDataPort}},
	}
	for _, s := range servers {
		if !need[s.benchmark] {
			continue
		}
		pod, err := r.startServer(ctx, s.name, s.command, s.ports)
		if err != nil {
			return nil, err
		}
		target := pod.Status.PodIP
		sys.Server = fmt.Sprintf("pod %s/%s (%s) in context %s", pod.Namespace, pod.Name, pod.Status.PodIP, r.server.context)
		if r.o.Globalnet {
			if target, err = r.exportServer(ctx, s.name, s.ports); err != nil {
				return nil, err
			}
			sys.Server += ", reached at the global IP " + target + " of service " + s.name
		}
		targets[s.benchmark] = target
	}
	sys.Client = "pods in namespace " + r.client.ns + " of context " + r.client.context
	res.Systems = []perf.SystemInfo{sys}

	order := 0
	for rep := 1; rep <= r.o.Reps; rep++ {
		for _, w := range workloads {
			order++
			m, err := r.measure(ctx, w, rep, order, sys.Name, targets[w.Benchmark])
			res.Runs = append(res.Runs, m)
			step := fmt.Sprintf("[%d/%d] %s rep %d %s:", order, r.o.Reps*len(workloads), sys.Name, rep, w.Name)
			if err != nil {
				r.progress("%s %v", step, err)
				return res, err
			}
			if m.Error != "" {
				r.progress("%s FAILED: %s", step, m.Error)
			} else {
				r.progress("%s %s", step, summary(w, m.Values))
			}
		}
	}
	return res, nil
}

func summary(w perf.Workload, v map[string]float64) string {
	if w.Primary == perf.MetricThroughput.Name {
		return fmt.Sprintf("%.2f Gb/s, %.0f retransmits", v[perf.MetricThroughput.Name]/1e9, v[perf.MetricRetransmits.Name])
	}
	return fmt.Sprintf("p50 %.0f µs, p99 %.0f µs, %.0f transactions/s", v[perf.MetricP50.Name], v[perf.MetricP99.Name], v[perf.MetricTransactions.Name])
}

// createNamespace creates the run's namespace in c and its default
// ServiceAccount, which a cluster's controller manager would create but
// pod admission needs at once.
func (r *runner) createNamespace(ctx context.Context, c *cluster) error {
	ns, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: NamespacePrefix,
		Labels:       map[string]string{LabelName: labelApp},
	}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("kube: create a namespace in %s: %w", c, err)
	}
	c.ns = ns.Name
	r.created = append(r.created, createdObject{side: c, kind: "namespace", name: ns.Name, delete: func(ctx context.Context) error {
		return c.cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
	}})
	r.progress("created namespace %s in %s", ns.Name, c)
	_, err = c.cs.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube: create the default ServiceAccount of %s in %s: %w", ns.Name, c, err)
	}
	return nil
}

// pod returns the spec of one of the run's pods.
func (r *runner) pod(name, role string, command []string, ports []int32) *corev1.Pod {
	automount := false
	grace := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelName: labelApp, LabelRole: role}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &automount,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            role,
				Image:           r.o.Image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         command,
			}},
		},
	}
	for _, port := range ports {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: port, Protocol: corev1.ProtocolTCP})
	}
	return p
}

// createPod creates a pod in c and records it for deletion.
func (r *runner) createPod(ctx context.Context, c *cluster, p *corev1.Pod) error {
	if _, err := c.cs.CoreV1().Pods(c.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kube: create pod %s/%s in %s: %w", c.ns, p.Name, c, err)
	}
	r.created = append(r.created, createdObject{side: c, kind: "pod", name: p.Name, delete: func(ctx context.Context) error {
		zero := int64(0)
		return c.cs.CoreV1().Pods(c.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}})
	return nil
}

// startServer creates a server pod in the server's cluster and waits until
// it runs with an IP.
func (r *runner) startServer(ctx context.Context, name string, command []string, ports []int32) (*corev1.Pod, error) {
	c := r.server
	if err := r.createPod(ctx, c, r.pod(name, name, command, ports)); err != nil {
		return nil, err
	}
	r.progress("created pod %s/%s in %s; waiting for it to run", c.ns, name, c)
	p, err := r.waitPod(ctx, c, name, r.o.PodTimeout, func(p *corev1.Pod) (bool, error) {
		switch p.Status.Phase {
		case corev1.PodRunning:
			return p.Status.PodIP != "", nil
		case corev1.PodSucceeded, corev1.PodFailed:
			return false, fmt.Errorf("server pod %s/%s in %s ended (%s): %s", c.ns, name, c, p.Status.Phase, podReason(p))
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	r.progress("pod %s/%s runs at %s", c.ns, name, p.Status.PodIP)
	return p, nil
}

// exportServer puts a ClusterIP service in front of a server pod, exports
// it, and waits for Globalnet to give it a global IP.
func (r *runner) exportServer(ctx context.Context, name string, ports []int32) (string, error) {
	c := r.server
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelName: labelApp}},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{LabelName: labelApp, LabelRole: name}},
	}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "tcp-" + strconv.Itoa(int(p)), Port: p, TargetPort: intstr.FromInt32(p), Protocol: corev1.ProtocolTCP})
	}
	if _, err := c.cs.CoreV1().Services(c.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("kube: create service %s/%s in %s: %w", c.ns, name, c, err)
	}
	r.created = append(r.created, createdObject{side: c, kind: "service", name: name, delete: func(ctx context.Context) error {
		return c.cs.CoreV1().Services(c.ns).Delete(ctx, name, metav1.DeleteOptions{})
	}})
	mcs, err := mcsclient.NewForConfig(c.cfg)
	if err != nil {
		return "", fmt.Errorf("kube: %s: %w", c, err)
	}
	se := &mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelName: labelApp}}}
	if _, err := mcs.MulticlusterV1alpha1().ServiceExports(c.ns).Create(ctx, se, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("kube: export service %s/%s in %s (are the Multi-Cluster Services CRDs installed?): %w", c.ns, name, c, err)
	}
	r.created = append(r.created, createdObject{side: c, kind: "serviceexport", name: name, delete: func(ctx context.Context) error {
		return mcs.MulticlusterV1alpha1().ServiceExports(c.ns).Delete(ctx, name, metav1.DeleteOptions{})
	}})
	dyn, err := dynamic.NewForConfig(c.cfg)
	if err != nil {
		return "", fmt.Errorf("kube: %s: %w", c, err)
	}
	r.progress("exported service %s/%s in %s; waiting for its global IP", c.ns, name, c)
	deadline := time.Now().Add(r.o.PodTimeout)
	for {
		u, err := dyn.Resource(submv1.GlobalIngressIPResource).Namespace(c.ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			g, cerr := submv1.FromUnstructured[submv1.GlobalIngressIP](u)
			if cerr == nil && g.Status.AllocatedIP != "" {
				r.progress("service %s/%s has the global IP %s", c.ns, name, g.Status.AllocatedIP)
				return g.Status.AllocatedIP, nil
			}
		} else if !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("kube: GlobalIngressIP %s/%s in %s: %w", c.ns, name, c, err)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("kube: service %s/%s in %s got no global IP (GlobalIngressIP status.allocatedIP) within %s: is Globalnet running in that cluster?", c.ns, name, c, r.o.PodTimeout)
		}
		if err := sleep(ctx, time.Second); err != nil {
			return "", err
		}
	}
}

// measure runs one client pod for workload w and reads its result from
// its log. An error is returned when the pod does not start or finish in
// time, or ctx ends; a client that ran and failed is a measurement with
// its Error set.
func (r *runner) measure(ctx context.Context, w perf.Workload, rep, order int, system, target string) (perf.Measurement, error) {
	c := r.client
	m := perf.Measurement{System: system, Workload: w.Name, Rep: rep, Order: order}
	name := fmt.Sprintf("%s-rep%d", w.Name, rep)
	if err := r.createPod(ctx, c, r.pod(name, "client", clientCommand(w, target, r.o.Duration), nil)); err != nil {
		return m, err
	}
	start := time.Now()
	m.Start = start.UTC()
	started := false
	p, err := r.waitPod(ctx, c, name, r.o.PodTimeout+r.o.Duration, func(p *corev1.Pod) (bool, error) {
		switch p.Status.Phase {
		case corev1.PodSucceeded, corev1.PodFailed:
			return true, nil
		case corev1.PodRunning:
			started = true
		case corev1.PodPending:
			if !started && time.Since(start) > r.o.PodTimeout {
				return false, fmt.Errorf("client pod %s/%s in %s did not start within %s (%s)", c.ns, name, c, r.o.PodTimeout, podReason(p))
			}
		}
		return false, nil
	})
	if err != nil {
		return m, err
	}
	m.Seconds = time.Since(start).Seconds()
	logs, lerr := c.cs.CoreV1().Pods(c.ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	r.deletePod(ctx, c, name)
	if lerr != nil {
		return m, fmt.Errorf("kube: read the log of pod %s/%s in %s: %w", c.ns, name, c, lerr)
	}
	rel := filepath.Join("raw", name+".txt")
	if os.WriteFile(filepath.Join(r.o.OutDir, rel), logs, 0o644) == nil {
		m.Raw = rel
	}
	values, perr := parseClient(w, logs)
	if perr != nil {
		m.Error = perr.Error()
		if p.Status.Phase == corev1.PodFailed {
			m.Error = fmt.Sprintf("pod %s failed (%s): %v", name, podReason(p), perr)
		}
		return m, nil
	}
	m.Values = values
	return m, nil
}

// clientCommand is the client pod's command for workload w.
func clientCommand(w perf.Workload, target string, d time.Duration) []string {
	secs := strconv.Itoa(int(d / time.Second))
	if w.Primary != perf.MetricThroughput.Name {
		return []string{"netperf", "-H", target, "-p", strconv.Itoa(netperfPort), "-l", secs, "-t", "TCP_RR", "--",
			"-P", "," + strconv.Itoa(netperfDataPort), "-o", perf.NetperfRRSelectors}
	}
	cmd := []string{"iperf3", "-c", target, "-p", strconv.Itoa(iperfPort), "-t", secs, "-J"}
	if strings.HasPrefix(w.Name, perf.WorkloadTCP10) {
		cmd = append(cmd, "-P", "10", "-w", "256K")
	} else {
		cmd = append(cmd, "-P", "1")
	}
	if strings.HasSuffix(w.Name, "-rev") {
		cmd = append(cmd, "-R")
	}
	return cmd
}

// parseClient reads a client pod's log.
func parseClient(w perf.Workload, log []byte) (map[string]float64, error) {
	if w.Primary == perf.MetricThroughput.Name {
		r, err := perf.ParseIperfTCP(log)
		if err != nil {
			return nil, err
		}
		return r.Values(), nil
	}
	r, err := perf.ParseNetperfRR(log)
	if err != nil {
		return nil, err
	}
	return r.Values(), nil
}

// waitPod polls pod name in c until done says so or fails, for at most
// limit.
func (r *runner) waitPod(ctx context.Context, c *cluster, name string, limit time.Duration, done func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	deadline := time.Now().Add(limit)
	for {
		p, err := c.cs.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("kube: pod %s/%s in %s: %w", c.ns, name, c, err)
		}
		ok, err := done(p)
		if err != nil {
			return nil, fmt.Errorf("kube: %w", err)
		}
		if ok {
			return p, nil
		}
		if time.Now().After(deadline) {
			what := "finish"
			if p.Status.Phase == corev1.PodPending {
				what = "start"
			}
			return nil, fmt.Errorf("kube: pod %s/%s in %s did not %s within %s (phase %s, %s); is a node able to run image %s?",
				c.ns, name, c, what, limit, phase(p), podReason(p), r.o.Image)
		}
		if err := sleep(ctx, time.Second); err != nil {
			return nil, err
		}
	}
}

func phase(p *corev1.Pod) string {
	if p.Status.Phase == "" {
		return "none"
	}
	return string(p.Status.Phase)
}

// podReason says why a pod is where it is, from its conditions and its
// container's state.
func podReason(p *corev1.Pod) string {
	var why []string
	if p.Spec.NodeName == "" {
		why = append(why, "not scheduled to a node")
	}
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			why = append(why, fmt.Sprintf("container %s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message))
		case cs.State.Terminated != nil:
			why = append(why, fmt.Sprintf("container %s exited %d: %s", cs.Name, cs.State.Terminated.ExitCode, cs.State.Terminated.Reason))
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Status != corev1.ConditionTrue && cond.Message != "" {
			why = append(why, fmt.Sprintf("%s: %s", cond.Type, cond.Message))
		}
	}
	if len(why) == 0 {
		return "no status from a kubelet"
	}
	return strings.Join(why, "; ")
}

// deletePod deletes one of the run's pods now and drops it from the
// cleanup list.
func (r *runner) deletePod(ctx context.Context, c *cluster, name string) {
	for i, o := range r.created {
		if o.side == c && o.kind == "pod" && o.name == name {
			if err := o.delete(ctx); err == nil || apierrors.IsNotFound(err) {
				r.created = slices.Delete(r.created, i, i+1)
			}
			return
		}
	}
}

// cleanup deletes everything the run created, newest first, with a
// context of its own so that it happens also after an interruption.
func (r *runner) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, o := range slices.Backward(r.created) {
		if err := o.delete(ctx); err != nil && !apierrors.IsNotFound(err) {
			r.progress("could not delete %s %s in %s: %v", o.kind, o.name, o.side, err)
			continue
		}
		r.progress("deleted %s %s in %s", o.kind, o.name, o.side)
	}
	r.created = nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
