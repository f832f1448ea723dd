package diagnose

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/globalnet"
	"github.com/snorkel-net/snorkel/controller/internal/podstate"
)

// Timing of the probe pods.
const (
	podPoll = time.Second
	// cleanupTimeout bounds the deletion of the probe namespaces, which
	// runs also after an interrupt.
	cleanupTimeout = 30 * time.Second
	// probeWindow is how long a sniffer watches, and a fetch retries:
	// long enough for the pods of a batch to start one after the other.
	probeWindow = 30 * time.Second
	// serverPort is where the whereami server listens.
	serverPort = 8080
	// probeLabel marks diagnose's pods with their batch.
	probeLabel = "snorkel.io/diagnose-batch"
)

// probes runs diagnose's pods: each in a namespace of its own in every
// cluster it touches, deleted when the run ends.
type probes struct {
	// image is what the pods run; empty: each cluster's agent image.
	image  string
	images map[*cluster]string
	// timeout bounds the wait for one batch of pods.
	timeout time.Duration
	ns      string
	created []*cluster
	// servers caches each cluster's whereami pod address.
	servers map[*cluster]netip.Addr
	batch   int
}

func newProbes(image string, timeout time.Duration) *probes {
	return &probes{image: image, timeout: timeout, ns: "snorkel-diagnose-" + rand.String(5), servers: map[*cluster]netip.Addr{}, images: map[*cluster]string{}}
}

// probePod is one program of `snorkel lab-pod` run once on a node.
type probePod struct {
	c    *cluster
	node string
	// host runs it in the node's network namespace, as root with
	// CAP_NET_RAW; otherwise it is an ordinary pod, root for its raw
	// sockets when raw is set.
	host, raw bool
	args      []string
	// background: the batch does not wait for it, and deletes it once
	// the others finished.
	background bool
}

// podResult is how one probe pod ended.
type podResult struct {
	// ok: the pod succeeded; line is its log's last line, the probe's
	// outcome (or, when !ok, why the probe failed).
	ok   bool
	line string
}

// namespace makes the probe namespace in c, once, and finds the image.
func (p *probes) namespace(ctx context.Context, c *cluster) error {
	if slices.Contains(p.created, c) {
		return nil
	}
	if p.image != "" {
		p.images[c] = p.image
	} else {
		im, err := agentImage(ctx, c)
		if err != nil {
			return err
		}
		p.images[c] = im
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns, Labels: map[string]string{
		"app.kubernetes.io/managed-by": "snorkel-diagnose",
		// The probes need the host network and raw sockets.
		"pod-security.kubernetes.io/enforce": "privileged",
	}}}
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s in context %s: %w", p.ns, c.Target.Context, err)
	}
	p.created = append(p.created, c)
	return nil
}

// cleanup deletes the namespaces, also when ctx has ended.
func (p *probes) cleanup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var errs []error
	for _, c := range p.created {
		err := c.Kube.CoreV1().Namespaces().Delete(ctx, p.ns, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting namespace %s in context %s (delete it with kubectl): %w", p.ns, c.Target.Context, err))
		}
	}
	p.created = nil
	return errors.Join(errs...)
}

