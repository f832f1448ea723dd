package servicesync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions/apis/v1alpha1"
)

// Config configures a Syncer.
type Config struct {
	// ClusterID is this cluster's ID in the clusterset (a DNS-1123 label).
	ClusterID string
	// Local is the member cluster's client; LocalConfig its REST config,
	// for the MCS API.
	Local       kubernetes.Interface
	LocalConfig *rest.Config
	// Broker reaches the broker; BrokerNamespace is the only namespace it
	// needs (the broker token grants no other).
	Broker          *rest.Config
	BrokerNamespace string
	// GlobalIPs gives the Globalnet addresses; nil without Globalnet.
	GlobalIPs GlobalIPs
	// ClustersetIP is this cluster's clusterset IP block and default; nil
	// when it has none. Under Globalnet no service gets a clusterset IP,
	// and an export that asks for one is told why.
	ClustersetIP *ClustersetIPConfig
	// Workers is the number of exports and of imports reconciled at once;
	// default 8.
	Workers int
	// Logger receives the Syncer's logs; default slog.Default().
	Logger *slog.Logger
	// Registerer, when set, gets the Syncer's metrics:
	// submariner_service_export and submariner_service_import.
	Registerer prometheus.Registerer
}

// Client rates used for LocalConfig and Broker when they set none (QPS
// 0): client-go's default of 5 per second would make a large clusterset
// take minutes to settle.
const (
	defaultQPS   = 100
	defaultBurst = 200
)

func (c *Config) validate() error {
	if errs := validation.IsDNS1123Label(c.ClusterID); len(errs) > 0 {
		return fmt.Errorf("servicesync: Config.ClusterID %q: %s (lower-case letters, digits and '-', e.g. \"cluster-1\")", c.ClusterID, errs[0])
	}
	if c.Local == nil || c.LocalConfig == nil {
		return errors.New("servicesync: Config.Local and Config.LocalConfig are required (the member cluster's client and REST config)")
	}
	if c.Broker == nil {
		return errors.New("servicesync: Config.Broker is required (the broker's REST config, e.g. from the agent's BrokerConfig)")
	}
	if errs := validation.IsDNS1123Label(c.BrokerNamespace); len(errs) > 0 {
		return fmt.Errorf("servicesync: Config.BrokerNamespace %q: %s (e.g. \"submariner-k8s-broker\")", c.BrokerNamespace, errs[0])
	}
	if c.ClustersetIP != nil {
		if err := c.ClustersetIP.validate(); err != nil {
			return err
		}
	}
	if c.Workers < 0 {
		return fmt.Errorf("servicesync: Config.Workers %d: must be at least 1, or 0 for the default", c.Workers)
	}
	return nil
}

// withRate copies cfg, giving it defaultQPS when it sets no rate.
func withRate(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg.QPS, cfg.Burst = defaultQPS, defaultBurst
	}
	return cfg
}

// Syncer exports this cluster's services to the clusterset and imports
// the other clusters' (see the package documentation).
type Syncer struct {
	cluster  string
	brokerNS string
	gips     GlobalIPs
	// vips allocates the clusterset IPs of this cluster's block; nil
	// without one, and under Globalnet. csDefault is the cluster's
	// clusterset IP default.
	vips      *vipPool
	csDefault bool
	workers   int
	log       *slog.Logger
	metrics   *metrics

	local     kubernetes.Interface
	localMCS  mcsclient.Interface
	broker    kubernetes.Interface
	brokerMCS mcsclient.Interface

	// In the member cluster.
	exports    cache.SharedIndexInformer // ServiceExports
	services   cache.SharedIndexInformer // Services
	sources    cache.SharedIndexInformer // the cluster's own EndpointSlices (kubernetes.io/service-name)
	copies     cache.SharedIndexInformer // EndpointSlices the Syncer imported
	imports    cache.SharedIndexInformer // ServiceImports
	namespaces cache.SharedIndexInformer
	// On the broker.
	brokerImports cache.SharedIndexInformer
	brokerSlices  cache.SharedIndexInformer

	// exportQueue holds "ns/name" of services whose export to reconcile;
	// importQueue those whose import to reconcile.
	exportQueue workqueue.TypedRateLimitingInterface[string]
	importQueue workqueue.TypedRateLimitingInterface[string]

	foreignMu sync.Mutex
	foreign   map[string]bool // ServiceImports the Syncer found but does not own, reported once
}

