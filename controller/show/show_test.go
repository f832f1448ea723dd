package show

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/snorkel-net/snorkel/controller/agent"
	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/internal/statusline"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
)

// dataplane is the agent's data plane in the test: it reports the
// connection to c2 as connected, with a measured round trip.
type dataplane struct{}

func (dataplane) Apply(context.Context, *gateway.Spec) error { return nil }

func (dataplane) Status() []agent.RemoteStatus {
	return []agent.RemoteStatus{{ID: "c2", Status: submv1.Connected, RTT: &agent.RTT{
		Last: 1200 * time.Microsecond, Min: 900 * time.Microsecond, Average: 1100 * time.Microsecond,
		Max: 1500 * time.Microsecond, StdDev: 150 * time.Microsecond,
	}}}
}

// world is a broker and two members: c1 runs a real agent, c2's gateways
// are written as its agent would write them. gone is a context nobody
// listens at.
type world struct {
	brk, c1, c2 *kubelocal.Server
	// kubeconfig merges the three servers' kubeconfigs and gone's.
	kubeconfig string
	goneURL    string
}

func TestShow(t *testing.T) {
	servers := kubetest.Start(t,
		kubelocal.Options{Name: "broker"},
		kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"},
		kubelocal.Options{Name: "c2", ServiceCIDR: "10.99.0.0/16"})
	w := &world{brk: servers[0], c1: servers[1], c2: servers[2]}
	w.setUp(t)

	for _, tc := range []struct {
		name     string
		view     View
		contexts []string
		want     string
		// wantErr is the start of Run's error; empty: no error.
		wantErr string
	}{
		{
			name: "connections: the active gateway's connection with its RTT, a connecting one without",
			view: Connections, contexts: []string{"c1", "c2"},
			want: `Cluster "c1"
 ✓ Showing Connections
GATEWAY   CLUSTER   REMOTE IP      NAT   CABLE DRIVER   SUBNETS                     STATUS      RTT avg.
gw-c2     c2        198.51.100.7   yes   vxlan          10.9.0.0/16, 10.99.0.0/16   connected   1.1ms

Cluster "c2"
 ✓ Showing Connections
GATEWAY   CLUSTER   REMOTE IP    NAT   CABLE DRIVER   SUBNETS                     STATUS       RTT avg.
gw-c1     c1        172.18.0.5   no    vxlan          10.8.0.0/16, 10.88.0.0/16   connecting

`,
		},
		{
			name: "endpoints: each gateway's own, then the remote ones it connects to",
			view: Endpoints, contexts: []string{"c1", "c2"},
			want: `Cluster "c1"
 ✓ Showing Endpoints
CLUSTER   ENDPOINT IP   PUBLIC IP      CABLE DRIVER   TYPE
c1        172.18.0.5                   vxlan          local
c2        172.18.0.6    198.51.100.7   vxlan          remote

Cluster "c2"
 ✓ Showing Endpoints
CLUSTER   ENDPOINT IP   PUBLIC IP      CABLE DRIVER   TYPE
c2        172.18.0.6    198.51.100.7   vxlan          local
c1        172.18.0.5                   vxlan          remote
c2        172.18.0.7                   vxlan          local

`,
		},
		{
			name: "gateways: HA status and a summary, or the gateway's failure on one line",
			view: Gateways, contexts: []string{"c1", "c2"},
			want: `Cluster "c1"
 ✓ Showing Gateways
NODE    HA STATUS   SUMMARY
gw-c1   active      All connections (1) are established

Cluster "c2"
 ✓ Showing Gateways
NODE     HA STATUS   SUMMARY
gw-c2    active      0 connections out of 1 are established
gw-c2b   passive     watching the broker's Endpoints: connection refused; writing the Gateway status: timeout

`,
		},
		{
			name: "networks: what join recorded",
			view: Networks, contexts: []string{"c1"},
			want: `Cluster "c1"
 ✓ Showing Network details
    Discovered network details via Snorkel:
        Cluster ID:      c1
        Service CIDRs:   [10.88.0.0/16]
        Cluster CIDRs:   [10.8.0.0/16]
        ClustersetIP CIDR:     243.0.0.0/20

`,
		},
		{
			name: "brokers: hosted ones on the broker, the joined one on a member, none elsewhere",
			view: Brokers, contexts: []string{"broker", "c1", "c2"},
			want: `Cluster "broker"
 ✓ Detecting broker(s)
NAMESPACE               URL          COMPONENTS                                   GLOBALNET   GLOBALNET CIDR   DEFAULT GLOBALNET SIZE
globalnet-broker        BROKER-URL   connectivity, globalnet, service-discovery   yes         242.0.0.0/8      65536
submariner-k8s-broker   BROKER-URL   connectivity, service-discovery              no

Cluster "c1"
 ✓ Detecting broker(s)
NAMESPACE               URL          COMPONENTS                        GLOBALNET   GLOBALNET CIDR   DEFAULT GLOBALNET SIZE
submariner-k8s-broker   BROKER-URL   connectivity, service-discovery   no

Cluster "c2"
 ✓ Detecting broker(s)
NAMESPACE               URL          COMPONENTS                        GLOBALNET   GLOBALNET CIDR   DEFAULT GLOBALNET SIZE
submariner-k8s-broker   BROKER-URL   connectivity, service-discovery   no

`,
		},
		{
			name: "versions: the agent DaemonSet's image and what its agent runs; bare agents by version",
			view: Versions, contexts: []string{"c1", "c2"},
			want: `Cluster "c1"
 ✓ Showing versions
COMPONENT                       REPOSITORY            CONFIGURED   RUNNING       ARCH
snorkel-agent                   ghcr.io/snorkel-net   v0.9.0       v0.9.0        arm64
submariner-lighthouse-coredns   ghcr.io/snorkel-net   v0.9.0       Unavailable   Unavailable

Cluster "c2"
 ✓ Showing versions
COMPONENT       REPOSITORY   CONFIGURED   RUNNING   ARCH
snorkel-agent                             v0.8.1

`,
		},
		{
			name: "a context without Snorkel says so and the others are shown",
			view: Gateways, contexts: []string{"broker", "c1"},
			want: `Cluster "broker"
 ⚠ Snorkel is not installed in context "broker" (no Secret submariner-operator/snorkel-agent): run ` + "`snorkel join`" + ` for this cluster

Cluster "c1"
 ✓ Showing Gateways
NODE    HA STATUS   SUMMARY
gw-c1   active      All connections (1) are established

`,
		},
		{
			name: "nothing to show is an error",
			view: Connections, contexts: []string{"broker"},
			want: `Cluster "broker"
 ⚠ Snorkel is not installed in context "broker" (no Secret submariner-operator/snorkel-agent): run ` + "`snorkel join`" + ` for this cluster

`,
			wantErr: `nothing to show in context "broker"`,
		},
		{
			name: "all on the broker: its brokers, then that Snorkel is not installed",
			view: All, contexts: []string{"broker"},
			want: `Cluster "broker"
 ✓ Detecting broker(s)
NAMESPACE               URL          COMPONENTS                                   GLOBALNET   GLOBALNET CIDR   DEFAULT GLOBALNET SIZE
globalnet-broker        BROKER-URL   connectivity, globalnet, service-discovery   yes         242.0.0.0/8      65536
submariner-k8s-broker   BROKER-URL   connectivity, service-discovery              no

 ⚠ Snorkel is not installed in context "broker" (no Secret submariner-operator/snorkel-agent): run ` + "`snorkel join`" + ` for this cluster

`,
		},
		{
			name: "all on a member: every view in subctl's order",
			view: All, contexts: []string{"c1"},
			want: `Cluster "c1"
 ✓ Detecting broker(s)
NAMESPACE               URL          COMPONENTS                        GLOBALNET   GLOBALNET CIDR   DEFAULT GLOBALNET SIZE
submariner-k8s-broker   BROKER-URL   connectivity, service-discovery   no

 ✓ Showing Connections
GATEWAY   CLUSTER   REMOTE IP      NAT   CABLE DRIVER   SUBNETS                     STATUS      RTT avg.
gw-c2     c2        198.51.100.7   yes   vxlan          10.9.0.0/16, 10.99.0.0/16   connected   1.1ms

 ✓ Showing Endpoints
CLUSTER   ENDPOINT IP   PUBLIC IP      CABLE DRIVER   TYPE
c1        172.18.0.5                   vxlan          local
c2        172.18.0.6    198.51.100.7   vxlan          remote

 ✓ Showing Gateways
NODE    HA STATUS   SUMMARY
gw-c1   active      All connections (1) are established

 ✓ Showing Network details
    Discovered network details via Snorkel:
        Cluster ID:      c1
        Service CIDRs:   [10.88.0.0/16]
        Cluster CIDRs:   [10.8.0.0/16]
        ClustersetIP CIDR:     243.0.0.0/20

 ✓ Showing versions
COMPONENT                       REPOSITORY            CONFIGURED   RUNNING       ARCH
snorkel-agent                   ghcr.io/snorkel-net   v0.9.0       v0.9.0        arm64
submariner-lighthouse-coredns   ghcr.io/snorkel-net   v0.9.0       Unavailable   Unavailable

`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := w.run(t, tc.view, Selection{Contexts: tc.contexts})
			checkErr(t, err, tc.wantErr)
			if got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}

	t.Run("one context picked with --context prints no header", func(t *testing.T) {
		got, err := w.run(t, Gateways, Selection{Context: "c1"})
		checkErr(t, err, "")
		want := ` ✓ Showing Gateways
NODE    HA STATUS   SUMMARY
gw-c1   active      All connections (1) are established
`
		if got != want {
			t.Errorf("got:\n%s\nwant:\n%s", got, want)
		}
	})

	t.Run("every context by default; an unreachable one is named with the reason, the others shown", func(t *testing.T) {
		got, err := w.run(t, Networks, Selection{})
		checkErr(t, err, `could not show context "gone"`)
		for _, want := range []string{
			"Cluster \"broker\"\n ⚠ Snorkel is not installed in context \"broker\"",
			"Cluster \"c1\"\n ✓ Showing Network details\n    Discovered network details via Snorkel:\n        Cluster ID:      c1\n",
			"Cluster \"c2\"\n ✓ Showing Network details\n    Discovered network details via Snorkel:\n        Cluster ID:      c2\n",
			"Cluster \"gone\"\n ✗ Cannot reach context \"gone\" at " + w.goneURL + ": ",
			"connection refused",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("output lacks %q:\n%s", want, got)
			}
		}
		if i, j := strings.Index(got, `Cluster "c2"`), strings.Index(got, `Cluster "gone"`); i < 0 || j < i {
			t.Errorf("clusters not in name order:\n%s", got)
		}
	})

	t.Run("credentials the cluster refuses are named", func(t *testing.T) {
		cfg := w.c1.Config()
		cfg.BearerToken = "wrong"
		var out bytes.Buffer
		err := Run(t.Context(), Gateways, []Target{{Context: "c1", Cluster: "c1", Config: cfg}}, Options{Out: &out, Status: &out})
		checkErr(t, err, `could not show context "c1"`)
		if want := ` ✗ Context "c1" at ` + w.c1.URL + " refused the kubeconfig's credentials: "; !strings.HasPrefix(out.String(), want) {
			t.Errorf("printed %q, want %q…", out.String(), want)
		}
	})

	t.Run("a member that cannot read its broker still shows the broker it joined", func(t *testing.T) {
		kc, err := w.c2.Client()
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		ac, err := api.LoadAgentConfig(ctx, kc, api.AgentNamespace)
		if err != nil {
			t.Fatal(err)
		}
		ac.BrokerToken = "revoked"
		c := &cluster{Conn: &Conn{Target: Target{Context: "c2", Config: w.c2.Config()}, Namespace: api.AgentNamespace, Kube: kc, Agent: ac}}
		r := showBrokers(ctx, c)
		if r.Failed() || !r.shown || r.Worst() != statusline.Warn || len(r.Notes()) != 1 || !strings.Contains(r.Notes()[0].Text, "Cannot read the Globalnet settings of the broker at "+w.brk.URL) {
			t.Fatalf("result %+v", r)
		}
		var out bytes.Buffer
		if err := r.body(&out); err != nil {
			t.Fatal(err)
		}
		if want := "submariner-k8s-broker   " + w.brk.URL + "   connectivity, service-discovery   no\n"; !strings.HasSuffix(out.String(), want) {
			t.Errorf("table:\n%s\nwant its row %q", out.String(), want)
		}
	})
}

