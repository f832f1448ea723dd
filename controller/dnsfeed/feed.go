package dnsfeed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions/apis/v1alpha1"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/servicesync"
	"github.com/snorkel-net/snorkel/dnsd"
)

// Sink receives what the feed reads; *dnsd.Store is one.
type Sink interface {
	SetServices([]dnsd.Service) error
	SetConnectivity(local string, connected []string) error
}

var _ Sink = (*dnsd.Store)(nil)

// Config configures a Feed.
type Config struct {
	// ClusterID is this cluster's ID in the clusterset.
	ClusterID string
	// Local is the member cluster's client; LocalConfig its REST config,
	// for the MCS API and the Gateways.
	Local       kubernetes.Interface
	LocalConfig *rest.Config
	// Namespace is where the agents keep their Gateways (the agent's
	// namespace, e.g. api.AgentNamespace).
	Namespace string
	// Globalnet says the clusterset uses Globalnet: the local cluster's
	// headless pods are then answered with their pod IPs.
	Globalnet bool
	// Sink receives the services and the connectivity.
	Sink Sink
	// MinInterval is the least time between two rebuilds; default 100ms.
	MinInterval time.Duration
	// GatewayWait bounds the wait for the Gateways at start, after which
	// only the local cluster counts as connected until they can be read;
	// default 30s.
	GatewayWait time.Duration
	// Logger receives the feed's logs; default slog.Default().
	Logger *slog.Logger
}

func (c *Config) validate() error {
	var errs []error
	if e := validation.IsDNS1123Label(c.ClusterID); len(e) > 0 {
		errs = append(errs, fmt.Errorf("dnsfeed: Config.ClusterID %q: %s (e.g. \"cluster-a\", the ID snorkel join gave the cluster)", c.ClusterID, e[0]))
	}
	if c.Local == nil || c.LocalConfig == nil {
		errs = append(errs, errors.New("dnsfeed: Config.Local and Config.LocalConfig are required (the member cluster's client and REST config)"))
	}
	if e := validation.IsDNS1123Label(c.Namespace); len(e) > 0 {
		errs = append(errs, fmt.Errorf("dnsfeed: Config.Namespace %q: %s (the agent's namespace, e.g. \"submariner-operator\")", c.Namespace, e[0]))
	}
	if c.Sink == nil {
		errs = append(errs, errors.New("dnsfeed: Config.Sink is required (e.g. a dnsd Server's Store)"))
	}
	return errors.Join(errs...)
}

// Feed keeps a Sink up to date with the member cluster (see the package
// documentation).
type Feed struct {
	cfg Config
	log *slog.Logger

	imports  cache.SharedIndexInformer // ServiceImports
	imported cache.SharedIndexInformer // EndpointSlices servicesync imported
	gateways cache.SharedIndexInformer // Gateways in cfg.Namespace
	own      cache.SharedIndexInformer // the cluster's own EndpointSlices; Globalnet only

	dirtyServices, dirtyConnectivity chan struct{}

	mu      sync.Mutex
	lastErr string // the last error the sink returned, logged once
}

// byService indexes slices by the "namespace/name" of their service.
const byService = "service"

// New makes a Feed; Run starts it.
func New(cfg Config) (*Feed, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.MinInterval == 0 {
		cfg.MinInterval = 100 * time.Millisecond
	}
	if cfg.GatewayWait == 0 {
		cfg.GatewayWait = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	f := &Feed{
		cfg:               cfg,
		log:               cfg.Logger.With("component", "dnsfeed", "cluster", cfg.ClusterID),
		dirtyServices:     make(chan struct{}, 1),
		dirtyConnectivity: make(chan struct{}, 1),
	}
	mcs, err := mcsclient.NewForConfig(cfg.LocalConfig)
	if err != nil {
		return nil, fmt.Errorf("dnsfeed: MCS client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg.LocalConfig)
	if err != nil {
		return nil, fmt.Errorf("dnsfeed: dynamic client: %w", err)
	}
	all := metav1.NamespaceAll
	f.imports = mcsinformers.NewServiceImportInformer(mcs, all, 0, cache.Indexers{})
	f.imported = discoveryinformers.NewFilteredEndpointSliceInformer(cfg.Local, all, 0,
		cache.Indexers{byService: indexImported},
		func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelManagedBy + "=" + servicesync.ManagedBy
		})
	f.gateways = dynamicinformer.NewFilteredDynamicInformer(dyn, submv1.GatewayResource, cfg.Namespace, 0, cache.Indexers{}, nil).Informer()
	informers := []cache.SharedIndexInformer{f.imports, f.imported, f.gateways}
	if cfg.Globalnet {
		f.own = discoveryinformers.NewFilteredEndpointSliceInformer(cfg.Local, all, 0,
			cache.Indexers{byService: indexOwn},
			func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName })
		informers = append(informers, f.own)
	}
	for _, inf := range informers {
		if err := inf.SetTransform(stripManagedFields); err != nil {
			return nil, fmt.Errorf("dnsfeed: %w", err)
		}
		dirty := f.dirtyServices
		if inf == f.gateways {
			dirty = f.dirtyConnectivity
		}
		mark := func(any) { notify(dirty) }
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    mark,
			UpdateFunc: func(_, obj any) { mark(obj) },
			DeleteFunc: mark,
		}); err != nil {
			return nil, fmt.Errorf("dnsfeed: %w", err)
		}
	}
	return f, nil
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		m.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

