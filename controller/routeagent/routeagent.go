package routeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// DefaultResync is how often the route agent brings the node back to what
// the Gateways say even when they have not changed, which puts back a
// route or rule removed by hand.
const DefaultResync = 3 * time.Minute

// gatewayWait is how long the route agent waits for the first list of the
// Gateways before it says it cannot read them.
const gatewayWait = 30 * time.Second

// Config configures a RouteAgent.
type Config struct {
	// Dynamic is the member cluster's client, to watch the Gateways.
	Dynamic dynamic.Interface
	// Namespace holds the Gateways and the gateways' Lease; default
	// api.AgentNamespace.
	Namespace string
	// LeaseName names the Lease by which the gateways elect the active
	// one; default api.GatewayLeaseName.
	LeaseName string
	// NodeName is this node's name, as the gateway agents name their
	// Gateways (and their status.localEndpoint.hostname).
	NodeName string
	// ClustersetIPRange is the broker's clusterset IP range when this
	// cluster has a clusterset IP block (join's agent Secret key
	// clustersetIPCIDRRange); invalid when it has none, and nothing is
	// routed for it.
	ClustersetIPRange netip.Prefix
	// Resync is how often the node is set again without a change;
	// default DefaultResync.
	Resync time.Duration
	// Logger receives the route agent's logs; default slog.Default().
	Logger *slog.Logger

	// netNS is the network namespace the route agent acts in; nil for the
	// process's own. Tests give the namespace of a node they built.
	netNS *netns.NsHandle
}

func (c *Config) validate() error {
	var errs []error
	if c.Dynamic == nil {
		errs = append(errs, errors.New("routeagent: Config.Dynamic is required (the member cluster's dynamic client)"))
	}
	if c.NodeName == "" {
		errs = append(errs, errors.New("routeagent: Config.NodeName is empty: give this node's name (the DaemonSet sets NODE_NAME from spec.nodeName)"))
	}
	if r := c.ClustersetIPRange; r.IsValid() && (!r.Addr().Is4() || r != r.Masked()) {
		errs = append(errs, fmt.Errorf("routeagent: Config.ClustersetIPRange %s: give an IPv4 network such as 243.0.0.0/8", r))
	}
	if c.Resync < 0 {
		errs = append(errs, fmt.Errorf("routeagent: Config.Resync %v is negative: give a period such as %v", c.Resync, DefaultResync))
	}
	return errors.Join(errs...)
}

// RouteAgent keeps one node's routes to the remote clusters and its
// masquerade bypass in line with the cluster's active gateway (see the
// package documentation).
type RouteAgent struct {
	cfg      Config
	log      *slog.Logger
	gateways cache.SharedIndexInformer
	// lease watches the gateways' Lease; the route agent follows its
	// holder as soon as it holds it.
	lease cache.SharedIndexInformer
	dirty chan struct{}

	// The rest belongs to Run's goroutine.

	// bypass is what the nftables set was last written with; bypassOK
	// says that write succeeded.
	bypass   []netip.Prefix
	bypassOK bool
	// What was logged last, so that each is logged once.
	lastErr, lastState string
	problems           map[string]bool
	forwardingWarned   bool
}

// New makes a RouteAgent; Run starts it.
func New(cfg Config) (*RouteAgent, error) {
	if cfg.Namespace == "" {
		cfg.Namespace = api.AgentNamespace
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = api.GatewayLeaseName
	}
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ra := &RouteAgent{
		cfg:   cfg,
		log:   cfg.Logger.With("component", "routeagent", "node", cfg.NodeName),
		dirty: make(chan struct{}, 1),
	}
	// No informer resync: Run's own resync also covers a cluster with no
	// Gateway, where an informer's would call nothing.
	ra.gateways = dynamicinformer.NewFilteredDynamicInformer(cfg.Dynamic, submv1.GatewayResource, cfg.Namespace, 0, cache.Indexers{}, nil).Informer()
	ra.lease = dynamicinformer.NewFilteredDynamicInformer(cfg.Dynamic, leaseResource, cfg.Namespace, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.LeaseName).String()
	}).Informer()
	mark := func(any) {
		select {
		case ra.dirty <- struct{}{}:
		default:
		}
	}
	for _, inf := range []cache.SharedIndexInformer{ra.gateways, ra.lease} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    mark,
			UpdateFunc: func(_, obj any) { mark(obj) },
			DeleteFunc: mark,
		}); err != nil {
			return nil, fmt.Errorf("routeagent: %w", err)
		}
	}
	return ra, nil
}

// Run keeps the node in line until ctx ends, then returns nil, leaving the
// routes and the nftables table in place: during a rolling update the
// pods keep reaching the remote clusters, and the next route agent takes
// them over. Uninstall removes them.
//
// Nothing changes on the node until the Gateways have been listed: a
// route agent that starts while the API server is unreachable keeps the
// routes its predecessor left.
func (ra *RouteAgent) Run(ctx context.Context) error {
	ns := netns.None()
	if ra.cfg.netNS != nil {
		ns = *ra.cfg.netNS
	}
	n, err := openNode(ns)
	if err != nil {
		return err
	}
	defer n.close()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { ra.gateways.RunWithContext(ctx) })
	wg.Go(func() { ra.lease.RunWithContext(ctx) })
	ra.log.Info("starting", "gateway_namespace", ra.cfg.Namespace, "route_protocol", RouteProtocol, "nftables_table", "ip "+TableName)
	if !ra.waitForGateways(ctx) {
		return nil
	}
	tick := time.NewTicker(ra.cfg.Resync)
	defer tick.Stop()
	force := true
	for {
		ra.sync(n, force)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			force = true
		case <-ra.dirty:
			force = false
		}
	}
}

