package nodes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/api"
)

// Tutorial runs the Submariner tutorial's steps on a lab that is up, as a
// user types them with snorkel for subctl: deploy the broker, join the
// clusters, deploy and export the whereami services, then check from a
// client pod on a worker node what the tutorial shows, then run snorkel
// verify from the first cluster to the second. Commands print as
// `$ ...`; checks print ✓ or ✗ and are retried until checkDeadline. It
// returns an error naming the failed checks.
type Tutorial struct {
	Lab *Lab
	// Snorkel is the CLI binary; Kubectl the kubectl binary.
	Snorkel, Kubectl string
	// SnorkelImage is the image the whereami pods run (lab-pod whereami).
	SnorkelImage string
	// CableDriver, if set, is passed to join.
	CableDriver string
	Out         io.Writer

	failed []string
}

// checkDeadline is how long a check is retried: exports, CoreDNS
// reloading its Corefile and the first handshakes take seconds to tens of
// seconds, more on a busy two-core host.
const checkDeadline = 3 * time.Minute

// Run runs the scenario's part of the tutorial, and then fails each
// cluster's active gateway over in each way while traffic runs.
func (t *Tutorial) Run(ctx context.Context) error {
	sc := t.Lab.Scenario
	a, b := sc.Clusters[0], sc.Clusters[1]
	if err := t.Setup(ctx); err != nil {
		return err
	}
	if sc.GlobalnetRange.IsValid() {
		t.globalnetChecks(ctx, a, b)
	} else {
		t.checks(ctx, a, b)
		if err := t.exportClustersetIP(ctx, b); err != nil {
			return err
		}
		t.clustersetIPChecks(ctx, a, b)
		if err := t.whereami(ctx, a); err != nil {
			return err
		}
		t.check(ctx, "http  whereami-cs.sample.svc.clusterset.local answers from "+a.Name+" now that it has the service too (local preference)",
			`"cluster":"`+a.Name+`"`, t.inClient(a, "curl", "-sS", "--max-time", "5", "http://whereami-cs.sample.svc.clusterset.local/")...)
		t.check(ctx, "http  "+b.Name+".whereami-cs.sample.svc.clusterset.local still answers from "+b.Name,
			`"cluster":"`+b.Name+`"`, t.inClient(a, "curl", "-sS", "--max-time", "5", "http://"+b.Name+".whereami-cs.sample.svc.clusterset.local/")...)
		if err := t.exportClustersetIP(ctx, a); err != nil {
			return err
		}
		t.clustersetIPChecks(ctx, a, a)
	}
	cable := api.DefaultCableDriver
	if t.CableDriver != "" {
		cable = t.CableDriver
	}
	t.check(ctx, "show  snorkel show connections lists "+b.Name+" connected over "+cable, b.Name+`.* `+cable+` .*connected`,
		t.Snorkel, "--context", a.Context(), "show", "connections")
	// snorkel verify runs the same kinds of checks with pods of its own,
	// from both of a's nodes to servers on both of b's.
	if err := t.snorkel(ctx, "--context", a.Context(), "verify", "--tocontext", b.Context()); err != nil {
		t.fail("snorkel verify from " + a.Name + " to " + b.Name + ": " + err.Error())
	}
	t.diagnose(ctx, a, b)
	t.gather(ctx, a, b)
	t.failovers(ctx, a, b)
	if len(t.failed) > 0 {
		return fmt.Errorf("nodes: %d checks failed: %s", len(t.failed), strings.Join(t.failed, "; "))
	}
	fmt.Fprintln(t.Out, "all checks passed")
	return nil
}

