package globalnet

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	v1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/packet"
)

// cluster is one test API server with its clients.
type cluster struct {
	cfg  *rest.Config
	kube kubernetes.Interface
	dyn  dynamic.Interface
	mcs  mcsclient.Interface
}

func newCluster(t testing.TB, cfg *rest.Config) *cluster {
	t.Helper()
	c := &cluster{cfg: cfg}
	var err error
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if c.mcs, err = mcsclient.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

// running is an IPAM under test, with what it handed over.
type running struct {
	ipam   *IPAM
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error

	mu       sync.Mutex
	rules    *natengine.Rules
	handed   int
	ruleErrs []error
	notified map[nsName]int
}

// startIPAM runs an IPAM whose every Rules goes through a NAT engine's
// SetRules.
func startIPAM(t testing.TB, c *cluster, global string, remotes ...netip.Prefix) *running {
	t.Helper()
	engine, err := natengine.New(natengine.Config{MaxFlows: 64, MaxFragments: 64})
	if err != nil {
		t.Fatal(err)
	}
	r := &running{done: make(chan error, 1), notified: map[nsName]int{}, reg: prometheus.NewRegistry()}
	r.ipam, err = New(Config{
		Registerer:   r.reg,
		ClusterID:    "c1",
		GlobalCIDR:   netip.MustParsePrefix(global),
		Local:        c.kube,
		LocalConfig:  c.cfg,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.8.0.0/16")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.88.0.0/16")},
		OnRules: func(rules natengine.Rules) {
			err := engine.SetRules(rules)
			r.mu.Lock()
			defer r.mu.Unlock()
			r.rules = &rules
			r.handed++
			if err != nil {
				r.ruleErrs = append(r.ruleErrs, err)
			}
		},
		OnGlobalIP: func(ns, name string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.notified[nsName{ns, name}]++
		},
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.ipam.SetRemotes(remotes)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.ipam.Run(ctx) }()
	t.Cleanup(r.stopQuietly)
	return r
}

// gauges reads the IPAM's gauges of cidr, by name.
func (r *running) gauges(t testing.TB, cidr string) map[string]float64 {
	families, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cidr" && l.GetValue() == cidr {
					out[f.GetName()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// stop ends Run and checks it returned nil and that every Rules handed
// over was valid.
func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run returned %v", err)
		}
		r.done <- nil
	case <-time.After(settle):
		t.Fatal("Run did not return after its context ended")
	}
	r.checkRules(t)
}

func (r *running) stopQuietly() {
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
	case <-time.After(settle):
	}
}

func (r *running) checkRules(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handed == 0 {
		t.Error("OnRules was never called")
	}
	for _, err := range r.ruleErrs {
		t.Errorf("the NAT engine refused the rules: %v", err)
	}
}

func (r *running) last() natengine.Rules {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rules == nil {
		return natengine.Rules{}
	}
	return *r.rules
}