// run starts pods, waits until every one not in the background ended
// (or p.timeout passed), and returns how each ended, in order; then it
// deletes them all.
func (p *probes) run(ctx context.Context, pods []probePod) ([]podResult, error) {
	p.batch++
	batch := fmt.Sprint(p.batch)
	names := make([]string, len(pods))
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		for i, pp := range pods {
			if names[i] != "" {
				pp.c.Kube.CoreV1().Pods(p.ns).Delete(dctx, names[i], metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			}
		}
	}()
	for i, pp := range pods {
		if err := p.namespace(ctx, pp.c); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("probe-%s-%s-%d", batch, pp.args[1], i)
		if err := p.create(ctx, pp.c, p.pod(name, batch, pp)); err != nil {
			return nil, err
		}
		names[i] = name
	}
	results := make([]podResult, len(pods))
	pending := map[int]bool{}
	for i, pp := range pods {
		if !pp.background {
			pending[i] = true
		}
	}
	deadline := time.Now().Add(p.timeout)
	for len(pending) > 0 {
		expired := time.Now().After(deadline)
		for i := range pending {
			pp := pods[i]
			pod, err := pp.c.Kube.CoreV1().Pods(p.ns).Get(ctx, names[i], metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("context %s: reading probe pod %s: %w", pp.c.Target.Context, names[i], err)
			}
			switch {
			case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
				results[i] = podResult{ok: pod.Status.Phase == corev1.PodSucceeded, line: lastLogLine(ctx, pp.c, pod)}
			case expired:
				results[i] = podResult{line: fmt.Sprintf("probe pod %s on node %s did not finish within %s (--validation-timeout): %s", names[i], pp.node, p.timeout, podstate.Describe(pod))}
			default:
				continue
			}
			delete(pending, i)
		}
		if len(pending) > 0 {
			if err := podstate.Sleep(ctx, podPoll); err != nil {
				return nil, err
			}
		}
	}
	return results, nil
}

// create creates pod, retrying while the new namespace has no default
// ServiceAccount yet.
func (p *probes) create(ctx context.Context, c *cluster, pod *corev1.Pod) error {
	deadline := time.Now().Add(p.timeout)
	for {
		_, err := c.Kube.CoreV1().Pods(p.ns).Create(ctx, pod, metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			return fmt.Errorf("context %s: creating probe pod %s: %w", c.Target.Context, pod.Name, err)
		}
		if err := podstate.Sleep(ctx, podPoll); err != nil {
			return err
		}
	}
}

func (p *probes) pod(name, batch string, pp probePod) *corev1.Pod {
	root, nonRoot := int64(0), int64(65532)
	sc := &corev1.SecurityContext{RunAsUser: &nonRoot}
	if pp.host || pp.raw {
		sc = &corev1.SecurityContext{RunAsUser: &root, Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.ns, Labels: map[string]string{probeLabel: batch}},
		Spec: corev1.PodSpec{
			NodeName:      pp.node,
			HostNetwork:   pp.host,
			RestartPolicy: corev1.RestartPolicyNever,
			// A node tainted for its gateway role is probed too.
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "probe", Image: p.images[pp.c], ImagePullPolicy: corev1.PullIfNotPresent,
				Args:            pp.args,
				Env:             []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
				SecurityContext: sc,
			}},
			TerminationGracePeriodSeconds: new(int64),
			AutomountServiceAccountToken:  new(false),
			EnableServiceLinks:            new(false),
		},
	}
}

// serverName names the whereami pod, and under Globalnet the headless
// Service that gives it a global IP.
const serverName = "whereami"

// server starts (once) a whereami server on node of c, and returns the
// address other clusters reach it at once it is ready: its pod IP, or
// under Globalnet its global IP.
func (p *probes) server(ctx context.Context, c *cluster, node string) (netip.Addr, error) {
	if a, ok := p.servers[c]; ok {
		return a, nil
	}
	if err := p.namespace(ctx, c); err != nil {
		return netip.Addr{}, err
	}
	pp := probePod{c: c, node: node, args: []string{"lab-pod", "whereami", "--name=diagnose", "--cluster=" + c.Agent.ClusterID, fmt.Sprintf("--listen=:%d", serverPort)}}
	pod := p.pod(serverName, "server", pp)
	if err := p.create(ctx, c, pod); err != nil {
		return netip.Addr{}, err
	}
	deadline := time.Now().Add(p.timeout)
	for {
		got, err := c.Kube.CoreV1().Pods(p.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return netip.Addr{}, fmt.Errorf("context %s: reading the server pod: %w", c.Target.Context, err)
		}
		if got.Status.Phase == corev1.PodRunning && got.Status.PodIP != "" {
			a, err := netip.ParseAddr(got.Status.PodIP)
			if err != nil {
				return netip.Addr{}, fmt.Errorf("context %s: server pod IP %q: %w", c.Target.Context, got.Status.PodIP, err)
			}
			if c.Agent.GlobalCIDR != "" {
				if a, err = p.globalIP(ctx, c); err != nil {
					return netip.Addr{}, err
				}
			}
			p.servers[c] = a
			return a, nil
		}
		if time.Now().After(deadline) {
			return netip.Addr{}, fmt.Errorf("the server pod %s/%s on node %s in context %s did not run within %s (--validation-timeout): %s",
				p.ns, pod.Name, node, c.Target.Context, p.timeout, podstate.Describe(got))
		}
		if err := podstate.Sleep(ctx, podPoll); err != nil {
			return netip.Addr{}, err
		}
	}
}