// Setup deploys the broker, joins every cluster and waits for Snorkel's
// workloads, then deploys the tutorial's services in the second cluster
// and the client in the first.
func (t *Tutorial) Setup(ctx context.Context) error {
	sc := t.Lab.Scenario
	a, b := sc.Clusters[0], sc.Clusters[1]
	deploy := []string{"--context", ContextPrefix + Broker, "deploy-broker"}
	if sc.GlobalnetRange.IsValid() {
		deploy = append(deploy, "--globalnet=true", "--globalnet-cidr-range", sc.GlobalnetRange.String())
	}
	if err := t.snorkel(ctx, deploy...); err != nil {
		return err
	}
	for _, c := range sc.Clusters {
		join := []string{"--context", c.Context(), "join", "broker-info.subm", "--clusterid", c.Name}
		if c.GlobalCIDR.IsValid() {
			join = append(join, "--globalnet-cidr", c.GlobalCIDR.String())
		}
		if t.CableDriver != "" {
			join = append(join, "--cable-driver", t.CableDriver)
		}
		if err := t.snorkel(ctx, join...); err != nil {
			return err
		}
	}
	for _, c := range sc.Clusters {
		for _, w := range []string{"daemonset/snorkel-agent", "daemonset/submariner-routeagent", "deployment/submariner-lighthouse-coredns"} {
			if err := t.kubectl(ctx, "--context", c.Context(), "-n", "submariner-operator", "rollout", "status", w, "--timeout=5m"); err != nil {
				return err
			}
		}
	}
	if err := t.whereami(ctx, b); err != nil {
		return err
	}
	return t.client(ctx, a)
}

// checks are the tutorial's checks between two clusters with distinct
// CIDRs, from the client pod on a's worker: by name and address, to the
// ClusterIP service and to every backend pod, on both of b's nodes.
func (t *Tutorial) checks(ctx context.Context, a, b Cluster) {
	kb, err := Client(t.Lab.StateDir, b.Name)
	if err != nil {
		t.fail("client of " + b.Name + ": " + err.Error())
		return
	}
	svc, err := kb.CoreV1().Services("sample").Get(ctx, "whereami-cs", metav1.GetOptions{})
	if err != nil {
		t.fail("whereami-cs in " + b.Name + ": " + err.Error())
		return
	}
	clientIP := t.clientIP(ctx, a)
	fmt.Fprintf(t.Out, "%s → %s (client %s on %s-worker)\n", a.Name, b.Name, clientIP, a.Name)
	curl := func(url string) []string {
		return t.inClient(a, "curl", "-sS", "--max-time", "5", url)
	}
	t.check(ctx, "dns   whereami-cs.sample.svc.clusterset.local is "+b.Name+"'s ClusterIP "+svc.Spec.ClusterIP,
		"^"+regexp.QuoteMeta(svc.Spec.ClusterIP)+"$", t.inClient(a, "dig", "+short", "whereami-cs.sample.svc.clusterset.local")...)
	t.check(ctx, "http  whereami-cs.sample.svc.clusterset.local answers from "+b.Name,
		`"cluster":"`+b.Name+`"`, curl("http://whereami-cs.sample.svc.clusterset.local/")...)
	t.check(ctx, "http  "+b.Name+".whereami-cs.sample.svc.clusterset.local answers from "+b.Name,
		`"cluster":"`+b.Name+`"`, curl("http://"+b.Name+".whereami-cs.sample.svc.clusterset.local/")...)
	t.check(ctx, "dns   whereami-ss.sample.svc.clusterset.local lists "+b.Name+"'s pods",
		"^"+regexp.QuoteMeta(prefixOf(b.PodCIDR)), t.inClient(a, "dig", "+short", "whereami-ss.sample.svc.clusterset.local")...)
	// A headless name is the pod's own address: no Service maps port 80,
	// so the request goes to the container's port.
	t.check(ctx, "http  whereami-0."+b.Name+".whereami-ss.sample.svc.clusterset.local is pod whereami-0",
		`"pod":"whereami-0"`, curl("http://whereami-0."+b.Name+".whereami-ss.sample.svc.clusterset.local:8080/")...)
	pods, err := kb.CoreV1().Pods("sample").List(ctx, metav1.ListOptions{LabelSelector: "app=whereami"})
	if err != nil {
		t.fail("whereami pods in " + b.Name + ": " + err.Error())
		return
	}
	for _, p := range pods.Items {
		t.check(ctx, fmt.Sprintf("ping  %s client → %s pod %s on %s", a.Name, b.Name, p.Status.PodIP, p.Spec.NodeName),
			" 0% packet loss", t.inClient(a, "ping", "-c", "3", "-W", "2", p.Status.PodIP)...)
		t.check(ctx, fmt.Sprintf("http  %s pod %s on %s sees the client's own address %s", b.Name, p.Status.PodIP, p.Spec.NodeName, clientIP),
			`"client":"`+regexp.QuoteMeta(clientIP)+`:`, curl("http://"+p.Status.PodIP+":8080/")...)
	}
}

