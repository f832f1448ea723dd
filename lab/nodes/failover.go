package nodes

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/snorkel-net/snorkel/controller/agent"
	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/lab"
)

// FailureKind is how the lab fails a cluster's active gateway.
type FailureKind string

// The ways a gateway fails: the agent's pod deleted (a clean stop: it
// releases the Lease), the node crashed (kubelet, containerd, the shims and
// every container of the node killed at once), and the node cut off (its
// link set down: the agent runs on but reaches nothing). FailDaemons kills
// the node's kubelet, containerd and kube-proxy alone: the containers run
// on under their shims, as on any node, so the gateway must go on serving
// with no failover at all.
const (
	FailPod     FailureKind = "pod-delete"
	FailNode    FailureKind = "node-kill"
	FailLink    FailureKind = "link-cut"
	FailDaemons FailureKind = "daemons-kill"
)

// FailureKinds are the kinds in the order a round runs them.
var FailureKinds = []FailureKind{FailPod, FailNode, FailLink, FailDaemons}

// ParseFailureKinds reads a comma-separated list of kinds.
func ParseFailureKinds(s string) ([]FailureKind, error) {
	var out []FailureKind
	for _, f := range strings.Split(s, ",") {
		k := FailureKind(strings.TrimSpace(f))
		if !slices.Contains(FailureKinds, k) {
			return nil, fmt.Errorf("failure kind %q: use %s, %s, %s or %s", f, FailPod, FailNode, FailLink, FailDaemons)
		}
		out = append(out, k)
	}
	return out, nil
}

// Failover is one failed gateway and what the traffic saw.
type Failover struct {
	Kind    FailureKind
	Cluster string
	// From is the gateway node that failed, To the one that took over.
	From, To string
	// Elected is from the failure until the standby held the Lease (its
	// acquire time); Ping until the ping was answered again; FirstStream
	// and AllStreams until the first and the last surviving stream
	// carried data again. A path that never went silent for longer than
	// the probe's gap recovers in 0.
	Elected, Ping, FirstStream, AllStreams time.Duration
	// Streams is how many streams ran through the failure, Survived how
	// many carried on without a reset.
	Streams, Survived int
}

func (f Failover) String() string {
	return fmt.Sprintf("%-12s %-3s %s → %s: elected %v, ping back %v, streams back %v (first) %v (last), %d/%d streams survived",
		f.Kind, f.Cluster, f.From, f.To, f.Elected.Round(time.Millisecond), f.Ping.Round(time.Millisecond),
		f.FirstStream.Round(time.Millisecond), f.AllStreams.Round(time.Millisecond), f.Survived, f.Streams)
}

// failoverDeadline bounds one failover: from the failure until traffic
// flows again, and then until the failed gateway is back as a standby.
const failoverDeadline = 3 * time.Minute

// kubeClient is a cluster's client.
type kubeClient = kubernetes.Interface

// streamPort is the stream server's port.
const streamPort = 9000

// Traffic is the stream probe running from a's worker to the stream server
// on b's worker, and what it has reported.
type Traffic struct {
	t       *Tutorial
	a, b    Cluster
	streams int
	cmd     *exec.Cmd

	mu     sync.Mutex
	events []lab.StreamEvent
	last   []int64 // from the latest tick: [0] the ping, [i+1] stream i
	ended  bool
}

