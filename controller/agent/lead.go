package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/natengine"
)

// settleDelay gathers a burst of broker changes (a cluster's gateway
// handing over deletes one Endpoint and creates another) into one pass.
const settleDelay = 100 * time.Millisecond

// Failure areas of the active gateway's work, cleared when it steps down.
const (
	areaPublish   = "publishing this cluster"
	areaDataplane = "configuring the data plane"
)

// elect campaigns for the Lease until ctx ends. Each term runs lead; a
// term lost to a failed renewal is followed by a new campaign. When ctx
// ends, the lease is released only after the term has stepped down, so
// that the next gateway never starts while this one still acts.
func (a *Agent) elect(ctx context.Context) {
	a.yieldAtStart(ctx)
	a.log.Info(campaignNotice, "lease", a.cfg.Election.LeaseName)
	electCtx, release := context.WithCancel(context.WithoutCancel(ctx))
	defer release()
	go func() {
		<-ctx.Done()
		// A term that started before this has joined a.leading; a later
		// one sees stopping and does not start.
		a.mu.Lock()
		a.stopping = true
		a.mu.Unlock()
		a.leading.Wait()
		release()
	}()
	e := a.cfg.Election
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: e.LeaseName, Namespace: a.cfg.Namespace},
		Client:     a.kc.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: a.cfg.Identity},
	}
	for electCtx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			Name:            e.LeaseName,
			LeaseDuration:   e.LeaseDuration,
			RenewDeadline:   e.RenewDeadline,
			RetryPeriod:     e.RetryPeriod,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(term context.Context) { a.lead(ctx, term) },
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			// validate checked the timings the elector checks.
			a.setFailure("leader election", fmt.Errorf("Config.Election: %w", err))
			<-electCtx.Done()
			return
		}
		le.Run(electCtx)
	}
}

// What an agent logs when it leaves the takeover to a standby, and when
// it starts to campaign; a test tells by them what the agent did.
const (
	yieldNotice    = "another gateway stands by and the Lease was held a moment ago: leaving the takeover to it"
	campaignNotice = "campaigning for the Lease"
)

// yieldAtStart waits one lease duration before the first campaign when
// this agent starts while the Lease was held a moment ago and another
// gateway stands by. That is a gateway's pod replaced (deleted, or
// updated) on its node, or its container restarted after a crash: the
// standby, whose watches are warm and which under Globalnet holds the
// replica of the connection tracking, must take over, not the new process
// that would otherwise race it for the Lease its predecessor released, or
// take back the one its predecessor held under the same name. An agent
// that starts alone, or long after the last holder, campaigns at once.
func (a *Agent) yieldAtStart(ctx context.Context) {
	e := a.cfg.Election
	l, err := a.kc.CoordinationV1().Leases(a.cfg.Namespace).Get(ctx, e.LeaseName, metav1.GetOptions{})
	if err != nil || l.Spec.RenewTime == nil || time.Since(l.Spec.RenewTime.Time) > e.LeaseDuration {
		return
	}
	gws, err := a.localDyn.Resource(submv1.GatewayResource).Namespace(a.cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil || !slices.ContainsFunc(gws.Items, func(g unstructured.Unstructured) bool { return g.GetName() != a.cfg.Identity }) {
		return
	}
	a.log.Info(yieldNotice, "campaigning_in", e.LeaseDuration)
	select {
	case <-ctx.Done():
	case <-time.After(e.LeaseDuration):
	}
}

// lead is one term as the active gateway: it runs the OnActive hooks and
// the reconcile loop until the term or ctx ends, then steps down.
func (a *Agent) lead(ctx, term context.Context) {
	a.leadMu.Lock()
	defer a.leadMu.Unlock()
	a.mu.Lock()
	if a.stopping || term.Err() != nil {
		a.mu.Unlock()
		return
	}
	a.leading.Add(1)
	a.active = true
	// This term's IPAM reads its allocations back and hands over fresh
	// rules.
	a.rules = nil
	a.mu.Unlock()
	defer a.leading.Done()

	tctx, cancel := context.WithCancel(term)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	a.log.Info("this gateway is now the cluster's active gateway")
	wake(a.statusCh)

	done := make(chan struct{})
	go func() {
		defer close(done)
		a.runHooks(tctx)
	}()
	a.reconcileLoop(tctx)
	cancel()
	<-done
	a.stepDown()
}

// stepDown ends a term: the data plane drops its remotes, follows the
// next active gateway's connection tracking under Globalnet (followLoop
// keeps it following), and the Gateway turns passive.
//
// The cluster's Endpoint stays where it is, as Submariner's does: the
// remote clusters keep their tunnels to this gateway until the next active
// one replaces the Endpoint (it deletes this one before creating its own),
// instead of tearing them down at every handover. A term that ended because
// the API server could not be reached could not delete it anyway.
func (a *Agent) stepDown() {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.Election.RenewDeadline)
	defer cancel()
	a.passive = nil
	a.applyPassive(ctx)
	a.mu.Lock()
	a.active = false
	a.peers, a.planned = nil, false
	a.mu.Unlock()
	a.setFailure(areaPublish, nil)
	a.setFailure(areaDataplane, nil)
	a.log.Info("this gateway is now passive")
	wake(a.statusCh)
}