// waitForGateways waits for the first list of the Gateways, saying so
// if it takes long; false if ctx ended first.
func (ra *RouteAgent) waitForGateways(ctx context.Context) bool {
	for {
		wait, stop := context.WithTimeout(ctx, gatewayWait)
		synced := cache.WaitForCacheSync(wait.Done(), ra.gateways.HasSynced)
		stop()
		switch {
		case synced:
			return true
		case ctx.Err() != nil:
			return false
		}
		ra.log.Warn("cannot list the Gateways yet; the node keeps the routes it has until they can be read "+
			"(is the submariner.io Gateway CRD installed, and may this ServiceAccount list gateways in the namespace?)",
			"namespace", ra.cfg.Namespace, "after", gatewayWait)
	}
}

// sync brings the node in line with the Gateways. The routes are compared
// with the kernel's every time; the nftables table is written when its
// CIDRs change, after a failure, and when forced.
func (ra *RouteAgent) sync(n *node, force bool) {
	have, err := n.routes()
	if err != nil {
		ra.report(err)
		return
	}
	// The active gateway's node has no routes of the agent's: what it
	// bypassed keeps the remotes known there, should no gateway be active
	// next.
	known := slices.Clone(ra.bypass)
	for _, r := range have {
		known = append(known, routeDst(r))
	}
	gws, unread := ra.listGateways()
	p := decide(gws, ra.holder(), ra.cfg.NodeName, known, ra.cfg.ClustersetIPRange)
	p.problems = append(unread, p.problems...)
	ra.logPlan(p)
	var errs []error
	if err := n.syncRoutes(p.routes); err != nil {
		errs = append(errs, err)
	}
	if force || !ra.bypassOK || !slices.Equal(p.bypass, ra.bypass) {
		err := n.syncBypass(p.bypass)
		ra.bypass, ra.bypassOK = p.bypass, err == nil
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := ra.checkForwarding(n, p); err != nil {
		errs = append(errs, err)
	}
	ra.report(errors.Join(errs...))
}

// leaseResource is the coordination.k8s.io Lease.
var leaseResource = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// holder is the holder of the gateways' Lease in the informer's cache; ""
// when it is released, missing or unreadable (a route agent whose role
// may not watch Leases follows the Gateways' status alone).
func (ra *RouteAgent) holder() string {
	for _, o := range ra.lease.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || u.GetName() != ra.cfg.LeaseName {
			continue
		}
		h, _, _ := unstructured.NestedString(u.Object, "spec", "holderIdentity")
		return h
	}
	return ""
}

// listGateways reads the Gateways of the informer's cache, and says which
// it cannot read.
func (ra *RouteAgent) listGateways() (gws []*submv1.Gateway, unread []string) {
	for _, o := range ra.gateways.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		gw, err := submv1.FromUnstructured[submv1.Gateway](u)
		if err != nil {
			unread = append(unread, fmt.Sprintf("cannot read a Gateway, left out: %v", err))
			continue
		}
		gws = append(gws, gw)
	}
	return gws, unread
}

// checkForwarding warns, once until it changes, when the active gateway
// is this node and it does not forward: the other nodes' traffic then
// stops here. The route agent leaves the sysctl to the node's owner.
func (ra *RouteAgent) checkForwarding(n *node, p plan) error {
	if !p.gatewayNode {
		ra.forwardingWarned = false
		return nil
	}
	on, err := n.forwarding()
	if err != nil {
		return err
	}
	if !on && !ra.forwardingWarned {
		ra.log.Warn("net.ipv4.ip_forward is 0 on this node, the active gateway's: the pods of the other nodes reach the remote clusters only once it forwards; "+
			"set it with `sysctl -w net.ipv4.ip_forward=1`, and in /etc/sysctl.d to keep it", "gateway", p.active)
	}
	ra.forwardingWarned = !on
	return nil
}

// logPlan logs what the node follows when that changes, and each problem
// of the Gateways once while it lasts.
func (ra *RouteAgent) logPlan(p plan) {
	seen := map[string]bool{}
	for _, pr := range p.problems {
		ra.logProblem(pr)
		seen[pr] = true
	}
	for pr := range ra.problems {
		if !seen[pr] {
			delete(ra.problems, pr)
		}
	}
	var state string
	var args []any
	switch {
	case p.active == "":
		state = "no gateway is active: the remote CIDRs are unreachable from this node until one is"
		args = []any{"cidrs", p.bypass}
	case p.gatewayNode:
		state = "this node is the active gateway's: its TUN device's routes serve the remote CIDRs"
		args = []any{"gateway", p.active, "cidrs", p.bypass}
	default:
		state = "routing the remote CIDRs via the active gateway's node"
		args = []any{"gateway", p.active, "routes", p.routes}
	}
	if key := fmt.Sprint(state, args); key != ra.lastState {
		ra.lastState = key
		ra.log.Info(state, args...)
	}
}

func (ra *RouteAgent) logProblem(pr string) {
	if ra.problems == nil {
		ra.problems = map[string]bool{}
	}
	if !ra.problems[pr] {
		ra.problems[pr] = true
		ra.log.Warn(pr)
	}
}

// report logs err once until it changes; the next change or resync tries
// again.
func (ra *RouteAgent) report(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch {
	case msg == ra.lastErr:
	case msg != "":
		ra.log.Error("cannot set the node's routes to the remote clusters; trying again on the next change of the Gateways and every resync", "error", err, "resync", ra.cfg.Resync)
	default:
		ra.log.Info("the node's routes to the remote clusters are set")
	}
	ra.lastErr = msg
}
