package globalnet

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	v1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/natengine"
)

// fieldManager names the IPAM in the objects' managedFields.
const fieldManager = "snorkel-globalnet"

// rulesDelay gathers a burst of changes (pods starting, a sync) into one
// rules rebuild.
const rulesDelay = 20 * time.Millisecond

var serviceExportResource = mcsv1a1.SchemeGroupVersion.WithResource("serviceexports")

// kind is what a queue item stands for.
type kind uint8

const (
	kindClusterEgress kind = iota + 1 // a ClusterGlobalEgressIP
	kindEgress                        // a GlobalEgressIP
	kindIngress                       // a GlobalIngressIP
	kindExport                        // a service that may be exported
	kindRules                         // the rules: rebuild and hand over
)

// item is one unit of the worker's work.
type item struct {
	kind     kind
	ns, name string
}

var rulesItem = item{kind: kindRules}

func (it item) String() string {
	switch it.kind {
	case kindClusterEgress:
		return "ClusterGlobalEgressIP " + it.name
	case kindEgress:
		return "GlobalEgressIP " + it.ns + "/" + it.name
	case kindIngress:
		return "GlobalIngressIP " + it.ns + "/" + it.name
	case kindExport:
		return "service " + it.ns + "/" + it.name
	}
	return "rules"
}

// runner is one Run: its informers, its queue and the allocation state,
// which only the worker touches.
type runner struct {
	ipam  *IPAM
	cfg   *Config
	log   *slog.Logger
	dyn   dynamic.Interface
	queue workqueue.TypedRateLimitingInterface[item]

	pods, services, exports cache.SharedIndexInformer
	cgeips, geips, giips    cache.SharedIndexInformer

	pool    *natengine.AddrPool
	egress  map[item]*egressState
	ingress map[item]*ingressState
	// starved are the items that found the pool exhausted: they are
	// queued again when addresses are freed.
	starved map[item]bool
	freed   bool

	rulesPending atomic.Bool
	validator    *natengine.Engine
	last         *natengine.Rules
	// outside are the services whose ClusterIP lies outside
	// Config.ServiceCIDRs, each reported once.
	outside map[nsName]bool
}

func (i *IPAM) newRunner() (*runner, error) {
	dyn, err := dynamic.NewForConfig(i.cfg.LocalConfig)
	if err != nil {
		return nil, fmt.Errorf("globalnet: Config.LocalConfig: %w", err)
	}
	md, err := metadata.NewForConfig(i.cfg.LocalConfig)
	if err != nil {
		return nil, fmt.Errorf("globalnet: Config.LocalConfig: %w", err)
	}
	validator, err := natengine.New(natengine.Config{MaxFlows: 1, MaxFragments: 1, Now: time.Now})
	if err != nil {
		return nil, err
	}
	r := &runner{
		outside: map[nsName]bool{},
		ipam:    i,
		cfg:     &i.cfg,
		log:     i.log,
		dyn:     dyn,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[item](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[item]{Name: "globalnet"}),
		pool:      natengine.NewAddrPool(i.cfg.GlobalCIDR),
		egress:    map[item]*egressState{},
		ingress:   map[item]*ingressState{},
		starved:   map[item]bool{},
		validator: validator,
	}
	r.newInformers(md)
	return r, nil
}

// requiredResources are the APIs the IPAM cannot work without.
var requiredResources = []schema.GroupVersionResource{
	v1.ClusterGlobalEgressIPResource, v1.GlobalEgressIPResource, v1.GlobalIngressIPResource, serviceExportResource,
}

// runUntil checks the APIs, makes sure the cluster egress object exists,
// syncs the informers, reads the recorded allocations back, and then works
// the queue until ctx ends.
func (r *runner) runUntil(ctx context.Context) error {
	for _, gvr := range requiredResources {
		if _, err := r.dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("globalnet: the API %s is not served; apply Snorkel's CRDs (deploy.ApplyCRDs) first", gvr)
			}
			return fmt.Errorf("globalnet: listing %s: %w", gvr.Resource, err)
		}
	}
	if err := r.ensureClusterEgress(ctx); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	defer r.queue.ShutDown()
	informers := []cache.SharedIndexInformer{r.pods, r.services, r.exports, r.cgeips, r.geips, r.giips}
	for _, inf := range informers {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	synced := make([]cache.InformerSynced, len(informers))
	for k, inf := range informers {
		synced[k] = inf.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil
	}
	r.restore()
	r.queue.Add(rulesItem)
	r.queueAll()
	r.log.Info("globalnet IPAM running", "globalCIDR", r.cfg.GlobalCIDR, "free", r.pool.Free())

	wg.Go(func() { r.work(ctx) })
	<-ctx.Done()
	return nil
}

// queueAll queues every object the informers hold, as on a change.
func (r *runner) queueAll() {
	for _, k := range r.cgeips.GetStore().ListKeys() {
		r.queue.Add(item{kind: kindClusterEgress, name: k})
	}
	for _, o := range r.geips.GetStore().List() {
		r.queue.Add(itemOf(kindEgress, o))
	}
	for _, o := range r.giips.GetStore().List() {
		r.queue.Add(itemOf(kindIngress, o))
		r.queueIngressService(o)
	}
	for _, o := range r.exports.GetStore().List() {
		r.queue.Add(itemOf(kindExport, o))
	}
}

// work processes the queue until it shuts down.
func (r *runner) work(ctx context.Context) {
	for {
		it, shutdown := r.queue.Get()
		if shutdown {
			return
		}
		if err := r.process(ctx, it); err != nil && ctx.Err() == nil {
			r.log.Warn("globalnet: will retry", "object", it.String(), "error", err)
			r.queue.AddRateLimited(it)
		} else {
			r.queue.Forget(it)
		}
		r.queue.Done(it)
		r.record()
		if r.freed {
			r.freed = false
			for s := range r.starved {
				r.queue.Add(s)
			}
			clear(r.starved)
		}
	}
}

func (r *runner) process(ctx context.Context, it item) error {
	switch it.kind {
	case kindClusterEgress:
		return r.processClusterEgress(ctx, it)
	case kindEgress:
		return r.processEgress(ctx, it)
	case kindIngress:
		return r.processIngress(ctx, it)
	case kindExport:
		return r.processExport(ctx, it)
	case kindRules:
		r.rulesPending.Store(false)
		r.rebuildRules()
	}
	return nil
}

// rulesChanged asks for a rules rebuild soon; safe from any goroutine.
// Only the first call of a burst reaches the queue.
func (r *runner) rulesChanged() {
	if r.rulesPending.CompareAndSwap(false, true) {
		r.queue.AddAfter(rulesItem, rulesDelay)
	}
}
