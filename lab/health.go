package lab

import (
	"context"
	"fmt"
	"time"
)

// healthChecks checks that every gateway probes every remote gateway and
// gets replies: the connection is connected on its health probes, with a
// round-trip time.
func (l *Lab) healthChecks(ctx context.Context) []Check {
	var checks []Check
	for i := range l.Plan.Clusters {
		c := &l.Plan.Clusters[i]
		gw := l.Topo.NS(c.Gateway.NS)
		for _, r := range l.Plan.Remotes(c) {
			chk := Check{Kind: "health", What: arrow(c.Spec.ID+" gateway", r.Spec.ID+" gateway "+r.Gateway.NodeIP.String())}
			err := l.waitFor(ctx, "", func() error {
				st, err := fetchStats(ctx, gw)
				if err != nil {
					return err
				}
				for _, rs := range st.Remotes {
					if rs.Cluster != r.Spec.ID {
						continue
					}
					switch {
					case rs.Health == nil:
						return fmt.Errorf("%s is not probed", r.Spec.ID)
					case rs.Status != "connected" || rs.Health.RTT == nil:
						return fmt.Errorf("status %s %s, %d probes sent, %d replies", rs.Status, rs.StatusMessage, rs.Health.Sent, rs.Health.Received)
					}
					rtt, us := rs.Health.RTT, time.Microsecond
					chk.Detail = fmt.Sprintf("connected, RTT avg %v (min %v, max %v) over %d replies", rtt.Average.Round(us), rtt.Min.Round(us), rtt.Max.Round(us), rs.Health.Received)
					return nil
				}
				return fmt.Errorf("the gateway's /status has no remote %s", r.Spec.ID)
			})
			chk.OK = err == nil
			if err != nil {
				chk.Detail = err.Error()
			}
			checks = append(checks, chk)
		}
	}
	return checks
}