// Index names.
const (
	byService   = "service"   // "ns/name" of the exported service
	byPod       = "pod"       // "ns/pod" of a source slice's endpoints
	byNamespace = "namespace" // the exported service's namespace (broker imports)
)

// New makes a Syncer; Run starts it.
func New(cfg Config) (*Syncer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Syncer{
		cluster:  cfg.ClusterID,
		brokerNS: cfg.BrokerNamespace,
		gips:     cfg.GlobalIPs,
		workers:  cfg.Workers,
		log:      cfg.Logger,
		local:    cfg.Local,
		foreign:  map[string]bool{},
		metrics:  newMetrics(cfg.Registerer),
	}
	if s.workers == 0 {
		s.workers = 8
	}
	if c := cfg.ClustersetIP; c != nil {
		s.csDefault = c.Default
		if s.gips == nil {
			s.vips = newVIPPool(c.CIDR)
		}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("component", "servicesync", "cluster", s.cluster)
	var err error
	if s.localMCS, err = mcsclient.NewForConfig(withRate(cfg.LocalConfig)); err != nil {
		return nil, fmt.Errorf("servicesync: member cluster MCS client: %w", err)
	}
	if s.broker, err = kubernetes.NewForConfig(withRate(cfg.Broker)); err != nil {
		return nil, fmt.Errorf("servicesync: broker client: %w", err)
	}
	if s.brokerMCS, err = mcsclient.NewForConfig(withRate(cfg.Broker)); err != nil {
		return nil, fmt.Errorf("servicesync: broker MCS client: %w", err)
	}
	s.exportQueue = newQueue("serviceexports")
	s.importQueue = newQueue("serviceimports")
	if err := s.makeInformers(); err != nil {
		return nil, err
	}
	return s, nil
}

// newQueue retries failures from 10 ms up to 30 s apart.
func newQueue(name string) workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

// stripManagedFields keeps informer caches small.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		m.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

func (s *Syncer) makeInformers() error {
	all := metav1.NamespaceAll
	nsIndex := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	s.exports = mcsinformers.NewServiceExportInformer(s.localMCS, all, 0, nsIndex)
	s.services = coreinformers.NewServiceInformer(s.local, all, 0, nsIndex)
	s.sources = discoveryinformers.NewFilteredEndpointSliceInformer(s.local, all, 0,
		cache.Indexers{byService: indexSourceByService, byPod: indexSourceByPod},
		func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName })
	s.copies = discoveryinformers.NewFilteredEndpointSliceInformer(s.local, all, 0,
		cache.Indexers{byService: indexCopyByService},
		func(o *metav1.ListOptions) { o.LabelSelector = sliceManagedBy })
	s.imports = mcsinformers.NewServiceImportInformer(s.localMCS, all, 0, nsIndex)
	s.namespaces = coreinformers.NewNamespaceInformer(s.local, 0, cache.Indexers{})
	s.brokerImports = mcsinformers.NewServiceImportInformer(s.brokerMCS, s.brokerNS, 0,
		cache.Indexers{byService: indexPublishedByService, byNamespace: indexPublishedByNamespace})
	s.brokerSlices = discoveryinformers.NewFilteredEndpointSliceInformer(s.broker, s.brokerNS, 0,
		cache.Indexers{byService: indexPublishedByService},
		func(o *metav1.ListOptions) { o.LabelSelector = sliceManagedBy })

	for _, inf := range s.informers() {
		if err := inf.SetTransform(stripManagedFields); err != nil {
			return fmt.Errorf("servicesync: %w", err)
		}
	}
	handlers := []struct {
		inf cache.SharedIndexInformer
		fn  func(obj any)
	}{
		{s.exports, s.onLocalService},
		{s.services, s.onLocalService},
		{s.sources, s.onSource},
		{s.copies, s.onCopy},
		{s.imports, s.onImport},
		{s.namespaces, s.onNamespace},
		{s.brokerImports, s.onBrokerImport},
		{s.brokerSlices, s.onBrokerSlice},
	}
	for _, h := range handlers {
		fn := h.fn
		_, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    fn,
			UpdateFunc: func(_, obj any) { fn(obj) },
			DeleteFunc: func(obj any) {
				if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = t.Obj
				}
				fn(obj)
			},
		})
		if err != nil {
			return fmt.Errorf("servicesync: %w", err)
		}
	}
	return nil
}