// clustersetIPRange matches an address of the broker's default clusterset
// IP range, 243.0.0.0/8.
const clustersetIPRange = `^243\.[0-9]+\.[0-9]+\.[0-9]+$`

// exportClustersetIP exports whereami-vip in c with a clusterset IP.
func (t *Tutorial) exportClustersetIP(ctx context.Context, c Cluster) error {
	return t.snorkel(ctx, "--context", c.Context(), "export", "service", "--namespace", "sample", "whereami-vip", "--use-clusterset-ip")
}

// clustersetIPChecks check from the client pod on a's worker that
// whereami-vip resolves to a clusterset IP and that HTTP to it answers
// from answering: the only exporter, or the local one once a exports too.
func (t *Tutorial) clustersetIPChecks(ctx context.Context, a, answering Cluster) {
	fmt.Fprintf(t.Out, "%s → whereami-vip's clusterset IP, %s exporting it\n", a.Name, answering.Name)
	t.check(ctx, "dns   whereami-vip.sample.svc.clusterset.local is a clusterset IP in 243.0.0.0/8",
		clustersetIPRange, t.inClient(a, "dig", "+short", "whereami-vip.sample.svc.clusterset.local")...)
	t.check(ctx, "http  whereami-vip.sample.svc.clusterset.local (the VIP) answers from "+answering.Name,
		`"cluster":"`+answering.Name+`"`, t.inClient(a, "curl", "-sS", "--max-time", "5", "http://whereami-vip.sample.svc.clusterset.local/")...)
}

// globalnetChecks are the tutorial's Globalnet checks: the service's name
// resolves to a global IP of b and answers from b, and a whereami pod
// reached at its own global IP sees the client's, in a's global CIDR.
func (t *Tutorial) globalnetChecks(ctx context.Context, a, b Cluster) {
	fmt.Fprintf(t.Out, "%s → %s (Globalnet: the same CIDRs on both sides)\n", a.Name, b.Name)
	curl := func(url string) []string {
		return t.inClient(a, "curl", "-sS", "--max-time", "5", url)
	}
	t.check(ctx, "dns   whereami-cs.sample.svc.clusterset.local is a global IP of "+b.Name+" ("+b.GlobalCIDR.String()+")",
		"^"+regexp.QuoteMeta(prefixOf(b.GlobalCIDR)), t.inClient(a, "dig", "+short", "whereami-cs.sample.svc.clusterset.local")...)
	// The service's global IP leads to its ClusterIP, and kube-proxy
	// masquerades what reaches a ClusterIP from outside the Pod CIDR: the
	// backend sees b's gateway node. A pod's global IP leads to the pod.
	t.check(ctx, "http  whereami-cs.sample.svc.clusterset.local answers from "+b.Name,
		`"cluster":"`+b.Name+`"`, curl("http://whereami-cs.sample.svc.clusterset.local/")...)
	kb, err := Client(t.Lab.StateDir, b.Name)
	if err != nil {
		t.fail("client of " + b.Name + ": " + err.Error())
		return
	}
	pods, err := kb.CoreV1().Pods("sample").List(ctx, metav1.ListOptions{LabelSelector: "app=whereami-ss"})
	if err != nil {
		t.fail("whereami-ss pods in " + b.Name + ": " + err.Error())
		return
	}
	for _, p := range pods.Items {
		name := p.Name + "." + b.Name + ".whereami-ss.sample.svc.clusterset.local"
		t.check(ctx, "dns   "+name+" is a global IP of "+b.Name,
			"^"+regexp.QuoteMeta(prefixOf(b.GlobalCIDR)), t.inClient(a, "dig", "+short", name)...)
		t.check(ctx, "http  "+name+" is pod "+p.Name+" on "+p.Spec.NodeName+" and sees the client's global IP, in "+a.GlobalCIDR.String(),
			`"pod":"`+p.Name+`".*"client":"`+regexp.QuoteMeta(prefixOf(a.GlobalCIDR)), curl("http://"+name+":8080/")...)
	}
}