// globalIP exports the server pod behind a headless Service, as a user
// exports a StatefulSet, and waits for Globalnet to give the pod its
// global IP (the GlobalIngressIP pod-POD).
func (p *probes) globalIP(ctx context.Context, c *cluster) (netip.Addr, error) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: serverName, Namespace: p.ns},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{probeLabel: "server"},
			Ports:     []corev1.ServicePort{{Name: "http", Port: serverPort}},
		},
	}
	if _, err := c.Kube.CoreV1().Services(p.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return netip.Addr{}, fmt.Errorf("context %s: creating Service %s/%s: %w", c.Target.Context, p.ns, serverName, err)
	}
	export := &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: serverName, Namespace: p.ns}}
	if _, err := c.mcs.MulticlusterV1alpha1().ServiceExports(p.ns).Create(ctx, export, metav1.CreateOptions{}); err != nil {
		return netip.Addr{}, fmt.Errorf("context %s: exporting Service %s/%s: %w", c.Target.Context, p.ns, serverName, err)
	}
	name := globalnet.PodIngressName(serverName)
	deadline := time.Now().Add(p.timeout)
	for {
		u, err := c.Dynamic.Resource(submv1.GlobalIngressIPResource).Namespace(p.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return netip.Addr{}, fmt.Errorf("context %s: reading GlobalIngressIP %s/%s: %w", c.Target.Context, p.ns, name, err)
		}
		if err == nil {
			ip, _, _ := unstructured.NestedString(u.Object, "status", "allocatedIP")
			if a, perr := netip.ParseAddr(ip); perr == nil {
				return a, nil
			}
		}
		if time.Now().After(deadline) {
			return netip.Addr{}, fmt.Errorf("context %s: the exported server pod got no global IP (GlobalIngressIP %s/%s) within %s: see `snorkel diagnose globalnet` there",
				c.Target.Context, p.ns, name, p.timeout)
		}
		if err := podstate.Sleep(ctx, podPoll); err != nil {
			return netip.Addr{}, err
		}
	}
}

// lastLogLine is the last line of a finished pod's log, less the
// program's name.
func lastLogLine(ctx context.Context, c *cluster, pod *corev1.Pod) string {
	b, err := c.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("%s (reading the log of probe pod %s: %v)", podstate.Describe(pod), pod.Name, err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := strings.TrimPrefix(lines[len(lines)-1], "snorkel lab-pod: ")
	if last == "" {
		return podstate.Describe(pod)
	}
	return last
}

// agentImage is the image of c's agent DaemonSet, which its nodes have.
func agentImage(ctx context.Context, c *cluster) (string, error) {
	ds, err := c.Kube.AppsV1().DaemonSets(c.Namespace).Get(ctx, broker.AgentDaemonSet, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the agent DaemonSet %s/%s for the image the probe pods run (or give --image): %w", c.Namespace, broker.AgentDaemonSet, err)
	}
	for _, ctr := range ds.Spec.Template.Spec.Containers {
		if ctr.Image != "" {
			return ctr.Image, nil
		}
	}
	return "", fmt.Errorf("the agent DaemonSet %s/%s names no image: give --image", c.Namespace, broker.AgentDaemonSet)
}