// StartTraffic deploys the stream server on b's worker, exported so that
// a reaches it by name (under Globalnet at a global IP), and the probe
// pod on a's worker with n streams, and follows the probe's reports.
func (t *Tutorial) StartTraffic(ctx context.Context, a, b Cluster, n int) (*Traffic, error) {
	f := filepath.Join(t.Lab.StateDir, "streams-"+b.Name+".yaml")
	if err := os.WriteFile(f, []byte(streamServerManifest(b.Worker().Name, t.SnorkelImage)), 0o644); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"--context", b.Context(), "apply", "-f", f},
		{"--context", b.Context(), "-n", "sample", "rollout", "status", "statefulset/streams", "--timeout=5m"},
	} {
		if err := t.kubectl(ctx, args...); err != nil {
			return nil, err
		}
	}
	if err := t.snorkel(ctx, "--context", b.Context(), "export", "service", "--namespace", "sample", "streams"); err != nil {
		return nil, err
	}
	name := "streams-0." + b.Name + ".streams.sample.svc.clusterset.local"
	var addr netip.Addr
	if err := waitFor(ctx, checkDeadline, name+" resolving from "+a.Name, func() error {
		argv := t.inClient(a, "dig", "+short", name)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = t.env()
		out, err := cmd.Output()
		if err != nil {
			return err
		}
		addr, err = netip.ParseAddr(strings.TrimSpace(string(out)))
		return err
	}); err != nil {
		return nil, err
	}
	fmt.Fprintf(t.Out, "# stream server %s at %s on %s; %d streams and a ping from %s\n", name, addr, b.Worker().Name, n, a.Worker().Name)
	pf := filepath.Join(t.Lab.StateDir, "streams-probe-"+a.Name+".yaml")
	target := netip.AddrPortFrom(addr, streamPort)
	if err := os.WriteFile(pf, []byte(streamProbeManifest(a.Worker().Name, t.SnorkelImage, target, n)), 0o644); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"--context", a.Context(), "-n", "sample", "delete", "pod", "streams-probe", "--ignore-not-found", "--wait"},
		{"--context", a.Context(), "apply", "-f", pf},
		{"--context", a.Context(), "-n", "sample", "wait", "pod/streams-probe", "--for=condition=Ready", "--timeout=5m"},
	} {
		if err := t.kubectl(ctx, args...); err != nil {
			return nil, err
		}
	}
	tr := &Traffic{t: t, a: a, b: b, streams: n}
	tr.cmd = exec.Command(t.Kubectl, "--context", a.Context(), "-n", "sample", "logs", "-f", "streams-probe")
	tr.cmd.Env = t.env()
	out, err := tr.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := tr.cmd.Start(); err != nil {
		return nil, err
	}
	go tr.follow(out)
	if err := tr.waitSteady(ctx, time.Now()); err != nil {
		tr.Stop(ctx)
		return nil, err
	}
	return tr, nil
}

func (tr *Traffic) follow(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var e lab.StreamEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		tr.mu.Lock()
		switch e.Ev {
		case "tick":
			tr.last = e.Last
		case "gap", "reset", "reopened":
			tr.events = append(tr.events, e)
		case "end":
			tr.ended = true
		}
		tr.mu.Unlock()
	}
	tr.mu.Lock()
	tr.ended = true
	tr.mu.Unlock()
}

// waitSteady waits until the ping and every stream have answered within
// the last half second, at a tick after since.
func (tr *Traffic) waitSteady(ctx context.Context, since time.Time) error {
	return waitFor(ctx, failoverDeadline, "steady traffic from "+tr.a.Name+" to "+tr.b.Name, func() error {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if tr.ended {
			return errors.New("the stream probe ended; see kubectl logs streams-probe")
		}
		if len(tr.last) != tr.streams+1 {
			return errors.New("no report from the stream probe yet")
		}
		for i, l := range tr.last {
			if l < since.UnixNano() || time.Since(time.Unix(0, l)) > 500*time.Millisecond {
				what := "the ping"
				if i > 0 {
					what = fmt.Sprintf("stream %d", i-1)
				}
				return fmt.Errorf("%s last answered %v ago", what, time.Since(time.Unix(0, l)).Round(time.Millisecond))
			}
		}
		return nil
	})
}

// Stop ends the probe and the server.
func (tr *Traffic) Stop(ctx context.Context) {
	_ = tr.t.kubectl(ctx, "--context", tr.a.Context(), "-n", "sample", "delete", "pod", "streams-probe", "--ignore-not-found", "--wait=false")
	if tr.cmd.Process != nil {
		_ = tr.cmd.Process.Kill()
		_ = tr.cmd.Wait()
	}
}

