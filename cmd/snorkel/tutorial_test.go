package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
)

// TestTutorialGlobalnet runs the Globalnet tutorial's commands as a
// Submariner user types them, with snorkel for subctl and the global
// flags before the verb, against real API servers named as kind names
// them; and join's gateway flags on the way.
func TestTutorialGlobalnet(t *testing.T) {
	servers := kubetest.Start(t,
		kubelocal.Options{Name: "broker"},
		kubelocal.Options{Name: "c1", ServiceCIDR: "10.96.0.0/16"},
		kubelocal.Options{Name: "c2", ServiceCIDR: "10.96.0.0/16"},
		kubelocal.Options{Name: "c3", ServiceCIDR: "10.96.0.0/16"})
	dir := t.TempDir()
	kubeconfig := mergeKubeconfigs(t, dir, servers)
	env := []string{"KUBECONFIG=" + kubeconfig}
	clients := map[string]kubernetes.Interface{}
	for _, s := range servers[1:] {
		kc, err := s.Client()
		if err != nil {
			t.Fatal(err)
		}
		clients[s.Name] = kc
		// kind's clusters all have the same Pod CIDR, which join reads
		// from kube-controller-manager's flags: the reason for Globalnet.
		kubeControllerManager(t, kc, "10.244.0.0/16")
	}
	// c1 has a control-plane node and a worker, neither labelled the
	// gateway; c2 one worker; c2 runs CoreDNS as kubeadm sets it up.
	node(t, clients["c1"], "c1-control-plane", map[string]string{"node-role.kubernetes.io/control-plane": ""})
	node(t, clients["c1"], "c1-worker", nil)
	node(t, clients["c2"], "c2-worker", nil)
	coreDNS(t, clients["c2"])

	run := func(wantCode int, args ...string) snorkelRun {
		t.Helper()
		r := runSnorkelIn(t, dir, env, args...)
		if r.code != wantCode {
			t.Fatalf("snorkel %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, wantCode, r.stdout, r.stderr)
		}
		return r
	}
	wantLines := func(out string, lines ...string) {
		t.Helper()
		for _, l := range lines {
			if !strings.Contains(out, l) {
				t.Errorf("output lacks %q:\n%s", l, out)
			}
		}
	}

	r := run(0, "--context", "kind-broker", "deploy-broker", "--globalnet=true", "--globalnet-cidr-range", "120.0.0.0/8")
	wantLines(r.stdout, "in namespace submariner-k8s-broker (Globalnet on: 120.0.0.0/8, a /16 per cluster)", "wrote broker-info.subm")

	r = run(0, "--context", "kind-c1", "join", "broker-info.subm", "--clusterid", "c1", "--globalnet-cidr", "120.1.0.0/24")
	wantLines(r.stdout,
		"cluster c1 joined the broker at",
		"pods 10.244.0.0/16, services 10.96.0.0/16, global CIDR 120.1.0.0/24, cable driver esp",
		"gateway: UDP port 4500, NAT traversal on, health check on, IKE initiator or responder by cluster ID; DNS domains clusterset.local",
		"labelled node c1-worker as the gateway (submariner.io/gateway=true)",
		"gateway nodes: c1-worker")

	// subctl's --load-balancer: a Service of type LoadBalancer in front of
	// the gateway's two UDP ports; joining again without it removes it.
	r = run(0, "--context", "kind-c1", "join", "broker-info.subm", "--clusterid", "c1", "--load-balancer")
	wantLines(r.stdout, "load balancer: Service submariner-operator/submariner-gateway (type LoadBalancer, UDP 4500 and 4490) in front of the gateways")
	lb, err := clients["c1"].CoreV1().Services(api.AgentNamespace).Get(t.Context(), api.GatewayLoadBalancer, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lb.Spec.Type != corev1.ServiceTypeLoadBalancer || lb.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal ||
		lb.Spec.Selector["app.kubernetes.io/name"] != broker.AgentDaemonSet || len(lb.Spec.Ports) != 2 ||
		lb.Spec.Ports[0].Protocol != corev1.ProtocolUDP || lb.Spec.Ports[0].Port != 4500 || lb.Spec.Ports[1].Port != 4490 {
		t.Errorf("the gateway's load balancer: %+v", lb.Spec)
	}
	if c1, err := api.LoadAgentConfig(t.Context(), clients["c1"], api.AgentNamespace); err != nil || !c1.LoadBalancer {
		t.Errorf("c1's agent configuration does not say --load-balancer: %v", err)
	}
	run(0, "--context", "kind-c1", "join", "broker-info.subm", "--clusterid", "c1")
	if _, err := clients["c1"].CoreV1().Services(api.AgentNamespace).Get(t.Context(), api.GatewayLoadBalancer, metav1.GetOptions{}); err == nil {
		t.Error("joining again without --load-balancer left the load balancer")
	}

	r = run(0, "--context", "kind-c2", "join", "broker-info.subm", "--clusterid", "c2", "--globalnet-cidr", "120.2.0.0/24",
		"--natt=false", "--nattport", "4600", "--preferred-server", "--health-check=false", "--health-check-interval", "3", "--health-check-max-packet-loss-count", "7", "--custom-domains", "supercluster.local",
		"--air-gapped", "--label-gateway=false", "--pod-debug", "--repository", "quay.io/example/", "--version", "0.1",
		"--operator-debug", "--force-udp-encaps", "--ikeport", "500", "--ignore-requirements")
	wantLines(r.stdout,
		"global CIDR 120.2.0.0/24",
		"gateway: UDP port 4600, NAT traversal off, health check off, preferred server (IKE responder), air-gapped, debug logs; DNS domains clusterset.local, supercluster.local",
		"note: --operator-debug changes nothing: Snorkel has no operator",
		"note: --force-udp-encaps changes nothing: Snorkel's ESP is always encapsulated in UDP",
		"note: --ikeport 500 changes nothing: IKE shares the gateway's UDP port 4600 (--nattport) with ESP",
		"note: --ignore-requirements changes nothing",
		"CoreDNS (kube-system/coredns) now forwards clusterset.local, supercluster.local to ",
		"no gateway node yet: label one with `kubectl label node NODE submariner.io/gateway=true`")
	c2, err := api.LoadAgentConfig(t.Context(), clients["c2"], api.AgentNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if want := (api.GatewaySettings{NATTraversalOff: true, NATTPort: 4600, PreferredServer: true, HealthCheckOff: true, HealthCheckInterval: 3, HealthCheckMaxPacketLossCount: 7, CustomDomains: []string{"supercluster.local"}, AirGapped: true, Debug: true}); fmt.Sprint(c2.GatewaySettings) != fmt.Sprint(want) {
		t.Errorf("c2's agent configuration has %+v, want %+v", c2.GatewaySettings, want)
	}
	// subctl's --repository and --version name the image every workload
	// runs.
	for _, ds := range []string{broker.AgentDaemonSet, broker.RouteAgentDaemonSet} {
		d, err := clients["c2"].AppsV1().DaemonSets(api.AgentNamespace).Get(t.Context(), ds, metav1.GetOptions{})
		if err != nil {
			t.Errorf("DaemonSet %s: %v", ds, err)
		} else if c := d.Spec.Template.Spec.Containers[0]; c.Image != "quay.io/example/snorkel:0.1" {
			t.Errorf("DaemonSet %s runs %s, want quay.io/example/snorkel:0.1", ds, c.Image)
		}
	}
	cm, err := clients["c2"].CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(t.Context(), broker.CoreDNSConfigMap, metav1.GetOptions{})
	if err != nil || !strings.Contains(cm.Data["Corefile"], "supercluster.local:53 {\n    forward . ") {
		t.Errorf("c2's Corefile does not forward supercluster.local (%v):\n%s", err, cm.Data["Corefile"])
	}
	n, err := clients["c2"].CoreV1().Nodes().Get(t.Context(), "c2-worker", metav1.GetOptions{})
	if err != nil || n.Labels[broker.GatewayLabel] != "" {
		t.Errorf("--label-gateway=false labelled c2-worker: %v %v", n.Labels, err)
	}

	// subctl's --globalnet-cluster-size: the first free block of 300
	// global IPs, rounded up to 512.
	r = run(0, "--context", "kind-c3", "join", "broker-info.subm", "--clusterid", "c3", "--globalnet-cluster-size", "300", "--label-gateway=false")
	wantLines(r.stdout, "global CIDR 120.0.0.0/23")

	// Blocks join refuses, each naming the flag and the fix; nothing is
	// registered for them.
	for _, tc := range []struct {
		cidr, want string
	}{
		{"120.1.0.0/25", `--globalnet-cidr 120.1.0.0/25 overlaps 120.1.0.0/24 of cluster "c1"; give a free /25 of 120.0.0.0/8`},
		{"10.1.0.0/24", "--globalnet-cidr 10.1.0.0/24 lies outside the broker's Globalnet range 120.0.0.0/8"},
		{"120.3.0.1/24", "--globalnet-cidr 120.3.0.1/24 is not a network address; did you mean 120.3.0.0/24?"},
	} {
		r = run(1, "--context", "kind-c3", "join", "broker-info.subm", "--clusterid", "c4", "--globalnet-cidr", tc.cidr)
		wantLines(r.stderr, "snorkel join: "+tc.want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--globalnet=false"}, "--globalnet=false: the broker has Globalnet on (120.0.0.0/8), and Snorkel does not mix clusters with and without global CIDRs"},
		{[]string{"--image-override", "submariner-gateway=quay.io/x/gw:1"}, `--image-override "submariner-gateway=quay.io/x/gw:1": Snorkel runs one image for every component; give snorkel=IMAGE`},
		{[]string{"--image", "quay.io/x/snorkel:1", "--version", "2"}, "--image quay.io/x/snorkel:1 and --version both choose the image: give one of them"},
		{[]string{"--broker-url", "http://broker:6443"}, `--broker-url "http://broker:6443" is not the broker's API server URL: give https://HOST[:PORT]`},
	} {
		r = run(1, append([]string{"--context", "kind-c3", "join", "broker-info.subm", "--clusterid", "c3"}, tc.args...)...)
		wantLines(r.stderr, tc.want)
	}

	// A broker-info file with another URL and a CA that did not sign the
	// broker's certificate: --broker-url corrects the first, and only
	// --check-broker-certificate=false gets past the second, for join and
	// the agent.
	info, err := broker.ReadInfoFile(filepath.Join(dir, "broker-info.subm"))
	if err != nil {
		t.Fatal(err)
	}
	info.BrokerURL = "https://127.0.0.1:1"
	info.ClientToken.Data["ca.crt"] = servers[1].CA
	if err := info.WriteFile(filepath.Join(dir, "elsewhere.subm")); err != nil {
		t.Fatal(err)
	}
	r = run(1, "--context", "kind-c3", "join", "elsewhere.subm", "--clusterid", "c3", "--broker-url", servers[0].URL)
	wantLines(r.stderr, "neither the broker-info file's CA nor the system's roots sign: write the file again with snorkel deploy-broker, or join with --check-broker-certificate=false")
	r = run(0, "--context", "kind-c3", "join", "elsewhere.subm", "--clusterid", "c3", "--broker-url", servers[0].URL, "--check-broker-certificate=false", "--label-gateway=false")
	wantLines(r.stdout,
		"broker at "+servers[0].URL+" (--broker-url; elsewhere.subm names https://127.0.0.1:1)",
		"cluster c3 joined the broker at "+servers[0].URL,
		"the broker's certificate is not checked (--check-broker-certificate=false), by join or by the agent")
	c3, err := api.LoadAgentConfig(t.Context(), clients["c3"], api.AgentNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if c3.BrokerURL != servers[0].URL || !c3.BrokerInsecure || !c3.BrokerConfig().Insecure {
		t.Errorf("c3's agent configuration: broker %s, insecure %v; want %s without a certificate check", c3.BrokerURL, c3.BrokerInsecure, servers[0].URL)
	}

	// subctl's --coredns-custom-configmap: the forwards go into that
	// ConfigMap, for a CoreDNS that imports server blocks from it.
	r = run(0, "--context", "kind-c3", "join", "broker-info.subm", "--clusterid", "c3", "--label-gateway=false", "--coredns-custom-configmap", "coredns-custom")
	wantLines(r.stdout, "CoreDNS's custom ConfigMap kube-system/coredns-custom now forwards clusterset.local to ")
	custom, err := clients["c3"].CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(t.Context(), "coredns-custom", metav1.GetOptions{})
	if err != nil || !strings.Contains(custom.Data["lighthouse.server"], "clusterset.local:53 {") {
		t.Errorf("c3's custom CoreDNS ConfigMap has no forward (%v): %v", err, custom)
	}
	r = run(1, "--context", "kind-c3", "join", "broker-info.subm", "--clusterid", "c3", "--coredns-custom-configmap", "Kube_System/custom")
	wantLines(r.stderr, `--coredns-custom-configmap "Kube_System/custom": give [NAMESPACE/]NAME`)
	if c3, err = api.LoadAgentConfig(t.Context(), clients["c3"], api.AgentNamespace); err != nil || c3.CoreDNSCustomConfigMap != "kube-system/coredns-custom" {
		t.Errorf("c3's agent configuration does not name the custom CoreDNS ConfigMap (%v): %+v", err, c3)
	}

	r = run(1, "--context", "kind-c3", "join", "broker-info.subm", "--clusterid", "c3", "--nattport", "0")
	wantLines(r.stderr, "--nattport 0 is not a UDP port")
	r = run(1, "--context", "kind-c3", "join", "broker-info.subm", "--clusterid", "c3", "--health-check-interval", "0")
	wantLines(r.stderr, "--health-check-interval 0 is out of range: use 1 or more")
	r = run(1, "--context", "kind-c3", "join", "broker-info.subm", "--clusterid", "c3", "--health-check-max-packet-loss-count", "1001")
	wantLines(r.stderr, "--health-check-max-packet-loss-count 1001 is out of range: use 1 to 1000")

	// The global flags as the tutorial places them, after the verb as
	// before, and both ways with the one after the verb winning.
	for _, args := range [][]string{
		{"--kubeconfig", kubeconfig, "--context", "kind-c2", "show", "networks"},
		{"show", "networks", "--context", "kind-c2"},
		{"--context", "kind-c1", "show", "networks", "--context", "kind-c2"},
	} {
		r = run(0, args...)
		wantLines(r.stdout, "120.2.0.0/24")
		if strings.Contains(r.stdout, "120.1.0.0/24") {
			t.Errorf("snorkel %s showed c1:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
	r = run(2, "--clusterid", "c1", "--context", "kind-c1", "join", "broker-info.subm")
	wantLines(r.stderr, "snorkel: unknown global flag --clusterid before the command: the global flags are --kubeconfig, --context, --contexts")
}

// mergeKubeconfigs writes one kubeconfig with a context per server, named
// as kind names its clusters' contexts: kind-NAME.
func mergeKubeconfigs(t *testing.T, dir string, servers []*kubelocal.Server) string {
	t.Helper()
	merged := clientcmdapi.NewConfig()
	for _, s := range servers {
		c, err := clientcmd.LoadFromFile(s.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		ctx := c.Contexts[s.Name]
		if ctx == nil {
			t.Fatalf("%s has no context %s", s.Kubeconfig, s.Name)
		}
		name := "kind-" + s.Name
		merged.Clusters[name] = c.Clusters[ctx.Cluster]
		merged.AuthInfos[name] = c.AuthInfos[ctx.AuthInfo]
		merged.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	merged.CurrentContext = "kind-broker"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*merged, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func kubeControllerManager(t *testing.T, kc kubernetes.Interface, podCIDR string) {
	t.Helper()
	ctx := t.Context()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: metav1.NamespaceSystem}}
	if _, err := kc.CoreV1().ServiceAccounts(metav1.NamespaceSystem).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"component": "kube-controller-manager"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "kube-controller-manager", Image: "registry.k8s.io/kube-controller-manager:v1.37.2",
			Command: []string{"kube-controller-manager", "--allocate-node-cidrs=true", "--cluster-cidr=" + podCIDR},
		}}},
	}
	if _, err := kc.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func node(t *testing.T, kc kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	if _, err := kc.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func coreDNS(t *testing.T, kc kubernetes.Interface) {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: broker.CoreDNSConfigMap, Namespace: metav1.NamespaceSystem},
		Data:       map[string]string{"Corefile": ".:53 {\n    errors\n    forward . /etc/resolv.conf\n}\n"},
	}
	if _, err := kc.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
