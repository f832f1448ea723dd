package agent

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/natdiscovery"
)

// Timing of NAT discovery: how long one round waits for answers, and the
// pause before a remote is probed again, which doubles while the answer
// stays the same.
const (
	discoveryTimeout = 3 * time.Second
	rediscoverMin    = 2 * time.Second
	rediscoverMax    = 2 * time.Minute
)

// discovered is what NAT discovery found for the Endpoint it probed.
type discovered struct {
	target natdiscovery.Target
	result natdiscovery.Result
}

// discoveryTarget is what NAT discovery probes of a remote Endpoint; false
// when the remote does not publish a discovery port (it does not answer)
// or a private IP.
func discoveryTarget(e submv1.EndpointSpec) (natdiscovery.Target, bool) {
	priv, err := netip.ParseAddr(e.PrivateIP)
	if err != nil {
		return natdiscovery.Target{}, false
	}
	port, err := strconv.ParseUint(e.BackendConfig[BackendConfigNATDiscoveryPort], 10, 16)
	if err != nil || port == 0 {
		return natdiscovery.Target{}, false
	}
	pub, _ := netip.ParseAddr(e.PublicIP) // invalid when there is none
	return natdiscovery.Target{Cluster: e.ClusterID, Private: priv, Public: pub, Port: uint16(port)}, true
}

// withDiscovery points each peer at the address NAT discovery found it
// answers at, when the discovery concerned its current Endpoint; the others
// keep the Endpoint's rule (public IP if published, else private).
func withDiscovery(peers []peer, found map[string]discovered) []peer {
	for i := range peers {
		p := &peers[i]
		d, ok := found[p.endpoint.ClusterID]
		if p.remote == nil || !ok || !d.result.Addr.IsValid() {
			continue
		}
		if t, ok := discoveryTarget(p.endpoint); !ok || t != d.target {
			continue
		}
		p.remote.Endpoint = netip.AddrPortFrom(d.result.Addr, p.remote.Endpoint.Port())
		p.remote.NAT = d.result.NAT
		p.usingIP, p.usingNAT = d.result.Addr.String(), d.result.NAT
	}
	return peers
}

// discoverySchedule is when a remote is probed next.
type discoverySchedule struct {
	target  natdiscovery.Target
	next    time.Time
	pause   time.Duration
	probing bool
}

// runNATDiscovery answers the other gateways' discovery requests and probes
// every remote Endpoint that publishes a discovery port: when it appears or
// changes, then again with a growing pause. Its results steer the gateway
// configuration, and a source seen across a NAT becomes this gateway's
// published public IP when none was given.
func (a *Agent) runNATDiscovery(ctx context.Context) error {
	key := natdiscovery.NewKey([]byte(a.cfg.Member.PSK))
	// The private IP is where a NAT forwards the public address's
	// traffic to; validate checked it.
	priv, _ := netip.ParseAddr(a.cfg.PrivateIP)
	c, err := natdiscovery.Listen(netip.AddrPortFrom(priv, uint16(a.cfg.NATDiscoveryPort)), a.cfg.Member.ClusterID, key)
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		// The private IP is not this host's (an agent told another
		// node's address, or run apart from its node): no discovery can
		// answer there, and the remotes are reached at the addresses
		// they publish, as without NAT discovery.
		a.log.Warn("NAT discovery is off: the private IP is not an address of this host", "privateIP", priv)
		<-ctx.Done()
		return nil
	}
	if err != nil {
		return err
	}
	defer c.Close()
	defer func() {
		a.mu.Lock()
		a.found, a.seenBy = nil, nil
		a.mu.Unlock()
	}()
	type answer struct {
		target natdiscovery.Target
		result natdiscovery.Result
	}
	answers := make(chan answer)
	sched := map[string]*discoverySchedule{}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.discoverCh:
		case <-timer.C:
		case ans := <-answers:
			s := sched[ans.target.Cluster]
			if s == nil || s.target != ans.target {
				break // the Endpoint changed meanwhile; its new target is probed
			}
			s.probing = false
			a.mu.Lock()
			old := a.found[ans.target.Cluster]
			if a.found == nil {
				a.found = map[string]discovered{}
			}
			a.found[ans.target.Cluster] = discovered(ans)
			a.mu.Unlock()
			if old.target == ans.target && old.result.Addr == ans.result.Addr && old.result.NAT == ans.result.NAT && old.result.Seen.Addr() == ans.result.Seen.Addr() {
				s.pause = min(2*s.pause, rediscoverMax)
			} else {
				// A new answer, or a NAT that now maps this gateway to
				// another address: look again soon.
				s.pause = rediscoverMin
				a.log.Info("NAT discovery", "remote", ans.target.Cluster, "using", ans.result.Addr, "nat", ans.result.NAT, "seen", ans.result.Seen)
				wake(a.reconcileCh)
			}
			s.next = time.Now().Add(s.pause)
			a.learnPublicIP(ans.target.Cluster, ans.result)
		}
		now := time.Now()
		targets := a.discoveryTargets()
		for id := range sched {
			if _, ok := targets[id]; !ok {
				delete(sched, id)
				a.forgetSeen(id)
			}
		}
		next := now.Add(rediscoverMax)
		for id, t := range targets {
			s := sched[id]
			if s == nil || s.target != t {
				s = &discoverySchedule{target: t, next: now, pause: rediscoverMin}
				sched[id] = s
			}
			if !s.probing && !s.next.After(now) {
				s.probing = true
				go func() {
					pctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
					defer cancel()
					r := natdiscovery.Discover(pctx, c, t)
					select {
					case answers <- answer{t, r}:
					case <-ctx.Done():
					}
				}()
			}
			if !s.probing && s.next.Before(next) {
				next = s.next
			}
		}
		timer.Reset(next.Sub(now))
	}
}

