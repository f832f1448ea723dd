package gather

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/snorkel-net/snorkel/controller/internal/statusline"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// component is a workload of the agent namespace whose pods gather reads.
type component struct {
	// name is how status lines call it; workload the object that makes
	// its pods.
	name, workload string
	// selector picks its pods, with the labels of the manifests.
	selector string
	// listeners are what its pods serve over HTTP.
	listeners []listener
}

// listener is an HTTP path a component's pods serve on the port of one
// of their flags.
type listener struct {
	path string
	// flag is the command-line flag that sets the listener's address, and
	// address its default.
	flag, address string
	// suffix names the file: POD.SUFFIX.
	suffix string
	// globalnet: only a gateway with Globalnet serves it (the others
	// answer 404).
	globalnet bool
}

var (
	agentComponent = component{
		name: "the agent", workload: "DaemonSet snorkel-agent", selector: "app.kubernetes.io/name=snorkel-agent",
		listeners: []listener{
			{"/status", "debug-address", "127.0.0.1:9899", "status.json", false},
			{"/flows", "debug-address", "127.0.0.1:9899", "flows.json", true},
			{"/metrics", "metrics-address", ":9898", "metrics.txt", false},
		},
	}
	// The route agent serves nothing over HTTP: its log and the
	// Gateways it follows tell what it did.
	routeAgentComponent = component{
		name: "the route agent", workload: "DaemonSet submariner-routeagent", selector: "app=submariner-routeagent",
	}
	dnsdComponent = component{
		name: "dnsd", workload: "Deployment submariner-lighthouse-coredns", selector: "app=submariner-lighthouse-coredns",
		listeners: []listener{{"/metrics", "metrics-address", "", "metrics.txt", false}},
	}
)

// runningPods lists comp's pods and returns those running. It notes how
// many there are, and why each of the others cannot be read.
func (c *cluster) runningPods(ctx context.Context, s *statusline.Section, comp component) []corev1.Pod {
	list, err := c.Kube.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: comp.selector})
	if err != nil {
		s.Fail("Failed to list the pods of %s (label selector %q) in namespace %q: %v", comp.name, comp.selector, c.Namespace, err)
		return nil
	}
	if len(list.Items) == 0 {
		s.Warn("No pods of %s (label selector %q) in namespace %q: is its %s installed and scheduled?", comp.name, comp.selector, c.Namespace, comp.workload)
		return nil
	}
	s.Success("Found %d pods of %s matching label selector %q", len(list.Items), comp.name, comp.selector)
	var running []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase != corev1.PodRunning {
			s.Warn("Pod %s is not running (phase %q, node %q): nothing to read from it", p.Name, phase(p), p.Spec.NodeName)
			continue
		}
		running = append(running, p)
	}
	return running
}

func phase(p corev1.Pod) string {
	if p.Status.Phase == "" {
		return "unknown: no kubelet has reported it"
	}
	return string(p.Status.Phase)
}

// logs writes each container's log, and its previous one if it
// restarted, as POD.log and POD.log.prev (POD_CONTAINER… for pods with
// several containers).
func (c *cluster) logs(ctx context.Context, s *statusline.Section, comp component) {
	for _, p := range c.runningPods(ctx, s, comp) {
		for _, ctr := range p.Spec.Containers {
			name := p.Name
			if len(p.Spec.Containers) > 1 {
				name += "_" + ctr.Name
			}
			if restarted(p, ctr.Name) {
				c.log(ctx, s, &p, ctr.Name, true, name+".log.prev")
			}
			c.log(ctx, s, &p, ctr.Name, false, name+".log")
		}
	}
}

func restarted(p corev1.Pod, container string) bool {
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == container {
			return st.RestartCount > 0
		}
	}
	return false
}

func (c *cluster) log(ctx context.Context, s *statusline.Section, p *corev1.Pod, container string, previous bool, file string) {
	which := "log"
	if previous {
		which = "previous log"
	}
	rc, err := c.Kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, Previous: previous}).Stream(ctx)
	if err != nil {
		s.Warn("Cannot read the %s of pod %s on node %q (the API server reads it from the node's kubelet): %v", which, p.Name, p.Spec.NodeName, err)
		return
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		s.Warn("Reading the %s of pod %s: %v", which, p.Name, err)
	}
	if err := c.write(file, data); err != nil {
		s.Fail("%v", err)
		return
	}
	s.Success("Wrote the %s of pod %s to %s", which, p.Name, file)
}

// listeners reads what comp's running pods serve over HTTP, each through a
// port forward: it reaches the pod's own loopback, where the gateway's
// debug listener is.
func (c *cluster) listeners(ctx context.Context, s *statusline.Section, comp component) {
	for _, p := range c.runningPods(ctx, s, comp) {
		for _, l := range comp.listeners {
			if l.globalnet && c.Agent != nil && c.Agent.GlobalCIDR == "" {
				s.Success("Skipped %s of pod %s: Globalnet is off in this cluster, and only Globalnet tracks flows", l.path, p.Name)
				continue
			}
			port, err := listenerPort(&p, l)
			if err != nil {
				s.Warn("Pod %s serves no %s: %v", p.Name, l.path, err)
				continue
			}
			file := p.Name + "." + l.suffix
			data, err := c.forwardGet(ctx, &p, port, l.path)
			if err != nil {
				s.Warn("Cannot read %s of pod %s on node %q through a port forward to port %d: %v", l.path, p.Name, p.Spec.NodeName, port, err)
				continue
			}
			if err := c.write(file, data); err != nil {
				s.Fail("%v", err)
				continue
			}
			s.Success("Wrote %s of pod %s to %s", l.path, p.Name, file)
		}
	}
}

// listenerPort is the port of l's flag in the pod's first container's
// arguments, else of its default address.
func listenerPort(p *corev1.Pod, l listener) (int, error) {
	addr := l.address
	if len(p.Spec.Containers) > 0 {
		args := p.Spec.Containers[0].Args
		for i, a := range args {
			name, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !strings.HasPrefix(a, "-") || name != l.flag {
				continue
			}
			if !hasValue && i+1 < len(args) {
				v = args[i+1]
			}
			addr = v
		}
	}
	if addr == "" {
		return 0, fmt.Errorf("--%s is not set", l.flag)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: %w", l.flag, addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--%s %q: no port", l.flag, addr)
	}
	return n, nil
}