func (r *running) notifications(ns, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.notified[nsName{ns, name}]
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// eventually polls cond until it returns nil, failing t with its last
// error after a generous deadline.
func eventually(t testing.TB, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(settle)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// settle bounds every wait on the IPAM: what takes milliseconds on an idle
// machine can take seconds while both cores run other packages' API servers.
const settle = 60 * time.Second

var ctx = context.Background()

// namespace creates a namespace and its default ServiceAccount, which the
// API server wants before it admits pods.
func (c *cluster) namespace(t testing.TB, ns string) {
	t.Helper()
	_, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(t, err)
	_, err = c.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	must(t, err)
}

// pod creates a pod and writes the status a kubelet would: phase and IP.
func (c *cluster) pod(t testing.TB, ns, name, ip string, phase corev1.PodPhase, lbls map[string]string) {
	t.Helper()
	must(t, c.makePod(ns, name, ip, phase, lbls))
}

func (c *cluster) makePod(ns, name, ip string, phase corev1.PodPhase, lbls map[string]string) error {
	p, err := c.kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	p.Status = corev1.PodStatus{Phase: phase, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	_, err = c.kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

func (c *cluster) deletePod(t testing.TB, ns, name string) {
	t.Helper()
	must(t, c.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}))
}

func (c *cluster) service(t testing.TB, ns, name string, headless bool, selector map[string]string) *corev1.Service {
	t.Helper()
	svc, err := c.makeService(ns, name, headless, selector)
	must(t, err)
	return svc
}

func (c *cluster) makeService(ns, name string, headless bool, selector map[string]string) (*corev1.Service, error) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	return c.kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
}

func (c *cluster) export(t testing.TB, ns, name string) {
	t.Helper()
	must(t, c.makeExport(ns, name))
}

func (c *cluster) makeExport(ns, name string) error {
	_, err := c.mcs.MulticlusterV1alpha1().ServiceExports(ns).Create(ctx, &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

func (c *cluster) unexport(t testing.TB, ns, name string) {
	t.Helper()
	must(t, c.mcs.MulticlusterV1alpha1().ServiceExports(ns).Delete(ctx, name, metav1.DeleteOptions{}))
}

func (c *cluster) get(gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	return c.dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

func (c *cluster) create(t testing.TB, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	t.Helper()
	_, err := c.dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
	must(t, err)
}

func (c *cluster) delete(t testing.TB, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	if err := c.dyn.Resource(gvr).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// patch merge-patches an object, or its status when status is set.
func (c *cluster) patch(t testing.TB, gvr schema.GroupVersionResource, ns, name, body string, status bool) {
	t.Helper()
	var sub []string
	if status {
		sub = []string{"status"}
	}
	_, err := c.dyn.Resource(gvr).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{}, sub...)
	must(t, err)
}

// allocation is an object's status as the tests read it.
type allocation struct {
	ips  []string
	cond *metav1.Condition
}

func (c *cluster) allocation(gvr schema.GroupVersionResource, ns, name string) (allocation, error) {
	u, err := c.get(gvr, ns, name)
	if err != nil {
		return allocation{}, err
	}
	s := statusOf(u)
	a := allocation{ips: s.AllocatedIPs, cond: meta.FindStatusCondition(s.Conditions, v1.GlobalEgressIPAllocated)}
	if s.AllocatedIP != "" {
		a.ips = []string{s.AllocatedIP}
	}
	return a, nil
}

// allocated waits until the object has n IPs and Allocated=True, and
// returns them.
func (c *cluster) allocated(t testing.TB, gvr schema.GroupVersionResource, ns, name string, n int) []string {
	t.Helper()
	var ips []string
	eventually(t, fmt.Sprintf("%s %s/%s gets %d IPs", gvr.Resource, ns, name, n), func() error {
		a, err := c.allocation(gvr, ns, name)
		switch {
		case err != nil:
			return err
		case len(a.ips) != n || a.cond == nil || a.cond.Status != metav1.ConditionTrue:
			return fmt.Errorf("status: IPs %v, condition %+v", a.ips, a.cond)
		}
		ips = a.ips
		return nil
	})
	return ips
}

// refused waits until the object's Allocated condition is False with the
// reason, and returns the condition.
func (c *cluster) refused(t testing.TB, gvr schema.GroupVersionResource, ns, name, reason string) metav1.Condition {
	t.Helper()
	var cond metav1.Condition
	eventually(t, fmt.Sprintf("%s %s/%s is refused with %s", gvr.Resource, ns, name, reason), func() error {
		a, err := c.allocation(gvr, ns, name)
		switch {
		case err != nil:
			return err
		case a.cond == nil || a.cond.Status != metav1.ConditionFalse || a.cond.Reason != reason || len(a.ips) != 0:
			return fmt.Errorf("status: IPs %v, condition %+v", a.ips, a.cond)
		}
		cond = *a.cond
		return nil
	})
	return cond
}

func (c *cluster) gone(t testing.TB, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s %s/%s is deleted", gvr.Resource, ns, name), func() error {
		if _, err := c.get(gvr, ns, name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for k, s := range ss {
		out[k] = netip.MustParseAddr(s)
	}
	return out
}

func hosts(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for k, s := range ss {
		a := netip.MustParseAddr(s)
		out[k] = netip.PrefixFrom(a, 32)
	}
	return out
}

// rangeOf returns n addresses from first on.
func rangeOf(first string, n int) []string {
	a := netip.MustParseAddr(first)
	out := make([]string, n)
	for k := range out {
		out[k] = a.String()
		a = a.Next()
	}
	return out
}

func findPool(r natengine.Rules, name string) (natengine.EgressPool, bool) {
	for _, p := range r.Pools {
		if p.Name == name {
			return p, true
		}
	}
	return natengine.EgressPool{}, false
}

func findIngress(r natengine.Rules, name string) (natengine.Ingress, bool) {
	for _, in := range r.Ingress {
		if in.Name == name {
			return in, true
		}
	}
	return natengine.Ingress{}, false
}

// egressSource runs a UDP packet from src to dst (in remote 0's global
// CIDR) through a NAT engine with rules, and returns the source it left
// with.
func egressSource(t testing.TB, rules natengine.Rules, src, dst string) netip.Addr {
	t.Helper()
	e, err := natengine.New(natengine.Config{MaxFlows: 64, MaxFragments: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetRules(rules); err != nil {
		t.Fatalf("SetRules: %v", err)
	}
	b := make([]byte, 28)
	b[0], b[8], b[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	s4, d4 := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[12:], s4[:])
	copy(b[16:], d4[:])
	binary.BigEndian.PutUint16(b[10:], ^packet.Checksum(b[:20], 0))
	binary.BigEndian.PutUint16(b[20:], 40000)
	binary.BigEndian.PutUint16(b[22:], 53)
	binary.BigEndian.PutUint16(b[24:], 8)
	var p packet.Parsed
	if r := p.Decode(b); r != packet.DropNone {
		t.Fatalf("decode: %v", r)
	}
	if !e.Egress(0, b, &p) {
		t.Fatalf("the NAT engine dropped %s → %s", src, dst)
	}
	return netip.AddrFrom4([4]byte(b[12:16]))
}