func (s *Syncer) informers() []cache.SharedIndexInformer {
	return []cache.SharedIndexInformer{s.exports, s.services, s.sources, s.copies, s.imports, s.namespaces, s.brokerImports, s.brokerSlices}
}

// Run syncs until ctx ends, then returns nil. Failures are logged and
// retried; while the member cluster or the broker cannot be reached, it
// waits. A Syncer runs once.
func (s *Syncer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		s.exportQueue.ShutDown()
		s.importQueue.ShutDown()
		wg.Wait()
	}()
	synced := make([]cache.InformerSynced, 0, 8)
	for _, inf := range s.informers() {
		wg.Go(func() { inf.RunWithContext(ctx) })
		synced = append(synced, inf.HasSynced)
	}
	s.log.Info("starting", "broker_namespace", s.brokerNS, "globalnet", s.gips != nil)
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		// Only the context's end stops the wait.
		s.log.Warn("stopped before the caches of the member cluster and the broker namespace synced")
		return nil
	}
	s.rebuildVIPs()
	for range s.workers {
		wg.Go(func() { s.drain(ctx, "export", s.exportQueue, s.syncExport) })
		wg.Go(func() { s.drain(ctx, "import", s.importQueue, s.syncImport) })
	}
	s.log.Info("synced caches; reconciling")
	<-ctx.Done()
	return nil
}

// drain reconciles keys from q until it shuts down; once ctx has ended,
// what is left fails fast and is dropped.
func (s *Syncer) drain(ctx context.Context, what string, q workqueue.TypedRateLimitingInterface[string], sync func(ctx context.Context, ns, name string) error) {
	for {
		k, quit := q.Get()
		if quit {
			return
		}
		ns, name := splitKey(k)
		err := sync(ctx, ns, name)
		switch {
		case err == nil:
			q.Forget(k)
		case ctx.Err() != nil:
			q.Forget(k)
		default:
			s.log.Warn(what+" failed; will retry", "service", k, "error", err)
			q.AddRateLimited(k)
		}
		q.Done(k)
	}
}

// Resync reconciles again what depends on the global IP of ns/name, a
// Service or a Pod: the Globalnet IPAM calls it when it assigns or frees
// one. It may be called before Run and from any goroutine.
func (s *Syncer) Resync(ns, name string) {
	s.exportQueue.Add(key(ns, name))
	objs, _ := s.sources.GetIndexer().ByIndex(byPod, key(ns, name))
	for _, o := range objs {
		if eps, ok := o.(*discoveryv1.EndpointSlice); ok {
			s.exportQueue.Add(key(eps.Namespace, eps.Labels[discoveryv1.LabelServiceName]))
		}
	}
}

// Event handlers: each maps an object to the service keys it affects.

