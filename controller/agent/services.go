package agent

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/snorkel-net/snorkel/controller/globalnet"
	"github.com/snorkel-net/snorkel/controller/servicesync"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/natengine"
)

// newIPAM makes the Globalnet IPAM of a cluster with a global CIDR; nil
// without Globalnet. validate has checked the CIDRs.
func (a *Agent) newIPAM() (*globalnet.IPAM, error) {
	m := a.cfg.Member
	if m.GlobalCIDR == "" {
		return nil, nil
	}
	prefixes := func(ss []string) []netip.Prefix {
		ps := make([]netip.Prefix, len(ss))
		for i, s := range ss {
			ps[i] = netip.MustParsePrefix(s)
		}
		return ps
	}
	ipam, err := globalnet.New(globalnet.Config{
		ClusterID:    m.ClusterID,
		GlobalCIDR:   netip.MustParsePrefix(m.GlobalCIDR),
		Local:        a.kc,
		LocalConfig:  a.cfg.LocalConfig,
		ClusterCIDRs: prefixes(m.ClusterCIDRs),
		ServiceCIDRs: prefixes(m.ServiceCIDRs),
		OnRules:      a.setRules,
		OnGlobalIP:   a.resyncService,
		Log:          a.cfg.Logger,
		Registerer:   a.cfg.Registerer,
	})
	if err != nil {
		return nil, fmt.Errorf("agent: %w; run `snorkel join` again", err)
	}
	return ipam, nil
}

// setRules takes the IPAM's latest rules for the data plane.
func (a *Agent) setRules(r natengine.Rules) {
	a.mu.Lock()
	a.rules = &r
	a.mu.Unlock()
	wake(a.reconcileCh)
	wake(a.rulesCh)
}

// currentRules are the IPAM's rules of this term; nil before its first.
func (a *Agent) currentRules() *natengine.Rules {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rules
}

// resyncService tells the service sync that the global IP of ns/name
// changed, so that the EndpointSlices it published carry the new one.
func (a *Agent) resyncService(ns, name string) {
	if s := a.syncer.Load(); s != nil {
		s.Resync(ns, name)
	}
}

// runServiceSync exports this cluster's services to the clusterset and
// imports the others' until ctx ends. A Syncer runs once, so each term
// makes its own.
func (a *Agent) runServiceSync(ctx context.Context) error {
	m := a.cfg.Member
	cfg := servicesync.Config{
		ClusterID:       m.ClusterID,
		Local:           a.kc,
		LocalConfig:     a.cfg.LocalConfig,
		Broker:          m.BrokerConfig(),
		BrokerNamespace: m.BrokerNamespace,
		Logger:          a.cfg.Logger,
		Registerer:      a.cfg.Registerer,
	}
	if a.ipam != nil {
		cfg.GlobalIPs = a.ipam
		// The exports carry global IPs, which this term's IPAM gives once
		// it has read its allocations back. A syncer started before would
		// find none and withdraw every export from the clusterset until
		// then: at each failover, the other clusters would lose the names.
		for a.currentRules() == nil {
			select {
			case <-ctx.Done():
				return nil
			case <-a.rulesCh:
			}
		}
	}
	if _, block, err := m.ClustersetIP(); err == nil && block.IsValid() {
		cfg.ClustersetIP = &servicesync.ClustersetIPConfig{CIDR: block, Default: m.ClustersetIPEnabled}
	}
	s, err := servicesync.New(cfg)
	if err != nil {
		return err
	}
	a.syncer.Store(s)
	defer a.syncer.CompareAndSwap(s, nil)
	return s.Run(ctx)
}

// setIPAMRemotes gives the IPAM the remote clusters' global CIDRs, in the
// data plane's order, which its rules must keep apart from this cluster's.
func (a *Agent) setIPAMRemotes(rs []gateway.RemoteSpec) {
	if a.ipam == nil {
		return
	}
	var ps []netip.Prefix
	for _, r := range rs {
		if r.GlobalCIDR.IsValid() {
			ps = append(ps, r.GlobalCIDR)
		}
	}
	a.ipam.SetRemotes(ps)
}