// recovery is what the probe reported for the failure at t0, once the
// ping and every stream have answered after it: when each came back, and
// how many streams were reset.
func (tr *Traffic) recovery(ctx context.Context, t0 time.Time) (ping, first, all time.Duration, resets int, err error) {
	at := t0.UnixNano()
	err = waitFor(ctx, failoverDeadline, "traffic from "+tr.a.Name+" to "+tr.b.Name+" flowing again", func() error {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if tr.ended {
			return errors.New("the stream probe ended; see kubectl logs streams-probe")
		}
		// Each source came back at the end of its gap that spans the
		// failure, or did not stop (0) if it answered without one.
		back := make([]int64, tr.streams+1)
		for i := range back {
			back[i] = -1
			if len(tr.last) == len(back) && tr.last[i] > at+int64(2*time.Second) {
				back[i] = 0
			}
		}
		resets = 0
		for _, e := range tr.events {
			i := e.Stream + 1
			switch {
			case e.Ev == "gap" && e.To > at && e.From < at+int64(failoverDeadline):
				if back[i] <= 0 {
					back[i] = max(e.To-at, 1)
				}
			case e.Ev == "reset" && e.At > at:
				resets++
				back[i] = max(e.At-at, 1)
			}
		}
		for i, b := range back {
			if b < 0 {
				return fmt.Errorf("%d of %d sources still silent (first: %d)", countNeg(back), len(back), i-1)
			}
		}
		ping = time.Duration(back[0])
		first, all = time.Duration(back[1]), time.Duration(back[1])
		for _, b := range back[1:] {
			first, all = min(first, time.Duration(b)), max(all, time.Duration(b))
		}
		return nil
	})
	return ping, first, all, resets, err
}

func countNeg(xs []int64) int {
	n := 0
	for _, x := range xs {
		if x < 0 {
			n++
		}
	}
	return n
}

// Fail fails c's active gateway the given way while tr runs, measures the
// recovery, and then brings the failed node back as a standby and waits
// for steady traffic, so that the next failure starts from two gateways.
func (t *Tutorial) Fail(ctx context.Context, tr *Traffic, c Cluster, kind FailureKind) (Failover, error) {
	f := Failover{Kind: kind, Cluster: c.Name, Streams: tr.streams}
	from, err := t.activeGateway(ctx, c)
	if err != nil {
		return f, err
	}
	f.From = from
	kc, err := Client(t.Lab.StateDir, c.Name)
	if err != nil {
		return f, err
	}
	var pod string
	if kind == FailPod {
		if pod, err = agentPod(ctx, kc, from); err != nil {
			return f, err
		}
	}
	node, ok := nodeByName(c, from)
	if !ok {
		return f, fmt.Errorf("nodes: %s's active gateway %s is none of its nodes", c.Name, from)
	}
	if kind == FailDaemons {
		return t.failDaemons(ctx, tr, c, node, f)
	}
	cgroup := t.Lab.Topo.Prefix() + from
	t0 := time.Now()
	switch kind {
	case FailPod:
		err = kc.CoreV1().Pods(api.AgentNamespace).Delete(ctx, pod, metav1.DeleteOptions{})
	case FailNode:
		err = killCgroup(cgroup, settle)
	case FailLink:
		err = t.Lab.Topo.NS(from).LinkDown("eth0")
	}
	if err != nil {
		return f, fmt.Errorf("nodes: failing %s (%s): %w", from, kind, err)
	}
	to, acquired, err := t.newHolder(ctx, kc, from)
	if err != nil {
		return f, err
	}
	f.To, f.Elected = to, acquired.Sub(t0)
	var resets int
	f.Ping, f.FirstStream, f.AllStreams, resets, err = tr.recovery(ctx, t0)
	f.Survived = f.Streams - resets
	if err != nil {
		return f, err
	}
	// Back as a standby.
	switch kind {
	case FailPod:
		err = waitAgentStarted(ctx, kc, from, t0)
	case FailNode:
		if err = t.Lab.restartNode(ctx, node); err == nil {
			err = waitAgentStarted(ctx, kc, from, t0)
		}
	case FailLink:
		err = t.Lab.relink(c, node)
	}
	if err != nil {
		return f, fmt.Errorf("nodes: bringing %s back after %s: %w", from, kind, err)
	}
	if err := waitPassive(ctx, t, c, from); err != nil {
		return f, err
	}
	return f, tr.waitSteady(ctx, time.Now())
}