// run runs view on the selection of w's kubeconfig and returns the
// output with the broker's URL replaced by BROKER-URL, the URL column's
// heading padded as if the URL were that long.
func (w *world) run(t *testing.T, view View, sel Selection) (string, error) {
	t.Helper()
	sel.Kubeconfig = w.kubeconfig
	var out bytes.Buffer
	targets, header, err := sel.Targets(&out)
	if err != nil {
		t.Fatal(err)
	}
	err = Run(t.Context(), view, targets, Options{Header: header, Out: &out, Status: &out})
	const placeholder = "BROKER-URL"
	url := w.brk.URL
	got := strings.ReplaceAll(out.String(), "   URL"+strings.Repeat(" ", len(url))+"COMPONENTS", "   URL"+strings.Repeat(" ", len(placeholder))+"COMPONENTS")
	return strings.ReplaceAll(got, url, placeholder), err
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("Run: %v", err)
	case want != "" && (err == nil || !strings.HasPrefix(err.Error(), want)):
		t.Errorf("Run returned %v, want %q…", err, want)
	}
}

func (w *world) setUp(t *testing.T) {
	ctx := t.Context()
	d, err := broker.Deploy(ctx, w.brk.Config(), broker.BrokerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := broker.Deploy(ctx, w.brk.Config(), broker.BrokerOptions{Namespace: "globalnet-broker", Globalnet: true}); err != nil {
		t.Fatal(err)
	}
	members := map[string]*api.AgentConfig{}
	for _, m := range []struct {
		srv        *kubelocal.Server
		pods, svcs string
	}{{w.c1, "10.8.0.0/16", "10.88.0.0/16"}, {w.c2, "10.9.0.0/16", "10.99.0.0/16"}} {
		ac, err := broker.Join(ctx, m.srv.Config(), d.Info, broker.JoinOptions{
			ClusterID: m.srv.Name, CableDriver: transport.VXLAN, ClusterCIDRs: []string{m.pods}, ServiceCIDRs: []string{m.svcs},
		})
		if err != nil {
			t.Fatalf("joining %s: %v", m.srv.Name, err)
		}
		members[m.srv.Name] = ac
	}
	c1Endpoint := submv1.EndpointSpec{
		ClusterID: "c1", CableName: "submariner-cable-c1-172-18-0-5", Hostname: "gw-c1",
		Subnets: []string{"10.8.0.0/16", "10.88.0.0/16"}, PrivateIP: "172.18.0.5", Backend: "vxlan",
		BackendConfig: map[string]string{agent.BackendConfigUDPPort: "4500"},
	}
	c2Endpoint := submv1.EndpointSpec{
		ClusterID: "c2", CableName: "submariner-cable-c2-172-18-0-6", Hostname: "gw-c2",
		Subnets: []string{"10.9.0.0/16", "10.99.0.0/16"}, PrivateIP: "172.18.0.6", PublicIP: "198.51.100.7",
		NATEnabled: true, Backend: "vxlan", BackendConfig: map[string]string{agent.BackendConfigUDPPort: "4500"},
	}
	w.writeC2(t, d.Info.Namespace(), c1Endpoint, c2Endpoint)
	w.startC1Agent(t, members["c1"])
	w.writeWorkloads(t)
	w.waitConnected(t)
	w.writeKubeconfig(t)
}

// writeC2 publishes c2 as its agent would: its Endpoint on the broker and
// at home, an active gateway still connecting to c1 and a passive one
// that reports failures.
func (w *world) writeC2(t *testing.T, brokerNS string, c1, c2 submv1.EndpointSpec) {
	ctx := t.Context()
	ep, err := submv1.ToUnstructured(&submv1.Endpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "c2-" + c2.CableName, Labels: map[string]string{api.ClusterIDLabel: "c2"}},
		Spec:       c2,
	}, "Endpoint")
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []struct {
		srv *kubelocal.Server
		ns  string
	}{{w.brk, brokerNS}, {w.c2, api.AgentNamespace}} {
		if _, err := dynClient(t, target.srv).Resource(submv1.EndpointResource).Namespace(target.ns).Create(ctx, ep.DeepCopy(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	passive := c2
	passive.Hostname, passive.PrivateIP, passive.PublicIP, passive.NATEnabled = "gw-c2b", "172.18.0.7", "", false
	for _, g := range []submv1.Gateway{
		{ObjectMeta: metav1.ObjectMeta{Name: "gw-c2"}, Status: submv1.GatewayStatus{
			Version: "v0.8.1", HAStatus: submv1.HAStatusActive, LocalEndpoint: c2,
			Connections: []submv1.Connection{{Status: submv1.Connecting, StatusMessage: "handshake sent", Endpoint: c1, UsingIP: "172.18.0.5"}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "gw-c2b"}, Status: submv1.GatewayStatus{
			Version: "v0.8.1", HAStatus: submv1.HAStatusPassive, LocalEndpoint: passive,
			StatusFailure: "watching the broker's Endpoints: connection refused\nwriting the Gateway status: timeout",
			Connections:   []submv1.Connection{},
		}},
	} {
		writeGateway(t, w.c2, &g)
	}
}

// writeGateway creates g and then writes its status through the status
// subresource, as the agent does.
func writeGateway(t *testing.T, srv *kubelocal.Server, g *submv1.Gateway) {
	t.Helper()
	u, err := submv1.ToUnstructured(g, "Gateway")
	if err != nil {
		t.Fatal(err)
	}
	r := dynClient(t, srv).Resource(submv1.GatewayResource).Namespace(api.AgentNamespace)
	created, err := r.Create(t.Context(), u.DeepCopy(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = u.Object["status"]
	if _, err := r.UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// startC1Agent runs c1's agent, with the rights `snorkel join` gave it,
// until the test ends.
func (w *world) startC1Agent(t *testing.T, member *api.AgentConfig) {
	kc, err := w.c1.Client()
	if err != nil {
		t.Fatal(err)
	}
	secs := int64(3600)
	tr, err := kc.CoreV1().ServiceAccounts(api.AgentNamespace).CreateToken(t.Context(), api.AgentServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(w.c1.Config())
	cfg.BearerToken = tr.Status.Token
	a, err := agent.New(agent.Config{
		Member:         member,
		LocalConfig:    cfg,
		Identity:       "gw-c1",
		PrivateIP:      "172.18.0.5",
		Dataplane:      dataplane{},
		StatusInterval: 200 * time.Millisecond,
		Version:        "v0.9.0",
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctx); err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// writeWorkloads gives c1 what a member deployed from the manifests has:
// the agent's DaemonSet with a pod on the gateway node (an arm64 node),
// and dnsd's Deployment, not scheduled yet.
func (w *world) writeWorkloads(t *testing.T) {
	ctx := t.Context()
	kc, err := w.c1.Client()
	if err != nil {
		t.Fatal(err)
	}
	ns := api.AgentNamespace
	const image = "ghcr.io/snorkel-net/snorkel:v0.9.0"
	if _, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "gw-c1", Labels: map[string]string{corev1.LabelArchStable: "arm64"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app.kubernetes.io/name": "snorkel-agent"}
	podSpec := corev1.PodSpec{ServiceAccountName: api.AgentServiceAccount, Containers: []corev1.Container{{Name: "agent", Image: image}}}
	if _, err := kc.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "snorkel-agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := podSpec
	pod.NodeName = "gw-c1"
	if _, err := kc.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "snorkel-agent-x7k2p", Labels: labels}, Spec: pod,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dnsLabels := map[string]string{"app": "submariner-lighthouse-coredns"}
	if _, err := kc.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "submariner-lighthouse-coredns"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: dnsLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: dnsLabels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "dnsd", Image: image}},
			}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// settle bounds the wait for the agents: they start API clients, elect,
// handshake and probe, which takes seconds when both cores are busy.
const settle = 60 * time.Second

// waitConnected waits until c1's agent reports its connection to c2 as
// connected, with an RTT, and no failure.
func (w *world) waitConnected(t *testing.T) {
	r := dynClient(t, w.c1).Resource(submv1.GatewayResource).Namespace(api.AgentNamespace)
	deadline := time.Now().Add(settle)
	for {
		var why string
		u, err := r.Get(t.Context(), "gw-c1", metav1.GetOptions{})
		if err == nil {
			g, err := submv1.FromUnstructured[submv1.Gateway](u)
			if err != nil {
				t.Fatal(err)
			}
			st := g.Status
			if st.HAStatus == submv1.HAStatusActive && st.StatusFailure == "" && len(st.Connections) == 1 &&
				st.Connections[0].Status == submv1.Connected && st.Connections[0].LatencyRTT != nil {
				return
			}
			why = fmt.Sprintf("status %+v", st)
		} else {
			why = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("c1's agent did not report its connection to c2: %s", why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeKubeconfig writes a kubeconfig with a context "gone" whose server
// nobody listens at, and lists it with the servers' own.
func (w *world) writeKubeconfig(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.goneURL = "https://" + l.Addr().String()
	l.Close()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gone"] = &clientcmdapi.Cluster{Server: w.goneURL, CertificateAuthorityData: w.brk.CA}
	cfg.AuthInfos["gone"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["gone"] = &clientcmdapi.Context{Cluster: "gone", AuthInfo: "gone"}
	gone := filepath.Join(t.TempDir(), "gone.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, gone); err != nil {
		t.Fatal(err)
	}
	w.kubeconfig = strings.Join([]string{w.brk.Kubeconfig, w.c1.Kubeconfig, w.c2.Kubeconfig, gone}, string(os.PathListSeparator))
}

func dynClient(t *testing.T, srv *kubelocal.Server) dynamic.Interface {
	t.Helper()
	dc, err := dynamic.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	return dc
}
