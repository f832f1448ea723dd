package agent

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
)

// recorder is a Dataplane that keeps every configuration it is given and
// reports the connection states the test sets.
type recorder struct {
	mu      sync.Mutex
	configs []gateway.Config
	spec    *gateway.Spec // the latest
	status  []RemoteStatus
}

func (r *recorder) Apply(_ context.Context, s *gateway.Spec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.configs = append(r.configs, s.Config())
	r.spec = s
	return nil
}

// lastSpec is the latest spec applied; nil before the first.
func (r *recorder) lastSpec() *gateway.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spec
}

func (r *recorder) Status() []RemoteStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.status)
}

func (r *recorder) setStatus(s ...RemoteStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = s
}

// last is the latest configuration and how many were applied.
func (r *recorder) last() (gateway.Config, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.configs) == 0 {
		return gateway.Config{}, 0
	}
	return r.configs[len(r.configs)-1], len(r.configs)
}

// env is a broker and two member clusters, shared by the steps of
// TestAgents, which run in order.
type env struct {
	broker, c1, c2 *kubelocal.Server
	info           *broker.Info
	members        map[string]*api.AgentConfig
	brokerDyn      dynamic.Interface
	// active are the agents the later steps use, by cluster.
	active map[string]*runningAgent
	// cleanup registers what must outlive a step.
	cleanup func(func())
}

// runningAgent is an agent started by the test.
type runningAgent struct {
	*Agent
	dp        *recorder
	metrics   *prometheus.Registry
	key       string
	stop      context.CancelFunc
	done      chan struct{}
	hookRuns  atomic.Int32
	localDyn  dynamic.Interface
	namespace string
}

func (r *runningAgent) halt() {
	r.stop()
	<-r.done
}

func TestAgents(t *testing.T) {
	servers := kubetest.Start(t,
		kubelocal.Options{Name: "broker"},
		kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"},
		kubelocal.Options{Name: "c2", ServiceCIDR: "10.99.0.0/16"})
	e := &env{broker: servers[0], c1: servers[1], c2: servers[2], members: map[string]*api.AgentConfig{}, active: map[string]*runningAgent{}, cleanup: t.Cleanup}
	ctx := t.Context()
	d, err := broker.Deploy(ctx, e.broker.Config(), broker.BrokerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.info = d.Info
	for _, m := range []struct {
		srv        *kubelocal.Server
		pods, svcs string
	}{{e.c1, "10.8.0.0/16", "10.88.0.0/16"}, {e.c2, "10.9.0.0/16", "10.99.0.0/16"}} {
		ac, err := broker.Join(ctx, m.srv.Config(), e.info, broker.JoinOptions{
			ClusterID: m.srv.Name, CableDriver: transport.WireGuard, ClusterCIDRs: []string{m.pods}, ServiceCIDRs: []string{m.svcs},
		})
		if err != nil {
			t.Fatalf("joining %s: %v", m.srv.Name, err)
		}
		e.members[m.srv.Name] = ac
	}
	if e.brokerDyn, err = dynamic.NewForConfig(e.broker.Config()); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		run  func(*testing.T, *env)
	}{
		{"one active gateway per cluster, and a takeover when it stops", testTakeover},
		{"each cluster's data plane gets the other as a remote", testRemotes},
		{"clusterset IPs reach the data plane with their backends", testClustersetIP},
		{"join's gateway flags reach the Endpoint and both data planes", testJoinSettings},
		{"an agent whose cluster ID another cluster holds publishes nothing", testTakenClusterID},
		{"the Gateway status mirrors the data plane", testGatewayStatus},
		{"a remote with another cable driver is an error connection", testBackendMismatch},
		{"a cluster leaving drops its remote", testLeave},
		{"Globalnet publishes and routes global CIDRs", testGlobalnet},
		{"Globalnet's IPAM feeds the data plane and exports carry global IPs", testGlobalnetServices},
		{"a failover keeps every global IP", testFailoverKeepsGlobalIPs},
		{"a failover to a standby keeps every export on the broker", testFailoverKeepsTheExports},
		{"under Globalnet a passive gateway follows the active one's connection tracking", testPassiveFollowsTheActive},
		{"a gateway that died holding the lease is replaced when it expires", testDeadLeader},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, e) }) {
			t.Fatalf("%q failed; the later steps depend on it", s.name)
		}
	}
}