// failDaemons kills the active gateway node's kubelet, containerd and
// kube-proxy, and requires that nothing fails over: the agent's container
// runs on, keeps the Lease through several lease durations, and the traffic
// does not stop. Then it starts the daemons again.
func (t *Tutorial) failDaemons(ctx context.Context, tr *Traffic, c Cluster, n Node, f Failover) (Failover, error) {
	kc, err := Client(t.Lab.StateDir, c.Name)
	if err != nil {
		return f, err
	}
	t0 := time.Now()
	for _, p := range t.Lab.Topo.Processes() {
		if strings.HasPrefix(p.Name, n.Name+"-") && p.NS == t.Lab.Topo.NS(n.Name).Name() && p.Alive() {
			if err := p.Kill(); err != nil {
				return f, err
			}
		}
	}
	// The Lease must be renewed by the same holder well past the time a
	// dead holder's would have expired.
	moved := ""
	if err := waitFor(ctx, failoverDeadline, n.Name+"'s agent renewing the Lease after its daemons died", func() error {
		l, err := kc.CoordinationV1().Leases(api.AgentNamespace).Get(ctx, agent.DefaultLeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h := l.Spec.HolderIdentity; h == nil || *h != n.Name {
			moved = fmt.Sprint(l.Spec.HolderIdentity)
			if h != nil {
				moved = *h
			}
			return nil
		}
		if l.Spec.RenewTime == nil || l.Spec.RenewTime.Sub(t0) < 3*agent.DefaultLeaseDuration {
			return errors.New("not renewed long enough yet")
		}
		return nil
	}); err != nil {
		return f, err
	}
	if moved != "" {
		return f, fmt.Errorf("nodes: with only its daemons killed, %s lost the Lease to %q: the gateway failed over", n.Name, moved)
	}
	f.To = n.Name
	var resets int
	f.Ping, f.FirstStream, f.AllStreams, resets, err = tr.recovery(ctx, t0)
	f.Survived = f.Streams - resets
	if err != nil {
		return f, err
	}
	if err := t.Lab.restartNode(ctx, n); err != nil {
		return f, fmt.Errorf("nodes: starting %s's daemons again: %w", n.Name, err)
	}
	if err := waitFor(ctx, failoverDeadline, n.Name+" Ready again", func() error { return nodeReadyErr(ctx, kc, n.Name) }); err != nil {
		return f, err
	}
	return f, tr.waitSteady(ctx, time.Now())
}

// activeGateway is the node that holds c's gateway Lease, once the
// Gateway objects agree: the holder's says active and no other's does.
// Between a handover and the agents' next status writes they disagree, and
// snorkel diagnose, which goes by the Gateway objects, would probe from
// another node than the Lease names.
func (t *Tutorial) activeGateway(ctx context.Context, c Cluster) (string, error) {
	kc, err := Client(t.Lab.StateDir, c.Name)
	if err != nil {
		return "", err
	}
	var holder string
	err = waitFor(ctx, checkDeadline, c.Name+"'s gateway Lease held by a gateway node whose Gateway alone is active", func() error {
		l, err := kc.CoordinationV1().Leases(api.AgentNamespace).Get(ctx, agent.DefaultLeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return errors.New("no holder")
		}
		holder = *l.Spec.HolderIdentity
		if n, ok := nodeByName(c, holder); !ok || !n.Gateway {
			return fmt.Errorf("held by %q", holder)
		}
		active, err := t.activeGateways(ctx, c)
		if err != nil {
			return err
		}
		if !slices.Equal(active, []string{holder}) {
			return fmt.Errorf("the Lease is %s's, the active Gateways are %q", holder, active)
		}
		return nil
	})
	return holder, err
}

// activeGateways are the names of c's Gateway objects whose status says
// active.
func (t *Tutorial) activeGateways(ctx context.Context, c Cluster) ([]string, error) {
	cmd := exec.CommandContext(ctx, t.Kubectl, "--context", c.Context(), "-n", api.AgentNamespace, "get", "gateways.submariner.io",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.haStatus}{"\n"}{end}`)
	cmd.Env = t.env()
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl get gateways: %w", err)
	}
	var active []string
	for line := range strings.Lines(string(out)) {
		if name, status, _ := strings.Cut(strings.TrimSpace(line), " "); status == string(submv1.HAStatusActive) {
			active = append(active, name)
		}
	}
	return active, nil
}

// newHolder waits until another gateway than from holds the Lease, and
// returns it and when it acquired the Lease.
func (t *Tutorial) newHolder(ctx context.Context, kc kubeClient, from string) (string, time.Time, error) {
	var to string
	var at time.Time
	err := waitFor(ctx, failoverDeadline, "another gateway than "+from+" holding the Lease", func() error {
		l, err := kc.CoordinationV1().Leases(api.AgentNamespace).Get(ctx, agent.DefaultLeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || *l.Spec.HolderIdentity == from {
			return errors.New("not yet")
		}
		if l.Spec.AcquireTime == nil {
			return errors.New("no acquire time")
		}
		to, at = *l.Spec.HolderIdentity, l.Spec.AcquireTime.Time
		return nil
	})
	return to, at, err
}

func nodeByName(c Cluster, name string) (Node, bool) {
	i := slices.IndexFunc(c.Nodes, func(n Node) bool { return n.Name == name })
	if i < 0 {
		return Node{}, false
	}
	return c.Nodes[i], true
}

// agentPod is the agent's pod on node.
func agentPod(ctx context.Context, kc kubeClient, node string) (string, error) {
	pods, err := kc.CoreV1().Pods(api.AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=snorkel-agent", FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("nodes: no agent pod on %s", node)
}

// waitAgentStarted waits until an agent container on node started after
// t0 and is ready.
func waitAgentStarted(ctx context.Context, kc kubeClient, node string, t0 time.Time) error {
	return waitFor(ctx, failoverDeadline, "a new agent on "+node, func() error {
		pods, err := kc.CoreV1().Pods(api.AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=snorkel-agent", FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Ready && cs.State.Running != nil && !cs.State.Running.StartedAt.Time.Before(t0.Truncate(time.Second)) {
					return nil
				}
			}
		}
		return errors.New("not yet")
	})
}

// waitPassive waits until node's Gateway says passive and the node is
// Ready.
func waitPassive(ctx context.Context, t *Tutorial, c Cluster, node string) error {
	return waitFor(ctx, failoverDeadline, node+" back as a passive gateway", func() error {
		cmd := exec.CommandContext(ctx, t.Kubectl, "--context", c.Context(), "-n", api.AgentNamespace, "get", "gateways.submariner.io", node,
			"-o", "jsonpath={.status.haStatus}")
		cmd.Env = t.env()
		out, err := cmd.Output()
		if err != nil {
			return err
		}
		if string(out) != "passive" {
			return fmt.Errorf("haStatus %q", out)
		}
		kc, err := Client(t.Lab.StateDir, c.Name)
		if err != nil {
			return err
		}
		return nodeReadyErr(ctx, kc, node)
	})
}

// nodeReadyErr says why node is not Ready, or nil.
func nodeReadyErr(ctx context.Context, kc kubeClient, node string) error {
	n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return errors.New("node not Ready")
}

func streamServerManifest(node, image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: streams
  namespace: sample
spec:
  clusterIP: None
  selector:
    app: streams
  ports:
    - name: tcp
      port: %[3]d
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: streams
  namespace: sample
spec:
  serviceName: streams
  replicas: 1
  selector:
    matchLabels:
      app: streams
  template:
    metadata:
      labels:
        app: streams
    spec:
      nodeName: %[1]s
      terminationGracePeriodSeconds: 1
      containers:
        - name: server
          image: %[2]s
          args: [lab-pod, stream-server, --listen=:%[3]d]
          ports:
            - containerPort: %[3]d
`, node, image, streamPort)
}