// hook is work that runs on the active gateway only.
type hook struct {
	name string
	run  func(context.Context) error
}

// hooks are the agent's own tasks (Globalnet's IPAM, the service sync)
// and then Config.OnActive.
func (a *Agent) hooks() []hook {
	var hs []hook
	if a.ipam != nil {
		hs = append(hs, hook{"Globalnet IPAM", a.ipam.Run})
	}
	if !a.cfg.Member.NATTraversalOff {
		hs = append(hs, hook{"NAT discovery", a.runNATDiscovery})
	}
	if a.cfg.Member.ServiceDiscovery {
		hs = append(hs, hook{"service sync", a.runServiceSync})
	}
	for i, h := range a.cfg.OnActive {
		hs = append(hs, hook{fmt.Sprintf("Config.OnActive[%d]", i), h})
	}
	return hs
}

// runHooks runs every hook until ctx ends.
func (a *Agent) runHooks(ctx context.Context) {
	hs := a.hooks()
	done := make(chan struct{}, len(hs))
	for _, h := range hs {
		go func() {
			defer func() { done <- struct{}{} }()
			a.runHook(ctx, h)
		}()
	}
	for range hs {
		<-done
	}
}

// runHook runs h until ctx ends, starting it again after a growing pause
// when it fails. A hook that returns nil has finished its work.
func (a *Agent) runHook(ctx context.Context, h hook) {
	defer a.setFailure(h.name, nil)
	pause := time.Second
	for {
		err := h.run(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		a.setFailure(h.name, fmt.Errorf("%s failed (starting it again in %v): %w", h.name, pause, err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
	}
}

// progress is what the reconcile loop of one term has done.
type progress struct {
	// published says the Endpoints and the Cluster were written since
	// the last resync.
	published bool
	// applied is the spec the Dataplane accepted last.
	applied *gateway.Spec
}

// reconcileLoop keeps the published objects and the data plane in step
// with the broker until ctx ends.
func (a *Agent) reconcileLoop(ctx context.Context) {
	synced := []cache.InformerSynced{a.endpoints.HasSynced, a.clusters.HasSynced}
	if a.clusterset != nil {
		synced = append(synced, a.clusterset.synced()...)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	var t progress
	resync := time.NewTicker(a.cfg.ResyncPeriod)
	defer resync.Stop()
	retry := time.NewTimer(0) // the first pass
	defer retry.Stop()
	pause := settleDelay
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.reconcileCh:
			select {
			case <-ctx.Done():
				return
			case <-time.After(settleDelay):
			}
			select {
			case <-a.reconcileCh:
			default:
			}
		case <-resync.C:
			t.published = false
		case <-retry.C:
		}
		if a.reconcile(ctx, &t) {
			pause = settleDelay
			continue
		}
		if ctx.Err() != nil {
			return
		}
		pause = min(2*pause, 10*time.Second)
		retry.Reset(pause)
	}
}

// reconcile publishes what is missing or changed, then builds the gateway
// configuration from the broker's objects and applies it if it changed. It
// reports whether everything succeeded.
func (a *Agent) reconcile(ctx context.Context, t *progress) bool {
	ok := true
	if !t.published || a.drifted() {
		err := a.publish(ctx)
		a.setFailure(areaPublish, err)
		t.published, ok = err == nil, err == nil
	}

	a.mu.Lock()
	found := a.found
	a.mu.Unlock()
	peers := withJoinSettings(a.cfg.Member, withDiscovery(plan(a.local, a.brokerEndpoints(), a.brokerClusters()), found))
	a.mu.Lock()
	changed := !a.planned || !reflect.DeepEqual(a.peers, peers)
	a.peers, a.planned = peers, true
	a.mu.Unlock()
	if changed {
		wake(a.statusCh)
		wake(a.discoverCh)
	}

	rs := remotes(peers)
	a.setIPAMRemotes(rs)
	rules := a.currentRules()
	if a.ipam != nil && rules == nil && len(rs) > 0 {
		// Until the IPAM has read its allocations back, the gateway
		// would translate with addresses it may not own.
		a.setFailure(areaDataplane, errors.New("waiting for Globalnet's IPAM to allocate this cluster's global IPs"))
		return ok
	}
	cfg := a.gatewaySpec(rs, rules)
	if reflect.DeepEqual(cfg, t.applied) {
		return ok
	}
	if err := a.cfg.Dataplane.Apply(ctx, a.gatewaySpec(rs, rules)); err != nil {
		a.setFailure(areaDataplane, fmt.Errorf("the data plane refused the configuration: %w", err))
		return false
	}
	a.setFailure(areaDataplane, nil)
	t.applied = cfg
	ids := make([]string, len(cfg.Remotes))
	for i, r := range cfg.Remotes {
		ids[i] = r.ID
	}
	a.log.Info("gateway configured", "remotes", ids)
	return ok
}

// gatewaySpec is build's spec with the clusterset IP section, when this
// cluster has a block.
func (a *Agent) gatewaySpec(rs []gateway.RemoteSpec, rules *natengine.Rules) *gateway.Spec {
	s := build(&a.cfg, rs, rules)
	a.withSyncListen(s)
	if a.clusterset != nil {
		owners := map[string][]netip.Prefix{s.Cluster.ID: append(slices.Clone(s.Cluster.PodCIDRs), s.Cluster.ServiceCIDRs...)}
		for _, r := range s.Remotes {
			owners[r.ID] = append(slices.Clone(r.PodCIDRs), r.ServiceCIDRs...)
		}
		s.ClustersetIP = a.clusterset.spec(owners)
	}
	return s
}

// publish writes this cluster's Cluster on the broker, then its Endpoint
// on the broker and locally. The Cluster goes first: if the broker's
// belongs to another cluster with the same ID, this one must not replace
// that cluster's Endpoint.
func (a *Agent) publish(ctx context.Context) error {
	m := a.cfg.Member
	onBroker := place{broker: true, ns: m.BrokerNamespace}
	here := place{ns: a.cfg.Namespace}
	uid, err := a.clusterUID(ctx)
	if err != nil {
		return err
	}
	if err := publishCluster(ctx, a.brokerDyn.Resource(submv1.ClusterResource).Namespace(m.BrokerNamespace), clusterSpec(m), uid, onBroker); err != nil {
		return err
	}
	spec := a.endpointSpec()
	return errors.Join(
		publishEndpoint(ctx, a.brokerDyn.Resource(submv1.EndpointResource).Namespace(m.BrokerNamespace), &spec, onBroker),
		publishEndpoint(ctx, a.localDyn.Resource(submv1.EndpointResource).Namespace(a.cfg.Namespace), &spec, here),
	)
}

// clusterUID is the UID of this cluster's kube-system namespace, which
// `snorkel join` records on the cluster's Cluster object.
func (a *Agent) clusterUID(ctx context.Context) (string, error) {
	a.mu.Lock()
	uid := a.kubeSystemUID
	a.mu.Unlock()
	if uid != "" {
		return uid, nil
	}
	ns, err := a.kc.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return "", explain(err, "reading namespace kube-system (this cluster's identity)", place{ns: metav1.NamespaceSystem})
	}
	a.mu.Lock()
	a.kubeSystemUID = string(ns.UID)
	a.mu.Unlock()
	return string(ns.UID), nil
}

// drifted reports whether the broker's cache shows this cluster's Endpoint
// or Cluster missing or changed, or another Endpoint of this cluster.
func (a *Agent) drifted() bool {
	spec := a.endpointSpec()
	name := endpointName(&spec)
	found := false
	for _, e := range a.brokerEndpoints() {
		if e.Spec.ClusterID != spec.ClusterID {
			continue
		}
		if e.Name != name || !sameEndpointSpec(e.Spec, spec) {
			return true
		}
		found = true
	}
	c := a.brokerClusters()[spec.ClusterID]
	return !found || c == nil || !sameClusterSpec(c.Spec, clusterSpec(a.cfg.Member))
}

// brokerEndpoints are the Endpoints in the broker's cache; objects that do
// not convert are skipped.
func (a *Agent) brokerEndpoints() []*submv1.Endpoint {
	var out []*submv1.Endpoint
	for _, obj := range a.endpoints.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if e, err := submv1.FromUnstructured[submv1.Endpoint](u); err == nil {
				out = append(out, e)
			}
		}
	}
	return out
}

// brokerClusters are the Clusters in the broker's cache by cluster ID.
func (a *Agent) brokerClusters() map[string]*submv1.Cluster {
	out := map[string]*submv1.Cluster{}
	for _, obj := range a.clusters.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if c, err := submv1.FromUnstructured[submv1.Cluster](u); err == nil && c.Spec.ClusterID != "" {
				out[c.Spec.ClusterID] = c
			}
		}
	}
	return out
}