// agentConfig is a rest.Config of srv for the agent's ServiceAccount that
// `snorkel join` installed, so that the agent runs with the rights it
// gets in a real cluster.
func agentConfig(t *testing.T, srv *kubelocal.Server) *rest.Config {
	t.Helper()
	kc, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	secs := int64(3600)
	tr, err := kc.CoreV1().ServiceAccounts(api.AgentNamespace).CreateToken(t.Context(), api.AgentServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(srv.Config())
	cfg.BearerToken = tr.Status.Token
	return cfg
}

func newKey(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// start runs an agent for member in srv until it is halted or the whole
// test ends.
func start(t *testing.T, e *env, srv *kubelocal.Server, member *api.AgentConfig, identity, privateIP, publicIP string, mods ...func(*Config)) *runningAgent {
	t.Helper()
	r := &runningAgent{dp: &recorder{}, metrics: prometheus.NewRegistry(), key: newKey(t), done: make(chan struct{}), namespace: api.AgentNamespace}
	cfg := agentConfig(t, srv)
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.localDyn, err = dynamic.NewForConfig(srv.Config()); err != nil {
		t.Fatal(err)
	}
	c := Config{
		Member:        member,
		Local:         kc,
		LocalConfig:   cfg,
		Identity:      identity,
		PrivateIP:     privateIP,
		PublicIP:      publicIP,
		HealthCheckIP: "10.250.0.1",
		BackendConfig: map[string]string{BackendConfigPublicKey: r.key},
		Gateway:       gateway.Spec{TUN: gateway.TUNSpec{Name: "snk-" + srv.Name}},
		Dataplane:     r.dp,
		Registerer:    r.metrics,
		OnActive: []func(context.Context) error{func(ctx context.Context) error {
			r.hookRuns.Add(1)
			defer r.hookRuns.Add(-1)
			<-ctx.Done()
			return nil
		}},
		ResyncPeriod: time.Second, // the shortest an informer takes
		Version:      "v0.0.0-test",
	}
	for _, m := range mods {
		m(&c)
	}
	if r.Agent, err = New(c); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() {
		defer close(r.done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("%s: Run: %v", identity, err)
		}
	}()
	e.cleanup(r.halt)
	return r
}

// settle bounds every wait for a condition: what takes milliseconds on an
// idle machine can take seconds while both cores run other packages' API
// servers. The product's own timings are measured by benchmarks, not here.
const settle = 60 * time.Second

// eventually polls cond every 50ms until it holds or within passes; it
// fails t with what the last poll said.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, within, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gatewayObject reads the Gateway of agent r; nil if there is none.
func gatewayObject(t *testing.T, r *runningAgent) *submv1.Gateway {
	t.Helper()
	u, err := r.localDyn.Resource(submv1.GatewayResource).Namespace(r.namespace).Get(t.Context(), r.cfg.Identity, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	g, err := submv1.FromUnstructured[submv1.Gateway](u)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// endpointsOf lists the Endpoints of cluster id in namespace ns of dc.
func endpointsOf(t *testing.T, dc dynamic.Interface, ns, id string) []*submv1.Endpoint {
	t.Helper()
	list, err := dc.Resource(submv1.EndpointResource).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []*submv1.Endpoint
	for i := range list.Items {
		ep, err := submv1.FromUnstructured[submv1.Endpoint](&list.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		if ep.Spec.ClusterID == id {
			out = append(out, ep)
		}
	}
	return out
}

// oneEndpoint waits until ns of dc holds exactly one Endpoint of cluster
// id, the one of gateway r, and returns it.
func oneEndpoint(t *testing.T, dc dynamic.Interface, ns, id string, r *runningAgent) *submv1.Endpoint {
	t.Helper()
	var ep *submv1.Endpoint
	eventually(t, settle, fmt.Sprintf("the Endpoint of %s in %s", r.cfg.Identity, ns), func() (bool, string) {
		eps := endpointsOf(t, dc, ns, id)
		if len(eps) != 1 || eps[0].Name != endpointName(&r.spec) {
			return false, fmt.Sprintf("%d Endpoints of %s: %v", len(eps), id, eps)
		}
		ep = eps[0]
		return true, ""
	})
	return ep
}

// endpointWatch counts, from a watch, the most Endpoints cluster id had on
// the broker at any moment.
type endpointWatch struct {
	mu   sync.Mutex
	max  int
	err  error // an error event the watch ended with
	stop func()
}

func watchEndpoints(t *testing.T, dc dynamic.Interface, ns, id string) *endpointWatch {
	// Watch from a list's resource version, as informers do: a watch from
	// none asks the API server's cache for a fresh read, which Debian's
	// etcd 3.4 cannot confirm, so it ends after 3 s with an error event.
	r := dc.Resource(submv1.EndpointResource).Namespace(ns)
	l, err := r.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.Watch(t.Context(), metav1.ListOptions{ResourceVersion: l.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	ew := &endpointWatch{stop: w.Stop}
	names := map[string]bool{}
	for i := range l.Items {
		if endpointCluster(&l.Items[i]) == id {
			names[l.Items[i].GetName()] = true
		}
	}
	ew.max = len(names)
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				ew.mu.Lock()
				ew.err = fmt.Errorf("%v", ev.Object)
				ew.mu.Unlock()
				continue
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || endpointCluster(u) != id {
				continue
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				names[u.GetName()] = true
			case watch.Deleted:
				delete(names, u.GetName())
			}
			ew.mu.Lock()
			ew.max = max(ew.max, len(names))
			ew.mu.Unlock()
		}
	}()
	return ew
}

// most is the most Endpoints of the cluster the broker held at once; an
// error if the watch failed, since it then saw only part of the story.
func (w *endpointWatch) most() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max, w.err
}

func testTakeover(t *testing.T, e *env) {
	ns := e.info.Namespace()
	ew := watchEndpoints(t, e.brokerDyn, ns, "c1")
	defer ew.stop()
	a := start(t, e, e.c1, e.members["c1"], "gw-a", "127.0.0.11", "")
	b := start(t, e, e.c1, e.members["c1"], "gw-b", "127.0.0.12", "")

	// Sample the two agents' roles and hooks throughout.
	var both, hooks atomic.Int32
	sampling, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampling.Err() == nil {
			if a.Active() && b.Active() {
				both.Add(1)
			}
			if a.hookRuns.Load()+b.hookRuns.Load() > 1 {
				hooks.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer func() { stopSampling(); <-sampled }()

	var active, passive *runningAgent
	eventually(t, settle, "one gateway of c1 active", func() (bool, string) {
		switch {
		case a.Active() && !b.Active():
			active, passive = a, b
		case b.Active() && !a.Active():
			active, passive = b, a
		default:
			return false, fmt.Sprintf("gw-a active %v, gw-b active %v", a.Active(), b.Active())
		}
		return true, ""
	})
	for _, w := range []struct {
		r  *runningAgent
		ha submv1.HAStatus
	}{{active, submv1.HAStatusActive}, {passive, submv1.HAStatusPassive}} {
		eventually(t, settle, fmt.Sprintf("Gateway %s %s", w.r.cfg.Identity, w.ha), func() (bool, string) {
			g := gatewayObject(t, w.r)
			if g == nil || g.Status.HAStatus != w.ha || g.Status.LocalEndpoint.PrivateIP != w.r.cfg.PrivateIP || g.Status.Version != "v0.0.0-test" {
				return false, fmt.Sprintf("%+v", g)
			}
			return true, ""
		})
	}
	ep := oneEndpoint(t, e.brokerDyn, ns, "c1", active)
	if ep.Spec.Backend != "wireguard" || ep.Spec.BackendConfig[BackendConfigPublicKey] != active.key || ep.Spec.HealthCheckIP != "10.250.0.1" ||
		strings.Join(ep.Spec.Subnets, ",") != "10.8.0.0/16,10.88.0.0/16" || ep.Labels[api.ClusterIDLabel] != "c1" {
		t.Errorf("the broker's Endpoint of c1: %+v", ep)
	}
	oneEndpoint(t, active.localDyn, api.AgentNamespace, "c1", active)
	if active.hookRuns.Load() != 1 || passive.hookRuns.Load() != 0 {
		t.Errorf("hooks running: active %d, passive %d; want the active gateway's only", active.hookRuns.Load(), passive.hookRuns.Load())
	}

	stopped := time.Now()
	active.halt()
	eventually(t, settle, "the passive gateway takes over", func() (bool, string) {
		return passive.Active(), "still passive"
	})
	t.Logf("takeover %v after the active gateway was stopped", time.Since(stopped).Round(time.Millisecond))
	oneEndpoint(t, e.brokerDyn, ns, "c1", passive)
	oneEndpoint(t, passive.localDyn, api.AgentNamespace, "c1", passive)
	if g := gatewayObject(t, active); g == nil || g.Status.HAStatus != submv1.HAStatusPassive {
		t.Errorf("the stopped gateway's Gateway: %+v, want passive", g)
	}
	eventually(t, settle, "the new active gateway's hook", func() (bool, string) {
		return passive.hookRuns.Load() == 1 && active.hookRuns.Load() == 0, "not running"
	})
	if n := both.Load(); n > 0 {
		t.Errorf("both gateways were active in %d samples", n)
	}
	if n := hooks.Load(); n > 0 {
		t.Errorf("the active-only hooks of both gateways ran at once in %d samples", n)
	}
	if n, err := ew.most(); err != nil {
		t.Errorf("the watch of c1's Endpoints on the broker failed: %v", err)
	} else if n != 1 {
		t.Errorf("the broker held up to %d Endpoints of c1 at once, want 1", n)
	}
	e.active["c1"] = passive
}

func testRemotes(t *testing.T, e *env) {
	// Either gw-a or gw-b, whichever won the takeover.
	c1 := e.active["c1"]
	c2 := start(t, e, e.c2, e.members["c2"], "gw-c2", "127.0.0.21", "198.51.100.21")
	e.active["c2"] = c2
	check := func(r *runningAgent, id string, want gateway.Remote) {
		t.Helper()
		eventually(t, settle, id+"'s data plane has "+want.ID, func() (bool, string) {
			cfg, _ := r.dp.last()
			if len(cfg.Remotes) != 1 || !reflect.DeepEqual(cfg.Remotes[0], want) {
				return false, fmt.Sprintf("remotes %+v, want %+v", cfg.Remotes, want)
			}
			return true, ""
		})
		cfg, _ := r.dp.last()
		if cfg.Cluster.ID != id || cfg.Transport.Type != "wireguard" || cfg.Transport.Port != gateway.DefaultPort ||
			cfg.TUN.Name != "snk-"+id || cfg.TUN.Address != "10.250.0.1" || cfg.Globalnet != nil {
			t.Errorf("%s's configuration: %+v", id, cfg)
		}
	}
	// c2's public IP (a documentation address) never answers NAT
	// discovery and its private IP does: c1 takes the private one.
	// Each agent publishes its gateway as checking its segments.
	check(c1, "c1", gateway.Remote{ID: "c2", PodCIDRs: []string{"10.9.0.0/16"}, ServiceCIDRs: []string{"10.99.0.0/16"},
		Endpoint: "127.0.0.21:4500", Gateway: c2.cfg.Identity, CheckedSegments: true, WireGuard: &gateway.WireGuardRemoteConfig{PublicKey: c2.key}})
	check(c2, "c2", gateway.Remote{ID: "c1", PodCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"},
		Endpoint: c1.cfg.PrivateIP + ":4500", Gateway: c1.cfg.Identity, CheckedSegments: true, WireGuard: &gateway.WireGuardRemoteConfig{PublicKey: c1.key}})

	// The Cluster join created is updated in place: it keeps its owner.
	u, err := e.brokerDyn.Resource(submv1.ClusterResource).Namespace(e.info.Namespace()).Get(t.Context(), "c2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAnnotations()[api.ClusterUIDAnnotation] == "" {
		t.Errorf("Cluster c2 lost the annotation join gave it: %v", u.GetAnnotations())
	}

	// Resyncs (every second here) with nothing changed apply nothing.
	_, before := c1.dp.last()
	time.Sleep(2500 * time.Millisecond)
	if _, after := c1.dp.last(); after != before {
		t.Errorf("%d configurations applied while nothing changed, want none", after-before)
	}
}

func testJoinSettings(t *testing.T, e *env) {
	e.active["c2"].halt()
	m := *e.members["c2"]
	m.GatewaySettings = api.GatewaySettings{NATTraversalOff: true, NATTPort: 4600, PreferredServer: true, HealthCheckOff: true}
	c2 := start(t, e, e.c2, &m, "gw-c2-flags", "127.0.0.22", "198.51.100.22")
	eventually(t, settle, "c2's Endpoint carries the join flags", func() (bool, string) {
		eps := endpointsOf(t, e.brokerDyn, e.info.Namespace(), "c2")
		if len(eps) != 1 {
			return false, fmt.Sprintf("%d Endpoints", len(eps))
		}
		s := eps[0].Spec
		if s.PrivateIP != "127.0.0.22" || s.BackendConfig[BackendConfigUDPPort] != "4600" || s.BackendConfig[BackendConfigPreferredServer] != "true" || s.NATEnabled {
			return false, fmt.Sprintf("private IP %s, backend_config %v, nat_enabled %v", s.PrivateIP, s.BackendConfig, s.NATEnabled)
		}
		return true, ""
	})
	eventually(t, settle, "c2's gateway listens on --nattport without health checks", func() (bool, string) {
		cfg, _ := c2.dp.last()
		hc := cfg.HealthCheck
		if cfg.Transport.Port != 4600 || hc == nil || hc.Enabled == nil || *hc.Enabled || len(cfg.Remotes) != 1 {
			return false, fmt.Sprintf("transport %+v, health check %+v, remotes %+v", cfg.Transport, hc, cfg.Remotes)
		}
		return true, ""
	})
	eventually(t, settle, "c1 reaches c2 at the published port", func() (bool, string) {
		cfg, _ := e.active["c1"].dp.last()
		if len(cfg.Remotes) != 1 || !strings.HasSuffix(cfg.Remotes[0].Endpoint, ":4600") {
			return false, fmt.Sprintf("remotes %+v", cfg.Remotes)
		}
		return true, ""
	})

	c2.halt()
	e.active["c2"] = start(t, e, e.c2, e.members["c2"], "gw-c2", "127.0.0.21", "198.51.100.21")
	eventually(t, settle, "c1 reaches c2 at the default port again, at the private IP discovery found", func() (bool, string) {
		cfg, _ := e.active["c1"].dp.last()
		if len(cfg.Remotes) != 1 || cfg.Remotes[0].Endpoint != "127.0.0.21:4500" {
			return false, fmt.Sprintf("remotes %+v", cfg.Remotes)
		}
		return true, ""
	})
}

func testTakenClusterID(t *testing.T, e *env) {
	// An agent in c2 that believes it is c1, with a Lease of its own so
	// that it becomes active beside c2's gateway.
	impostor := start(t, e, e.c2, e.members["c1"], "impostor", "127.0.0.29", "", func(c *Config) { c.Election.LeaseName = "impostor" })
	eventually(t, settle, "the impostor's Gateway reports the taken ID", func() (bool, string) {
		g := gatewayObject(t, impostor)
		if g == nil {
			return false, "no Gateway"
		}
		f := g.Status.StatusFailure
		return strings.Contains(f, "Cluster "+e.info.Namespace()+"/c1 on the broker belongs to another cluster") && strings.Contains(f, "--clusterid"), f
	})
	impostor.halt()
	oneEndpoint(t, e.brokerDyn, e.info.Namespace(), "c1", e.active["c1"])
	if eps := endpointsOf(t, impostor.localDyn, api.AgentNamespace, "c1"); len(eps) != 0 {
		t.Errorf("the impostor published %d Endpoints of c1 in c2", len(eps))
	}
}

func testGatewayStatus(t *testing.T, e *env) {
	c1 := e.active["c1"]
	connection := func(want submv1.ConnectionStatus, message string, rtt *submv1.LatencyRTTSpec) func() (bool, string) {
		return func() (bool, string) {
			g := gatewayObject(t, c1)
			if g == nil || len(g.Status.Connections) != 1 {
				return false, fmt.Sprintf("%+v", g)
			}
			c := g.Status.Connections[0]
			if c.Status != want || c.StatusMessage != message || fmt.Sprint(c.LatencyRTT) != fmt.Sprint(rtt) ||
				c.Endpoint.ClusterID != "c2" || c.UsingIP != "127.0.0.21" || c.UsingNAT {
				return false, fmt.Sprintf("%+v", c)
			}
			return true, ""
		}
	}
	eventually(t, settle, "a connecting connection before the data plane reports", connection(submv1.Connecting, "waiting for the data plane's first report", nil))

	// Nothing but the periodic refresh picks up the data plane's reports.
	c1.dp.setStatus(RemoteStatus{ID: "c2", Status: submv1.Connected, Message: "handshake completed",
		RTT: &RTT{Last: 1200 * time.Microsecond, Min: 850 * time.Microsecond, Average: time.Millisecond, Max: 2 * time.Millisecond, StdDev: 150 * time.Microsecond}})
	eventually(t, settle, "the connected report", connection(submv1.Connected, "handshake completed",
		&submv1.LatencyRTTSpec{Last: "1.2ms", Min: "850µs", Average: "1ms", Max: "2ms", StdDev: "150µs"}))
	c1.dp.setStatus(RemoteStatus{ID: "c2", Status: submv1.ConnectionError, Message: "no handshake for 15s"})
	eventually(t, settle, "the error report", connection(submv1.ConnectionError, "no handshake for 15s", nil))

	if g := gatewayObject(t, c1); g.Status.StatusFailure != "" || g.Status.HAStatus != submv1.HAStatusActive {
		t.Errorf("Gateway status %+v, want active without failure", g.Status)
	}
}

func testBackendMismatch(t *testing.T, e *env) {
	c1 := e.active["c1"]
	ns := e.info.Namespace()
	spec := submv1.EndpointSpec{
		ClusterID: "c3", CableName: cableName("c3", "127.0.0.31"), Hostname: "c3-gw", Subnets: []string{"10.7.0.0/16"},
		PrivateIP: "127.0.0.31", Backend: "vxlan",
	}
	u, err := submv1.ToUnstructured(&submv1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: endpointName(&spec)}, Spec: spec}, "Endpoint")
	if err != nil {
		t.Fatal(err)
	}
	r := e.brokerDyn.Resource(submv1.EndpointResource).Namespace(ns)
	if _, err := r.Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Delete(context.Background(), u.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}()
	eventually(t, settle, "an error connection to c3", func() (bool, string) {
		g := gatewayObject(t, c1)
		if g == nil {
			return false, "no Gateway"
		}
		for _, c := range g.Status.Connections {
			if c.Endpoint.ClusterID == "c3" {
				return c.Status == submv1.ConnectionError && strings.Contains(c.StatusMessage, "cable drivers differ"), fmt.Sprintf("%+v", c)
			}
		}
		return false, fmt.Sprintf("no connection to c3: %+v", g.Status.Connections)
	})
	cfg, _ := c1.dp.last()
	for _, rm := range cfg.Remotes {
		if rm.ID == "c3" {
			t.Errorf("c3, with another cable driver, is a remote of the data plane: %+v", rm)
		}
	}
}

func testLeave(t *testing.T, e *env) {
	c1 := e.active["c1"]
	e.active["c2"].halt()
	if err := broker.Leave(t.Context(), e.members["c2"].BrokerConfig(), e.info.Namespace(), "c2"); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, "c1's configuration without c2", func() (bool, string) {
		cfg, n := c1.dp.last()
		return n > 0 && len(cfg.Remotes) == 0, fmt.Sprintf("remotes %+v", cfg.Remotes)
	})
	eventually(t, settle, "c1's Gateway without connections", func() (bool, string) {
		g := gatewayObject(t, c1)
		return g != nil && len(g.Status.Connections) == 0, fmt.Sprintf("%+v", g)
	})
	c1.halt()
}

func testGlobalnet(t *testing.T, e *env) {
	ctx := t.Context()
	const ns = "globalnet-broker"
	d, err := broker.Deploy(ctx, e.broker.Config(), broker.BrokerOptions{Namespace: ns, Globalnet: true})
	if err != nil {
		t.Fatal(err)
	}
	members := map[string]*api.AgentConfig{}
	for _, m := range []struct {
		srv  *kubelocal.Server
		svcs string
	}{{e.c1, "10.88.0.0/16"}, {e.c2, "10.99.0.0/16"}} {
		srv := m.srv
		// The same Pod CIDR in both clusters: what Globalnet is for. The
		// Service CIDRs are the API servers' own, where the ClusterIPs
		// come from.
		ac, err := broker.Join(ctx, srv.Config(), d.Info, broker.JoinOptions{
			ClusterID: srv.Name, CableDriver: transport.WireGuard, ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{m.svcs},
		})
		if err != nil {
			t.Fatalf("joining %s: %v", srv.Name, err)
		}
		if ac.GlobalCIDR == "" {
			t.Fatalf("%s joined a Globalnet broker without a global CIDR", srv.Name)
		}
		members[srv.Name] = ac
	}
	g1 := start(t, e, e.c1, members["c1"], "gw-g1", "127.0.0.13", "")
	g2 := start(t, e, e.c2, members["c2"], "gw-g2", "127.0.0.23", "")

	for _, r := range []*runningAgent{g1, g2} {
		id := r.cfg.Member.ClusterID
		ep := oneEndpoint(t, e.brokerDyn, ns, id, r)
		if strings.Join(ep.Spec.Subnets, ",") != members[id].GlobalCIDR {
			t.Errorf("%s's Endpoint has subnets %v, want its global CIDR %s", id, ep.Spec.Subnets, members[id].GlobalCIDR)
		}
	}
	for _, w := range []struct {
		r     *runningAgent
		other string
	}{{g1, "c2"}, {g2, "c1"}} {
		id := w.r.cfg.Member.ClusterID
		eventually(t, settle, id+"'s data plane has "+w.other, func() (bool, string) {
			cfg, _ := w.r.dp.last()
			if len(cfg.Remotes) != 1 || cfg.Globalnet == nil {
				return false, fmt.Sprintf("%+v", cfg)
			}
			rm := cfg.Remotes[0]
			if rm.ID != w.other || rm.GlobalCIDR != members[w.other].GlobalCIDR || cfg.Globalnet.GlobalCIDR != members[id].GlobalCIDR {
				return false, fmt.Sprintf("globalnet %+v, remote %+v", cfg.Globalnet, rm)
			}
			return true, ""
		})
	}
	e.active["g1"], e.active["g2"] = g1, g2
}
