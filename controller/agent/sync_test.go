package agent

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/snorkel-net/snorkel/gateway"
)

// testPassiveFollowsTheActive starts two more gateways in c2 under
// Globalnet: both follow the active gateway's connection tracking at its
// private IP, and when it stops, the one left passive follows the new
// active gateway, which serves on its own private IP.
func testPassiveFollowsTheActive(t *testing.T, e *env) {
	active := e.active["g2"]
	key := active.cfg.Member.PSK
	if len(key) < 16 {
		t.Fatalf("c2's clusterset PSK is %d bytes; the sync needs 16", len(key))
	}
	serves := func(r *runningAgent) (bool, string) {
		s := r.dp.lastSpec()
		want := netip.AddrPortFrom(netip.MustParseAddr(r.cfg.PrivateIP), gateway.DefaultSyncPort)
		if s == nil || s.Sync == nil || s.Sync.Listen != want || string(s.Sync.Key) != key || len(s.Remotes) == 0 {
			return false, fmt.Sprintf("%s's spec: %+v", r.cfg.Identity, s)
		}
		return true, ""
	}
	follows := func(r, of *runningAgent) func() (bool, string) {
		return func() (bool, string) {
			s := r.dp.lastSpec()
			want := netip.AddrPortFrom(netip.MustParseAddr(of.cfg.PrivateIP), gateway.DefaultSyncPort)
			if r.Active() || s == nil || s.Sync == nil || s.Sync.Follow != want || s.Sync.Listen.IsValid() || string(s.Sync.Key) != key || len(s.Remotes) != 0 {
				return false, fmt.Sprintf("%s (active %v) last applied %+v; want it to follow %s", r.cfg.Identity, r.Active(), s, want)
			}
			return true, ""
		}
	}
	eventually(t, settle, "the active gateway serves the sync", func() (bool, string) { return serves(active) })
	s1 := start(t, e, e.c2, active.cfg.Member, "gw-g2-s1", "127.0.0.25", "")
	s2 := start(t, e, e.c2, active.cfg.Member, "gw-g2-s2", "127.0.0.26", "")
	eventually(t, settle, "gw-g2-s1 follows the active gateway", follows(s1, active))
	eventually(t, settle, "gw-g2-s2 follows the active gateway", follows(s2, active))

	active.halt()
	var next, left *runningAgent
	eventually(t, settle, "a standby takes over", func() (bool, string) {
		switch {
		case s1.Active() && !s2.Active():
			next, left = s1, s2
		case s2.Active() && !s1.Active():
			next, left = s2, s1
		default:
			return false, fmt.Sprintf("gw-g2-s1 active %v, gw-g2-s2 active %v", s1.Active(), s2.Active())
		}
		return true, ""
	})
	eventually(t, settle, "the new active gateway serves the sync", func() (bool, string) { return serves(next) })
	eventually(t, settle, "the gateway left passive follows the new active one", follows(left, next))
	e.active["g2"] = next
}
