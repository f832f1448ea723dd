package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/globalnet"
	"github.com/snorkel-net/snorkel/controller/servicesync"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/natengine"
)

// Agent is one gateway node's agent. Make it with New and start it with Run.
type Agent struct {
	cfg   Config
	log   *slog.Logger
	local local

	kc                  kubernetes.Interface
	localDyn, brokerDyn dynamic.Interface
	factory             dynamicinformer.DynamicSharedInformerFactory
	endpoints, clusters cache.SharedIndexInformer

	// ipam is Globalnet's IPAM; nil without Globalnet. syncer is the
	// service sync of the current term, if one runs.
	ipam   *globalnet.IPAM
	syncer atomic.Pointer[servicesync.Syncer]
	// clusterset fills the gateway's clusterset IP section; nil when this
	// cluster has no clusterset IP block.
	clusterset *clusterset

	// reconcileCh, statusCh and discoverCh wake the leader's loop, the
	// status writer and NAT discovery; a send never blocks.
	reconcileCh, statusCh, discoverCh chan struct{}
	// followCh wakes a passive gateway's followLoop; rulesCh the service
	// sync waiting for the IPAM's first rules of a term.
	followCh, rulesCh chan struct{}

	started atomic.Bool
	// leadMu keeps a new term from starting before the last one has
	// stepped down.
	leadMu  sync.Mutex
	leading sync.WaitGroup
	// passive is the passive spec last applied; under leadMu.
	passive *gateway.Spec

	mu     sync.Mutex
	active bool
	// stopping is set when Run's context ends: no new term starts.
	stopping bool
	// peers are the other clusters as the active gateway last saw them;
	// planned says this term has planned them once. Until it has, the
	// Gateway still says passive: a status that said active with no
	// connections would tell the route agents there are no remotes.
	peers   []peer
	planned bool
	// failures are the current problems by area, for statusFailure.
	failures map[string]string
	// kubeSystemUID identifies this cluster to the broker's Cluster.
	kubeSystemUID string
	// gateway is the Gateway object as last written.
	gateway *unstructured.Unstructured
	// rules are the IPAM's latest rules in this term; nil before its
	// first.
	rules *natengine.Rules
	// spec is this gateway's Endpoint spec; only its public IP changes,
	// when NAT discovery learns it.
	spec submv1.EndpointSpec
	// found is what NAT discovery found in this term, by cluster ID.
	found map[string]discovered
	// seenBy is the source each remote last saw this gateway's discovery
	// requests come from, by cluster ID: what its public IP is learned
	// from.
	seenBy map[string]seenSource
	// seenSeq orders the entries of seenBy.
	seenSeq uint64
}

// New checks cfg and prepares an Agent; nothing talks to an API server
// until Run.
func New(cfg Config) (*Agent, error) {
	cfg.applyDefaults()
	if cfg.Member != nil {
		m := *cfg.Member
		cfg.Member = &m
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:         cfg,
		log:         cfg.Logger.With("cluster", cfg.Member.ClusterID, "gateway", cfg.Identity),
		local:       newLocal(&cfg),
		spec:        localEndpointSpec(&cfg),
		kc:          cfg.Local,
		reconcileCh: make(chan struct{}, 1),
		statusCh:    make(chan struct{}, 1),
		discoverCh:  make(chan struct{}, 1),
		followCh:    make(chan struct{}, 1),
		rulesCh:     make(chan struct{}, 1),
		failures:    map[string]string{},
	}
	var err error
	if a.kc == nil {
		if a.kc, err = kubernetes.NewForConfig(cfg.LocalConfig); err != nil {
			return nil, fmt.Errorf("agent: Config.LocalConfig: %w", err)
		}
	}
	if a.localDyn, err = dynamic.NewForConfig(cfg.LocalConfig); err != nil {
		return nil, fmt.Errorf("agent: Config.LocalConfig: %w", err)
	}
	bcfg := cfg.Member.BrokerConfig()
	if a.brokerDyn, err = dynamic.NewForConfig(bcfg); err != nil {
		return nil, fmt.Errorf("agent: the broker's address %q in Config.Member: %w; run `snorkel join` again", cfg.Member.BrokerURL, err)
	}
	if a.ipam, err = a.newIPAM(); err != nil {
		return nil, err
	}
	a.factory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(a.brokerDyn, cfg.ResyncPeriod, cfg.Member.BrokerNamespace, nil)
	a.endpoints = a.watch("Endpoints", submv1.EndpointResource)
	a.clusters = a.watch("Clusters", submv1.ClusterResource)
	a.clusterset = a.newClusterset()
	return a, nil
}