// Run feeds the sink until ctx ends, then returns nil. The sink gets its
// first services once the ServiceImports and EndpointSlices are listed,
// and the Gateways too or GatewayWait has passed; until then dnsd answers
// SERVFAIL rather than deny names it has not read yet.
func (f *Feed) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	synced := []cache.InformerSynced{f.imports.HasSynced, f.imported.HasSynced}
	for _, inf := range []cache.SharedIndexInformer{f.imports, f.imported, f.gateways, f.own} {
		if inf != nil {
			wg.Go(func() { inf.RunWithContext(ctx) })
		}
	}
	if f.own != nil {
		synced = append(synced, f.own.HasSynced)
	}
	f.log.Info("starting", "gateway_namespace", f.cfg.Namespace, "globalnet", f.cfg.Globalnet)
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil
	}
	wait, stop := context.WithTimeout(ctx, f.cfg.GatewayWait)
	gatewaysSynced := cache.WaitForCacheSync(wait.Done(), f.gateways.HasSynced)
	stop()
	if ctx.Err() != nil {
		return nil
	}
	if !gatewaysSynced {
		f.log.Warn("cannot list the Gateways yet; only the local cluster counts as connected until they can be "+
			"(is the submariner.io Gateway CRD installed, and may this identity list gateways in the namespace?)",
			"namespace", f.cfg.Namespace, "after", f.cfg.GatewayWait)
	}
	f.publishConnectivity()
	f.publishServices()
	f.log.Info("synced; dnsd is serving what the cluster imports")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.dirtyConnectivity:
			f.publishConnectivity()
		case <-f.dirtyServices:
			f.publishServices()
		}
		// A burst of changes waits here and is one rebuild after.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.cfg.MinInterval):
		}
	}
}

// publishServices rebuilds every service from the caches.
func (f *Feed) publishServices() {
	var own ownSlices
	if f.own != nil {
		own = f.ownSlices
	}
	var out []dnsd.Service
	for _, o := range f.imports.GetStore().List() {
		si, ok := o.(*mcsv1a1.ServiceImport)
		if !ok || si.Labels[servicesync.LabelSourceCluster] != "" {
			// Per-cluster imports live on the broker; one here means the
			// broker shares this cluster.
			continue
		}
		objs, _ := f.imported.GetIndexer().ByIndex(byService, si.Namespace+"/"+si.Name)
		imported := make([]*discoveryv1.EndpointSlice, 0, len(objs))
		for _, o := range objs {
			imported = append(imported, o.(*discoveryv1.EndpointSlice))
		}
		out = append(out, service(si, imported, f.cfg.ClusterID, own))
	}
	slices.SortFunc(out, func(a, b dnsd.Service) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	f.report(f.cfg.Sink.SetServices(out))
}

func (f *Feed) ownSlices(ns, name string) []*discoveryv1.EndpointSlice {
	objs, _ := f.own.GetIndexer().ByIndex(byService, ns+"/"+name)
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*discoveryv1.EndpointSlice))
	}
	return out
}

// publishConnectivity reads the Gateways' connections.
func (f *Feed) publishConnectivity() {
	var gws []*submv1.Gateway
	for _, o := range f.gateways.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		gw, err := submv1.FromUnstructured[submv1.Gateway](u)
		if err != nil {
			f.log.Warn("cannot read a Gateway; its connections are ignored", "error", err)
			continue
		}
		gws = append(gws, gw)
	}
	f.report(f.cfg.Sink.SetConnectivity(f.cfg.ClusterID, connected(gws)))
}

// report logs what the sink could not take, once until it changes.
func (f *Feed) report(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if msg != f.lastErr && msg != "" {
		f.log.Warn("dnsd leaves out what it cannot serve", "error", err)
	}
	f.lastErr = msg
}

// indexImported indexes a slice servicesync imported by its service; a
// slice outside the service's namespace (the broker's namespace, when the
// broker shares the cluster) is not an import.
func indexImported(obj any) ([]string, error) {
	eps, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	ns, name := eps.Labels[servicesync.LabelSourceNamespace], eps.Labels[servicesync.LabelServiceName]
	if ns == "" || name == "" || eps.Namespace != ns {
		return nil, nil
	}
	return []string{ns + "/" + name}, nil
}

// indexOwn indexes the cluster's own slices by their Service.
func indexOwn(obj any) ([]string, error) {
	eps, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || eps.Labels[discoveryv1.LabelServiceName] == "" || eps.Labels[discoveryv1.LabelManagedBy] == servicesync.ManagedBy {
		return nil, nil
	}
	return []string{eps.Namespace + "/" + eps.Labels[discoveryv1.LabelServiceName]}, nil
}