// onLocalService handles ServiceExports and Services.
func (s *Syncer) onLocalService(obj any) {
	if m, ok := obj.(metav1.Object); ok {
		s.exportQueue.Add(key(m.GetNamespace(), m.GetName()))
	}
}

func (s *Syncer) onSource(obj any) {
	if eps, ok := obj.(*discoveryv1.EndpointSlice); ok && eps.Labels[discoveryv1.LabelServiceName] != "" {
		s.exportQueue.Add(key(eps.Namespace, eps.Labels[discoveryv1.LabelServiceName]))
	}
}

func (s *Syncer) onCopy(obj any) {
	if k, ok := copyKey(obj); ok {
		s.importQueue.Add(k)
	}
}

// onImport handles the member's ServiceImports, its own and others' (one
// deleted may leave room for the Syncer's), but not per-cluster ones
// (a broker sharing the cluster).
func (s *Syncer) onImport(obj any) {
	if si, ok := obj.(*mcsv1a1.ServiceImport); ok && si.Labels[LabelSourceCluster] == "" {
		s.importQueue.Add(key(si.Namespace, si.Name))
	}
}

// onNamespace imports what waited for the namespace to exist.
func (s *Syncer) onNamespace(obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	objs, _ := s.brokerImports.GetIndexer().ByIndex(byNamespace, ns.Name)
	for _, o := range objs {
		if k, ok := serviceKeyOfLabels(o.(metav1.Object).GetLabels()); ok {
			s.importQueue.Add(k)
		}
	}
}

// onBrokerImport: any cluster's ServiceImport changes the import, and the
// Conflict condition of this cluster's export; this cluster's own also
// brings its export back to be checked (it may be stale).
func (s *Syncer) onBrokerImport(obj any) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	if k, ok := serviceKeyOfLabels(m.GetLabels()); ok {
		s.importQueue.Add(k)
		s.exportQueue.Add(k)
	}
}

// onBrokerSlice: any cluster's slice changes the import; this cluster's
// own brings its export back to be checked.
func (s *Syncer) onBrokerSlice(obj any) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	if k, ok := serviceKeyOfLabels(m.GetLabels()); ok {
		s.importQueue.Add(k)
		if m.GetLabels()[LabelSourceCluster] == s.cluster {
			s.exportQueue.Add(k)
		}
	}
}

// Index functions.

func indexSourceByService(obj any) ([]string, error) {
	eps, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || eps.Labels[discoveryv1.LabelServiceName] == "" {
		return nil, nil
	}
	return []string{key(eps.Namespace, eps.Labels[discoveryv1.LabelServiceName])}, nil
}

func indexSourceByPod(obj any) ([]string, error) {
	eps, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	var out []string
	for i := range eps.Endpoints {
		if ref := eps.Endpoints[i].TargetRef; ref != nil && ref.Kind == "Pod" {
			out = append(out, key(eps.Namespace, ref.Name))
		}
	}
	return out, nil
}

// copyKey is the service of an imported slice in a member; false for a
// slice elsewhere (the broker's namespace when the broker shares the
// cluster).
func copyKey(obj any) (string, bool) {
	m, ok := obj.(metav1.Object)
	if !ok || m.GetNamespace() != m.GetLabels()[LabelSourceNamespace] {
		return "", false
	}
	return serviceKeyOfLabels(m.GetLabels())
}

func indexCopyByService(obj any) ([]string, error) {
	if k, ok := copyKey(obj); ok {
		return []string{k}, nil
	}
	return nil, nil
}

func indexPublishedByService(obj any) ([]string, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	if k, ok := serviceKeyOfLabels(m.GetLabels()); ok {
		return []string{k}, nil
	}
	return nil, nil
}

func indexPublishedByNamespace(obj any) ([]string, error) {
	m, ok := obj.(metav1.Object)
	if !ok || m.GetLabels()[LabelSourceNamespace] == "" {
		return nil, nil
	}
	return []string{m.GetLabels()[LabelSourceNamespace]}, nil
}
