package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab/topo"
)

// globalnetDemo checks what Globalnet promises between clusters whose pod
// and service CIDRs are the same: a pod of the first cluster reaches every
// exported service and headless pod of the others at their global IPs, and
// each backend sees a global source address — the calling cluster's egress
// IP, or a headless pod's own global IP when that pod calls out.
func (l *Lab) globalnetDemo(ctx context.Context, report func(Check)) {
	home := &l.Plan.Clusters[0]
	src := home.Pods[0]
	srcNS := l.Topo.NS(src.NS)
	homeEgress, c := l.clusterEgress(ctx, home)
	report(c)
	for _, r := range l.Plan.Remotes(home) {
		remoteEgress, c := l.clusterEgress(ctx, r)
		report(c)
		var headless []PodPlan
		for _, s := range r.Services {
			if !s.Spec.Headless {
				for _, c := range l.httpService(ctx, srcNS, src, s, s.GlobalIP, homeEgress) {
					report(c)
				}
				continue
			}
			for _, b := range s.Backends {
				headless = append(headless, b)
				report(l.pingAddr(ctx, srcNS, src, b.Name, b.GlobalIP))
				report(l.httpPodAt(ctx, srcNS, src, b, b.GlobalIP, homeEgress))
			}
		}
		// Calls the other way: from a headless pod, which leaves with its
		// own global IP, and from a pod of no headless service, which
		// leaves with its cluster's egress IPs.
		for _, caller := range r.Pods {
			if caller.GlobalIP.IsValid() {
				report(l.callHome(ctx, caller, home, clientRule{
					ok:   func(a netip.Addr) bool { return a == caller.GlobalIP },
					want: caller.GlobalIP.String() + ", " + caller.Name + "'s own global IP",
				}))
				break
			}
		}
		for _, caller := range r.Pods {
			if !caller.GlobalIP.IsValid() {
				report(l.callHome(ctx, caller, home, remoteEgress))
				break
			}
		}
		if len(headless) > 0 {
			report(l.bulkAt(ctx, srcNS, src, headless[0], headless[0].GlobalIP))
		}
	}
}

// callHome asks the first exported ClusterIP service of cluster home, from
// pod caller of another cluster, once.
func (l *Lab) callHome(ctx context.Context, caller PodPlan, home *ClusterPlan, want clientRule) Check {
	for _, s := range home.Services {
		if s.Spec.Headless {
			continue
		}
		addr := netip.AddrPortFrom(s.GlobalIP, s.Spec.Port)
		c := Check{Kind: "http", What: arrow(caller.Name, fmt.Sprintf("%s %s", s.Spec.Name, addr))}
		isBackend := func(p string) bool {
			return slices.ContainsFunc(s.Backends, func(b PodPlan) bool { return b.Name == p })
		}
		c, _ = whereamiCheck(ctx, l.Topo.NS(caller.NS).HTTPClient(), c, "http://"+addr.String()+"/", isBackend, want)
		return c
	}
	return Check{Kind: "http", What: arrow(caller.Name, home.Spec.ID), Detail: "cluster " + home.Spec.ID + " exports no ClusterIP service to call"}
}

// clusterEgress asks c's gateway which cluster egress IPs it resolved its
// config to, and returns the rule "one of them" with a check saying what
// they are.
func (l *Lab) clusterEgress(ctx context.Context, c *ClusterPlan) (clientRule, Check) {
	chk := Check{Kind: "egress", What: c.Spec.ID + " cluster egress IPs"}
	rule := clientRule{ok: func(netip.Addr) bool { return false }, want: "one of " + c.Spec.ID + "'s cluster egress IPs (unknown)"}
	st, err := fetchStats(ctx, l.Topo.NS(c.Gateway.NS))
	switch {
	case err != nil:
		chk.Detail = "gateway /status: " + err.Error()
		return rule, chk
	case st.Globalnet == nil || len(st.Globalnet.ClusterEgressIPs) == 0:
		chk.Detail = "the gateway's /status shows no Globalnet cluster egress IPs"
		return rule, chk
	}
	ips := st.Globalnet.ClusterEgressIPs
	rule = clientRule{
		ok:   func(a netip.Addr) bool { return slices.Contains(ips, a) },
		want: fmt.Sprintf("one of %s's cluster egress IPs %s–%s", c.Spec.ID, ips[0], ips[len(ips)-1]),
	}
	chk.OK = true
	for _, a := range ips {
		if !c.Spec.GlobalCIDR.Contains(a) {
			chk.OK = false
		}
	}
	chk.Detail = fmt.Sprintf("%d addresses %s–%s in %s (gateway /status)", len(ips), ips[0], ips[len(ips)-1], c.Spec.GlobalCIDR)
	if !chk.OK {
		chk.Detail += "; not all inside the global CIDR"
	}
	return rule, chk
}

// fetchStats returns a gateway's /status.
func fetchStats(ctx context.Context, gw *topo.NS) (gateway.Stats, error) {
	var st gateway.Stats
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+DebugAddress+"/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := gw.HTTPClient().Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("decode /status: %w", err)
	}
	return st, nil
}