// discoveryTargets are the remotes the active gateway connects to now, by
// cluster ID, that answer discovery.
func (a *Agent) discoveryTargets() map[string]natdiscovery.Target {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]natdiscovery.Target{}
	for _, p := range a.peers {
		if t, ok := discoveryTarget(p.endpoint); ok && p.remote != nil {
			out[t.Cluster] = t
		}
	}
	return out
}

// seenSource is the source one remote saw this gateway's request come
// from.
type seenSource struct {
	addr netip.Addr
	// nat: the remote answered at its public address.
	nat bool
	// seq orders the answers: the latest wins.
	seq uint64
}

// learnPublicIP records the source remote saw in r and publishes the public
// IP it implies, unless one was given (--public-ip, the node annotation).
// A source other than the private IP means a NAT between the two gateways,
// and its address is this gateway's outside it: a remote answering at its
// public address sees the address this gateway has on the internet, which
// outranks one seen by a remote reached at its private address (a NAT
// inside a private network). The latest answer wins among equals, so the
// public IP follows a NAT that changes its address; when every remote sees
// the private IP there is no NAT, and the learned public IP goes.
func (a *Agent) learnPublicIP(remote string, r natdiscovery.Result) {
	if a.cfg.PublicIP != "" || !r.Seen.IsValid() {
		return
	}
	a.mu.Lock()
	if a.seenBy == nil {
		a.seenBy = map[string]seenSource{}
	}
	a.seenSeq++
	a.seenBy[remote] = seenSource{addr: r.Seen.Addr(), nat: r.NAT, seq: a.seenSeq}
	changed := a.republishLocked()
	a.mu.Unlock()
	if changed {
		wake(a.reconcileCh)
	}
}

// forgetSeen drops what a remote that is gone saw; the public IP it taught
// stays unless the remaining remotes tell otherwise.
func (a *Agent) forgetSeen(remote string) {
	a.mu.Lock()
	delete(a.seenBy, remote)
	changed := len(a.seenBy) > 0 && a.republishLocked()
	a.mu.Unlock()
	if changed {
		wake(a.reconcileCh)
	}
}

// republishLocked sets the Endpoint's public IP from seenBy and says
// whether it changed.
func (a *Agent) republishLocked() bool {
	ip := learnedPublicIP(a.seenBy, a.cfg.PrivateIP)
	if a.spec.PublicIP == ip {
		return false
	}
	a.log.Info("learned this gateway's public IP from what remote gateways see", "publicIP", ip, "was", a.spec.PublicIP)
	a.spec.PublicIP = ip
	a.spec.NATEnabled = natEnabled(&a.cfg, ip)
	return true
}

// learnedPublicIP is the public IP the sources in seen imply; empty when
// every remote sees the private IP.
func learnedPublicIP(seen map[string]seenSource, private string) string {
	var best seenSource
	for _, s := range seen {
		if s.addr.String() == private {
			continue
		}
		if !best.addr.IsValid() || s.nat && !best.nat || s.nat == best.nat && s.seq > best.seq {
			best = s
		}
	}
	if !best.addr.IsValid() {
		return ""
	}
	return best.addr.String()
}