func streamProbeManifest(node, image string, target netip.AddrPort, streams int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: streams-probe
  namespace: sample
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 2
  restartPolicy: Never
  securityContext:
    runAsUser: 0
  containers:
    - name: probe
      image: %s
      args: [lab-pod, stream-probe, %s, --streams=%d]
`, node, image, target, streams)
}

// tutorialStreams is how many streams run through the tutorial's
// failovers.
const tutorialStreams = 20

// failovers fails the active gateway once each way, alternating the
// clusters, while streams and a ping run from a's worker to b's: each
// failure must end with the standby active, the traffic flowing again and
// every stream alive.
func (t *Tutorial) failovers(ctx context.Context, a, b Cluster) {
	tr, err := t.StartTraffic(ctx, a, b, tutorialStreams)
	if err != nil {
		t.fail("traffic for the failovers: " + err.Error())
		return
	}
	defer tr.Stop(ctx)
	for i, kind := range FailureKinds {
		c := []Cluster{a, b}[i%2]
		f, err := t.Fail(ctx, tr, c, kind)
		if err != nil {
			t.fail(fmt.Sprintf("failover %s in %s: %v", kind, c.Name, err))
			return
		}
		mark := "✓"
		if f.Survived < f.Streams {
			mark = "✗"
			t.fail(fmt.Sprintf("failover %s in %s: %d of %d streams were reset", kind, c.Name, f.Streams-f.Survived, f.Streams))
		}
		fmt.Fprintf(t.Out, "%s failover %v\n", mark, f)
	}
}

// FailoverOptions say how many failovers RunFailovers measures.
type FailoverOptions struct {
	// Rounds is how many times each kind runs.
	Rounds  int
	Kinds   []FailureKind
	Streams int
	// Keep leaves the lab up afterwards, for a look at its logs.
	Keep bool
}

// RunFailovers brings the scenario up with Snorkel joined, runs streams
// and a ping from the first cluster to the second, fails the clusters'
// active gateways in turn (Rounds times each kind), prints every failover
// and a summary, and tears the lab down unless Keep.
func RunFailovers(ctx context.Context, o Options, kubectl, snorkel, cableDriver string, fo FailoverOptions) (err error) {
	l, err := Up(ctx, o)
	if err != nil {
		return err
	}
	defer func() {
		if fo.Keep {
			fmt.Fprintf(o.Out, "the lab stays up: KUBECONFIG=%s; snorkel lab down --nodes removes it\n", KubeconfigFile(l.StateDir))
			return
		}
		if err != nil {
			fmt.Fprintf(o.Out, "logs before teardown: %s\n", l.Topo.LogDir())
		}
		err = errors.Join(err, l.Down(o.Out))
	}()
	t := &Tutorial{Lab: l, Snorkel: snorkel, Kubectl: kubectl, SnorkelImage: o.Images.SnorkelImage, CableDriver: cableDriver, Out: o.Out}
	if err := t.Setup(ctx); err != nil {
		return err
	}
	a, b := l.Scenario.Clusters[0], l.Scenario.Clusters[1]
	tr, err := t.StartTraffic(ctx, a, b, fo.Streams)
	if err != nil {
		return err
	}
	defer tr.Stop(ctx)
	var all []Failover
	n := 0
	for range fo.Rounds {
		for _, kind := range fo.Kinds {
			c := []Cluster{a, b}[n%2]
			n++
			f, err := t.Fail(ctx, tr, c, kind)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.Out, "failover %3d  %v\n", n, f)
			all = append(all, f)
		}
	}
	fmt.Fprint(o.Out, FailoverSummary(all))
	return nil
}

// FailoverSummary is a table of failovers by kind: how many, the
// percentiles of each recovery time, and the share of streams that
// survived.
func FailoverSummary(fs []Failover) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %3s  %-23s %-23s %-23s %s\n", "kind", "n", "elected p50/p99/max", "ping back p50/p99/max", "all streams p50/p99/max", "streams survived")
	kinds := append(slices.Clone(FailureKinds), "all")
	for _, k := range kinds {
		var el, ping, st []time.Duration
		streams, survived := 0, 0
		for _, f := range fs {
			if k != "all" && f.Kind != k {
				continue
			}
			el, ping, st = append(el, f.Elected), append(ping, f.Ping), append(st, f.AllStreams)
			streams, survived = streams+f.Streams, survived+f.Survived
		}
		if len(el) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%-12s %3d  %-23s %-23s %-23s %d/%d (%.1f%%)\n", k, len(el), percentiles(el), percentiles(ping), percentiles(st),
			survived, streams, 100*float64(survived)/float64(streams))
	}
	return b.String()
}

// percentiles writes p50, p99 and the maximum of ds, nearest-rank.
func percentiles(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	r := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }
	return r(rank(0.5)) + "/" + r(rank(0.99)) + "/" + r(s[len(s)-1]) + " s"
}
