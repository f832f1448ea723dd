package globalnet

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
)

// IPAM allocates Globalnet's global IPs on the Kubernetes API and derives
// the NAT engine's rules from them. Create it with New; Run it while this
// gateway is the cluster's active one.
type IPAM struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	run     *runner // the Run in progress; nil when none
	remotes []netip.Prefix
	// The global IPs in the last rules handed to OnRules, by namespace and
	// name of the service or pod.
	services map[nsName]netip.Addr
	pods     map[nsName]podGlobalIP
}

// nsName names a namespaced object.
type nsName struct{ ns, name string }

// podGlobalIP is a headless pod's global IP and the exported service it
// belongs to.
type podGlobalIP struct {
	ip      netip.Addr
	service string
}

// New validates cfg and returns an IPAM that allocates nothing until Run.
func New(cfg Config) (*IPAM, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.GlobalCIDR = cfg.GlobalCIDR.Masked()
	cfg.ClusterCIDRs = slices.Clone(cfg.ClusterCIDRs)
	cfg.ServiceCIDRs = slices.Clone(cfg.ServiceCIDRs)
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &IPAM{
		cfg:      cfg,
		log:      log.With("component", "globalnet", "cluster", cfg.ClusterID),
		metrics:  newMetrics(cfg.Registerer, cfg.GlobalCIDR.String()),
		services: map[nsName]netip.Addr{},
		pods:     map[nsName]podGlobalIP{},
	}, nil
}

// errRunning refuses a second Run while one is in progress.
var errRunning = errors.New("globalnet: IPAM.Run is already running; run one at a time")

// Run watches the cluster and allocates until ctx ends; it then returns
// nil. It first reads every allocation back from the objects' status, so an
// IPAM that takes over from another (or from itself) keeps every address.
// Only one IPAM may run per cluster at a time: the agent's leader election
// sees to it.
func (i *IPAM) Run(ctx context.Context) error {
	i.mu.Lock()
	if i.run != nil {
		i.mu.Unlock()
		return errRunning
	}
	r, err := i.newRunner()
	if err != nil {
		i.mu.Unlock()
		return err
	}
	i.run = r
	i.mu.Unlock()
	defer func() {
		i.mu.Lock()
		i.run = nil
		i.mu.Unlock()
	}()
	return r.runUntil(ctx)
}

// SetRemotes sets the remote clusters' global CIDRs, Rules.Remotes, by
// the gateway's remote index. An invalid prefix stands for a remote without
// Globalnet. A CIDR that overlaps this cluster's ranges or an earlier
// remote's is logged and taken as "no Globalnet", so that one bad remote
// does not hold up the rules of all.
func (i *IPAM) SetRemotes(remotes []netip.Prefix) {
	remotes = slices.Clone(remotes)
	own := slices.Concat([]netip.Prefix{i.cfg.GlobalCIDR, linkLocal}, i.cfg.ClusterCIDRs, i.cfg.ServiceCIDRs)
	for k, p := range remotes {
		if !p.IsValid() {
			continue
		}
		bad := !p.Addr().Is4()
		for _, q := range slices.Concat(own, remotes[:k]) {
			bad = bad || (q.IsValid() && p.Overlaps(q))
		}
		if bad {
			i.log.Error("globalnet: a remote's global CIDR is not IPv4 or overlaps this cluster's ranges or another remote's; ignoring it",
				"remote", k, "globalCIDR", p)
			remotes[k] = netip.Prefix{}
		}
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.remotes = remotes
	if i.run != nil {
		i.run.rulesChanged()
	}
}

func (i *IPAM) remotesCopy() []netip.Prefix {
	i.mu.Lock()
	defer i.mu.Unlock()
	return slices.Clone(i.remotes)
}

// ServiceGlobalIP returns the global IP of exported ClusterIP service
// namespace/name, once the NAT engine's rules carry it.
func (i *IPAM) ServiceGlobalIP(namespace, name string) (string, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	a, ok := i.services[nsName{namespace, name}]
	if !ok {
		return "", false
	}
	return a.String(), true
}

// PodGlobalIP returns the global IP of pod namespace/name of an exported
// headless service, once the NAT engine's rules carry it.
func (i *IPAM) PodGlobalIP(namespace, name string) (string, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, ok := i.pods[nsName{namespace, name}]
	if !ok {
		return "", false
	}
	return p.ip.String(), true
}

// publish records the global IPs of the rules just handed over and returns
// the services whose global IPs changed.
func (i *IPAM) publish(services map[nsName]netip.Addr, pods map[nsName]podGlobalIP) []nsName {
	i.mu.Lock()
	defer i.mu.Unlock()
	changed := map[nsName]bool{}
	for k, a := range services {
		if old, ok := i.services[k]; !ok || old != a {
			changed[k] = true
		}
	}
	for k := range i.services {
		if _, ok := services[k]; !ok {
			changed[k] = true
		}
	}
	for k, p := range pods {
		if old, ok := i.pods[k]; !ok || old != p {
			changed[nsName{k.ns, p.service}] = true
			if ok && old.service != p.service {
				changed[nsName{k.ns, old.service}] = true
			}
		}
	}
	for k, p := range i.pods {
		if _, ok := pods[k]; !ok {
			changed[nsName{k.ns, p.service}] = true
		}
	}
	i.services, i.pods = services, pods
	out := make([]nsName, 0, len(changed))
	for k := range changed {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b nsName) int { return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.name, b.name)) })
	return out
}