// watch makes the informer of one broker resource: every change wakes the
// leader's loop, and watch errors show in the Gateway status until the next
// event.
func (a *Agent) watch(kind string, gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	inf := a.factory.ForResource(gvr).Informer()
	area := "watching the broker's " + kind
	changed := func() {
		a.setFailure(area, nil)
		wake(a.reconcileCh)
		wake(a.followCh)
	}
	// The handlers only signal, so neither registration can fail in a
	// way that matters: a failure would mean the informer already ran.
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		a.setFailure(area, explain(err, fmt.Sprintf("watching %s in namespace %s", kind, a.cfg.Member.BrokerNamespace),
			place{broker: true, ns: a.cfg.Member.BrokerNamespace}))
	})
	return inf
}

// wake signals ch without blocking: one pending signal is enough.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run runs the agent until ctx ends: it campaigns to be the cluster's
// active gateway, does the active gateway's work while it is, and keeps
// its Gateway object current throughout. When ctx ends it steps down,
// hands the lease over and marks its Gateway passive before returning.
func (a *Agent) Run(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("agent: Run was called twice; make a new Agent")
	}
	a.log.Info("agent starting", "broker", a.cfg.Member.BrokerURL, "brokerNamespace", a.cfg.Member.BrokerNamespace,
		"cableDriver", a.cfg.Member.CableDriver, "endpoint", endpointName(&a.spec), "natDiscoveryPort", a.cfg.NATDiscoveryPort)
	a.factory.Start(ctx.Done())
	defer a.factory.Shutdown()
	if a.clusterset != nil {
		a.clusterset.start(ctx.Done())
		defer a.clusterset.shutdown()
	}

	statusCtx, stopStatus := context.WithCancel(context.WithoutCancel(ctx))
	statusDone := make(chan struct{})
	go func() {
		defer close(statusDone)
		a.statusLoop(statusCtx)
	}()
	go a.followLoop(ctx)
	a.elect(ctx)
	stopStatus()
	<-statusDone
	a.finalStatus()
	a.log.Info("agent stopped")
	return nil
}

// Active reports whether this gateway is currently the cluster's active
// one.
func (a *Agent) Active() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.active
}

// endpointSpec is this gateway's Endpoint spec now.
func (a *Agent) endpointSpec() submv1.EndpointSpec {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.spec
}

// setFailure records err as the current problem of area, or clears it.
func (a *Agent) setFailure(area string, err error) {
	a.mu.Lock()
	old, had := a.failures[area]
	if err == nil {
		delete(a.failures, area)
	} else {
		a.failures[area] = err.Error()
	}
	a.mu.Unlock()
	switch {
	case err != nil && old != err.Error():
		a.log.Warn(area, "err", err)
		wake(a.statusCh)
	case err == nil && had:
		a.log.Info(area + ": recovered")
		wake(a.statusCh)
	}
}

// failureText is statusFailure: every current problem, one per line.
// Under a.mu.
func (a *Agent) failureText() string {
	var lines []string
	for _, area := range slices.Sorted(maps.Keys(a.failures)) {
		lines = append(lines, a.failures[area])
	}
	return strings.Join(lines, "\n")
}