// prefixOf is the start every address of p shares when written out: its
// first three octets for a /24 or shorter block, "10.9." for a /16.
func prefixOf(p netip.Prefix) string {
	a := p.Masked().Addr().As4()
	switch {
	case p.Bits() >= 24:
		return fmt.Sprintf("%d.%d.%d.", a[0], a[1], a[2])
	case p.Bits() >= 16:
		return fmt.Sprintf("%d.%d.", a[0], a[1])
	default:
		return fmt.Sprintf("%d.", a[0])
	}
}

// whereami deploys the tutorial's services in c and exports them.
func (t *Tutorial) whereami(ctx context.Context, c Cluster) error {
	f := filepath.Join(t.Lab.StateDir, "whereami-"+c.Name+".yaml")
	if err := os.WriteFile(f, []byte(whereamiManifest(c.Name, t.SnorkelImage)), 0o644); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"--context", c.Context(), "apply", "-f", f},
		{"--context", c.Context(), "-n", "sample", "rollout", "status", "deployment/whereami", "--timeout=5m"},
		{"--context", c.Context(), "-n", "sample", "rollout", "status", "statefulset/whereami", "--timeout=5m"},
	} {
		if err := t.kubectl(ctx, args...); err != nil {
			return err
		}
	}
	for _, svc := range []string{"whereami-cs", "whereami-ss"} {
		if err := t.snorkel(ctx, "--context", c.Context(), "export", "service", "--namespace", "sample", svc); err != nil {
			return err
		}
	}
	return nil
}

// client starts the client pod on c's worker node.
func (t *Tutorial) client(ctx context.Context, c Cluster) error {
	f := filepath.Join(t.Lab.StateDir, "client-"+c.Name+".yaml")
	if err := os.WriteFile(f, []byte(clientManifest(c.Worker().Name)), 0o644); err != nil {
		return err
	}
	if err := t.kubectl(ctx, "--context", c.Context(), "apply", "-f", f); err != nil {
		return err
	}
	return t.kubectl(ctx, "--context", c.Context(), "-n", "sample", "wait", "pod/client", "--for=condition=Ready", "--timeout=5m")
}

