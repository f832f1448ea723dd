package agent

import (
	"context"
	"net/netip"
	"reflect"

	"k8s.io/client-go/tools/cache"

	"github.com/snorkel-net/snorkel/gateway"
)

// Connection-tracking sync under Globalnet: the active gateway serves its
// NAT engine's flows on its private IP and Config.SyncPort; a passive
// gateway follows the cluster's active one, found as this cluster's
// Endpoint on the broker published by another node, so that it can take
// over established connections with their global addresses and ports.

// syncKey is the sync's shared secret: the clusterset PSK, from which the
// gateways derive each connection's keys. It is nil, and the sync off, when
// the PSK is too short to key it.
func (a *Agent) syncKey() []byte {
	psk := a.cfg.Member.PSK
	if a.cfg.Member.GlobalCIDR == "" || len(psk) < 16 {
		return nil
	}
	return []byte(psk)
}

// withSyncListen makes the active gateway's spec s serve the sync.
func (a *Agent) withSyncListen(s *gateway.Spec) {
	key := a.syncKey()
	ip, err := netip.ParseAddr(a.cfg.PrivateIP)
	if s.Globalnet == nil || key == nil || err != nil {
		return
	}
	s.Sync = &gateway.SyncSpec{Listen: netip.AddrPortFrom(ip, uint16(a.cfg.SyncPort)), Key: key}
}

// passiveSpec is the passive gateway's spec: no remotes, and under
// Globalnet the sync following the cluster's active gateway when the
// broker shows one.
func (a *Agent) passiveSpec() *gateway.Spec {
	s := build(&a.cfg, nil, nil)
	key := a.syncKey()
	if s.Globalnet == nil || key == nil {
		return s
	}
	for _, e := range a.brokerEndpoints() {
		if e.Spec.ClusterID != a.cfg.Member.ClusterID || e.Spec.Hostname == a.cfg.Hostname {
			continue
		}
		if ip, err := netip.ParseAddr(e.Spec.PrivateIP); err == nil {
			s.Sync = &gateway.SyncSpec{Follow: netip.AddrPortFrom(ip, uint16(a.cfg.SyncPort)), Key: key}
			break
		}
	}
	return s
}

// applyPassive applies the passive spec when it differs from the last one
// applied. Under a.leadMu, outside a term. The Dataplane may change the
// spec it is given, so a twin is kept to compare with.
func (a *Agent) applyPassive(ctx context.Context) {
	s := a.passiveSpec()
	if reflect.DeepEqual(s, a.passive) {
		return
	}
	if err := a.cfg.Dataplane.Apply(ctx, a.passiveSpec()); err != nil {
		a.log.Warn("configuring the passive data plane", "err", err)
		return
	}
	a.passive = s
	if s.Sync != nil {
		a.log.Info("following the active gateway's connection tracking", "active", s.Sync.Follow)
	}
}

// followLoop keeps a passive gateway following the cluster's active one
// as the broker's Endpoints change. It stays out of a term's way: a term
// holds a.leadMu, and applies the passive spec itself when it ends.
func (a *Agent) followLoop(ctx context.Context) {
	if a.syncKey() == nil {
		if a.cfg.Member.GlobalCIDR != "" {
			a.log.Warn("connection tracking is not replicated between this cluster's gateways: the clusterset PSK is shorter than 16 bytes")
		}
		return
	}
	if !cache.WaitForCacheSync(ctx.Done(), a.endpoints.HasSynced) {
		return
	}
	wake(a.followCh)
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.followCh:
		}
		if !a.leadMu.TryLock() {
			continue
		}
		a.applyPassive(ctx)
		a.leadMu.Unlock()
	}
}
