package gateway_test

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
)

// healthOn gives both gateways of a pair their health addresses and fast
// probes: every 100ms, in error after 3 lost in a row.
func healthOn(addr1, addr2 string) func(cfg1, cfg2 *gateway.Config) {
	return func(cfg1, cfg2 *gateway.Config) {
		hc := func() *gateway.HealthCheck { return &gateway.HealthCheck{Interval: "100ms", MaxPacketLossCount: 3} }
		cfg1.TUN.Address, cfg1.HealthCheck, cfg1.Remotes[0].HealthCheckIP = addr1, hc(), addr2
		cfg2.TUN.Address, cfg2.HealthCheck, cfg2.Remotes[0].HealthCheckIP = addr2, hc(), addr1
	}
}

// waitRemote polls c's view of its only remote until ok holds, failing t
// after settle.
func waitRemote(t *testing.T, c *cluster, what string, ok func(gateway.RemoteStats) bool) gateway.RemoteStats {
	t.Helper()
	deadline := time.Now().Add(settle)
	for {
		r := c.gw.Stats().Remotes[0]
		if ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not %s within %s: %+v, health %+v", c.cfg.Cluster.ID, what, settle, r, r.Health)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// measured holds once probes have been answered and timed.
func measured(r gateway.RemoteStats) bool {
	return r.Status == "connected" && r.Health != nil && r.Health.Received >= 2 && r.Health.RTT != nil
}

func TestInProcessHealthProbes(t *testing.T) {
	for _, tr := range transport.Kinds {
		t.Run(tr, func(t *testing.T) {
			// The health addresses lie outside both clusters' CIDRs:
			// WireGuard's cryptokey routing must allow them too.
			c1, c2 := startPairWith(t, tr, []netip.Addr{pod1}, []netip.Addr{pod2}, healthOn("100.64.0.1", "100.64.0.2"))
			for _, c := range []*cluster{c1, c2} {
				r := waitRemote(t, c, "connected with a measured RTT", measured)
				if r.RxPackets != 0 || r.TxPackets != 0 {
					t.Errorf("%s counted traffic (rx %d, tx %d) where only probes flowed: probes must not pass the device", c.cfg.Cluster.ID, r.RxPackets, r.TxPackets)
				}
				if rtt := r.Health.RTT; rtt.Min <= 0 || rtt.Min > rtt.Average || rtt.Average > rtt.Max || rtt.Last < rtt.Min || rtt.Last > rtt.Max {
					t.Errorf("%s: RTT %+v is not ordered min ≤ average, last ≤ max", c.cfg.Cluster.ID, rtt)
				}
			}

			srv := httptest.NewServer(c1.gw.MetricsHandler())
			defer srv.Close()
			dbg := httptest.NewServer(c1.gw.DebugHandler())
			defer dbg.Close()
			// On a loaded machine a reply can miss its 100ms window and
			// three such misses in a row put the remote in error until the
			// next reply: wait for a page that says connected again.
			var metrics string
			for deadline := time.Now().Add(settle); ; time.Sleep(20 * time.Millisecond) {
				metrics = getText(t, srv.URL+"/metrics")
				if strings.Contains(metrics, `status="connected"} 1`) || time.Now().After(deadline) {
					break
				}
			}
			for _, want := range []string{
				`submariner_connection_latency_seconds{cable_driver="` + tr + `",local_cluster="c1"`,
				`submariner_connection_established_timestamp{cable_driver="` + tr + `",local_cluster="c1"`,
				`snorkel_connection_rtt_seconds{remote_cluster="c2",stat="average"}`,
				`snorkel_health_probes_sent_total{remote_cluster="c2"}`,
				`snorkel_health_probes_received_total{remote_cluster="c2"}`,
				`remote_cluster="c2",remote_endpoint_ip="127.0.0.1:`,
			} {
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %s:\n%s", want, metrics)
				}
			}
			if !strings.Contains(metrics, `status="connected"} 1`) {
				t.Errorf("submariner_connections does not say connected:\n%s", metrics)
			}
			var st gateway.Stats
			getJSON(t, dbg.URL+"/status", &st)
			if h := st.Remotes[0].Health; h == nil || h.RTT == nil || h.RTT.Average <= 0 || h.HealthCheckIP != netip.MustParseAddr("100.64.0.2") {
				t.Errorf("/status health %+v, want the RTT of probes to 100.64.0.2", h)
			}

			c2.gw.Close()
			r := waitRemote(t, c1, "in error", func(r gateway.RemoteStats) bool { return r.Status == "error" })
			if want := "no reply to the last 3 health probes to 100.64.0.2"; r.StatusMessage != want {
				t.Errorf("status message %q, want %q", r.StatusMessage, want)
			}
		})
	}
}

func TestInProcessHealthProbesWithGlobalnet(t *testing.T) {
	// The clusters overlap and so do their gateways' addresses: the probes
	// are told apart by the tunnel they come through, and never translated.
	c1, c2 := startGlobalnetPairWith(t, healthOn("10.7.255.254", "10.7.255.254"))
	for _, c := range []*cluster{c1, c2} {
		waitRemote(t, c, "connected with a measured RTT", measured)
		if nat := c.gw.Stats().Globalnet.NAT; nat.Created != 0 || nat.Flows != 0 || len(nat.Drops) != 0 {
			t.Errorf("%s: the NAT engine saw the probes: %+v", c.cfg.Cluster.ID, nat)
		}
	}
	c2.gw.Close()
	r := waitRemote(t, c1, "in error", func(r gateway.RemoteStats) bool { return r.Status == "error" })
	if !strings.Contains(r.StatusMessage, "10.7.255.254") {
		t.Errorf("status message %q does not name the probed address", r.StatusMessage)
	}
}