func (t *Tutorial) clientIP(ctx context.Context, c Cluster) string {
	kc, err := Client(t.Lab.StateDir, c.Name)
	if err != nil {
		return ""
	}
	p, err := kc.CoreV1().Pods("sample").Get(ctx, "client", metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return p.Status.PodIP
}

// inClient is a kubectl exec of argv in c's client pod.
func (t *Tutorial) inClient(c Cluster, argv ...string) []string {
	return append([]string{t.Kubectl, "--context", c.Context(), "-n", "sample", "exec", "client", "--"}, argv...)
}

func (t *Tutorial) env() []string {
	return append(os.Environ(), "KUBECONFIG="+KubeconfigFile(t.Lab.StateDir))
}

// snorkel runs a snorkel command, printed as the user types it.
func (t *Tutorial) snorkel(ctx context.Context, args ...string) error {
	return t.command(ctx, "snorkel", t.Snorkel, args...)
}

func (t *Tutorial) kubectl(ctx context.Context, args ...string) error {
	return t.command(ctx, "kubectl", t.Kubectl, args...)
}

func (t *Tutorial) command(ctx context.Context, name, bin string, args ...string) error {
	fmt.Fprintf(t.Out, "$ %s %s\n", name, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = t.Lab.StateDir, t.env()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(t.Out, &out), io.MultiWriter(t.Out, &out)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nodes: %s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// check runs argv until its output matches pattern, and prints the
// outcome.
func (t *Tutorial) check(ctx context.Context, what, pattern string, argv ...string) {
	re := regexp.MustCompile("(?m)" + pattern)
	var out []byte
	err := waitFor(ctx, checkDeadline, what, func() error {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = t.Lab.StateDir, t.env()
		var err error
		out, err = cmd.CombinedOutput()
		if err == nil && re.Match(out) {
			return nil
		}
		return fmt.Errorf("no match")
	})
	if err != nil {
		got := strings.Join(strings.Fields(string(out)), " ")
		if len(got) > 300 {
			got = got[:300]
		}
		fmt.Fprintf(t.Out, "✗ %s: got %q\n", what, got)
		t.failed = append(t.failed, what)
		return
	}
	fmt.Fprintf(t.Out, "✓ %s\n", what)
}

func (t *Tutorial) fail(what string) {
	fmt.Fprintf(t.Out, "✗ %s\n", what)
	t.failed = append(t.failed, what)
}

// whereamiManifest is the tutorial's whereami services for cluster: a
// Deployment of three behind the ClusterIP services whereami-cs and
// whereami-vip (exported with a clusterset IP), and a StatefulSet of three
// behind the headless whereami-ss, spread over both nodes so that traffic
// crosses worker to gateway as well.
func whereamiManifest(cluster, image string) string {
	workload := func(kind, name, app, extra string) string {
		return fmt.Sprintf(`apiVersion: apps/v1
kind: %s
metadata:
  name: %s
  namespace: sample
spec:
%s  replicas: 3
  selector:
    matchLabels:
      app: %s
  template:
    metadata:
      labels:
        app: %s
    spec:
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: DoNotSchedule
          labelSelector:
            matchLabels:
              app: %s
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
      containers:
        - name: whereami
          image: %s
          args: [lab-pod, whereami, --name=$(POD_NAME), --cluster=%s, --listen=:8080]
          env:
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
          ports:
            - name: http
              containerPort: 8080
          readinessProbe:
            httpGet:
              path: /
              port: http
            periodSeconds: 2
`, kind, name, extra, app, app, app, image, cluster)
	}
	return `apiVersion: v1
kind: Namespace
metadata:
  name: sample
---
` + workload("Deployment", "whereami", "whereami", "") + `---
apiVersion: v1
kind: Service
metadata:
  name: whereami-cs
  namespace: sample
spec:
  selector:
    app: whereami
  ports:
    - name: http
      port: 80
      targetPort: http
---
apiVersion: v1
kind: Service
metadata:
  name: whereami-vip
  namespace: sample
spec:
  selector:
    app: whereami
  ports:
    - name: http
      port: 80
      targetPort: http
---
apiVersion: v1
kind: Service
metadata:
  name: whereami-ss
  namespace: sample
spec:
  clusterIP: None
  selector:
    app: whereami-ss
  ports:
    - name: http
      port: 80
      targetPort: http
---
` + workload("StatefulSet", "whereami", "whereami-ss", "  serviceName: whereami-ss\n")
}

// clientManifest is the tutorial's client pod, on node.
func clientManifest(node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: sample
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: sample
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers:
    - name: client
      image: %s
      command: [sleep, infinity]
`, node, ClientImage)
}
