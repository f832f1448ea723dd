package gateway

import (
	"encoding/json"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/transport"
)

// Submariner's cable labels, kept so that existing dashboards work.
var cableLabels = []string{"cable_driver", "local_cluster", "local_hostname", "local_endpoint_ip", "remote_cluster", "remote_hostname", "remote_endpoint_ip"}

var (
	descRxBytes = prometheus.NewDesc("submariner_gateway_rx_bytes", "Count of bytes received (by cable driver and cable)", cableLabels, nil)
	descTxBytes = prometheus.NewDesc("submariner_gateway_tx_bytes", "Count of bytes transmitted (by cable driver and cable)", cableLabels, nil)
	descConns   = prometheus.NewDesc("submariner_connections", "The number of connections and their status", append(cableLabels[:len(cableLabels):len(cableLabels)], "status"), nil)
	descEstab   = prometheus.NewDesc("submariner_connection_established_timestamp", "Timestamp of last successful connection established (by cable driver and cable)", cableLabels, nil)
	descRxPkts  = prometheus.NewDesc("snorkel_gateway_rx_packets_total", "Packets received from a remote cluster and written to the device.", []string{"remote_cluster"}, nil)
	descTxPkts  = prometheus.NewDesc("snorkel_gateway_tx_packets_total", "Packets read from the device and sent to a remote cluster.", []string{"remote_cluster"}, nil)
	descDrops   = prometheus.NewDesc("snorkel_gateway_drops_total", "Packets the gateway discarded, by remote cluster (empty if none) and reason.", []string{"remote_cluster", "reason"}, nil)
	descTrDrops = prometheus.NewDesc("snorkel_transport_drops_total", "Packets the transport discarded, by remote cluster (empty if unknown) and reason.", []string{"remote_cluster", "reason"}, nil)

	descLatency     = prometheus.NewDesc("submariner_connection_latency_seconds", "Round-trip time of the last health probe answered (by cable driver and cable).", cableLabels, nil)
	descRTT         = prometheus.NewDesc("snorkel_connection_rtt_seconds", "Round-trip times of the last 64 health probes answered, by remote cluster and statistic: last, min, average, max, stddev.", []string{"remote_cluster", "stat"}, nil)
	descProbesSent  = prometheus.NewDesc("snorkel_health_probes_sent_total", "Health probes sent to a remote gateway.", []string{"remote_cluster"}, nil)
	descProbesRecvd = prometheus.NewDesc("snorkel_health_probes_received_total", "Health probes a remote gateway answered in time.", []string{"remote_cluster"}, nil)
	descProbesLost  = prometheus.NewDesc("snorkel_health_probes_lost_total", "Health probes unanswered when the next was due.", []string{"remote_cluster"}, nil)

	descNATFlows     = prometheus.NewDesc("snorkel_nat_flows", "Globalnet connection-tracking entries now.", nil, nil)
	descNATFragments = prometheus.NewDesc("snorkel_nat_fragments", "Globalnet first fragments whose followers are awaited now.", nil, nil)
	descNATCreated   = prometheus.NewDesc("snorkel_nat_flows_created_total", "Globalnet flows created.", nil, nil)
	descNATRemoved   = prometheus.NewDesc("snorkel_nat_flows_removed_total", "Globalnet flows removed, by cause: expired (idle), evicted (to make room; see snorkel_nat_evictions_total), retired (their rule went).", []string{"cause"}, nil)
	descNATDrops     = prometheus.NewDesc("snorkel_nat_drops_total", "Packets Globalnet refused to translate, by reason.", []string{"reason"}, nil)
	descCSConns      = prometheus.NewDesc("snorkel_clusterset_ip_connections", "Connections to clusterset IPs tracked now.", nil, nil)
	descCSCreated    = prometheus.NewDesc("snorkel_clusterset_ip_connections_created_total", "Connections to clusterset IPs given a backend, by backend: local (this cluster, through the SNAT address) or remote.", []string{"backend"}, nil)
	descCSRemoved    = prometheus.NewDesc("snorkel_clusterset_ip_connections_removed_total", "Connections to clusterset IPs removed, by cause: expired (idle), retired (their VIP, port or backend went).", []string{"cause"}, nil)
	descCSXlated     = prometheus.NewDesc("snorkel_clusterset_ip_translations_total", "Packets translated to or from a clusterset IP, both directions.", nil, nil)
	descCSDrops      = prometheus.NewDesc("snorkel_clusterset_ip_drops_total", "Packets to clusterset IPs, or to the SNAT address, refused, by reason.", []string{"reason"}, nil)
	descSyncSent     = prometheus.NewDesc("snorkel_sync_records_sent_total", "Connection-tracking records the active gateway sent to the passive one.", nil, nil)
	descSyncRecvd    = prometheus.NewDesc("snorkel_sync_records_received_total", "Connection-tracking records the passive gateway received from the active one.", nil, nil)
	descSyncResyncs  = prometheus.NewDesc("snorkel_sync_resyncs_total", "Full dumps of the connection-tracking table sent (active) or received (passive): one per connection, and one per journal overflow.", nil, nil)
	descSyncOverflow = prometheus.NewDesc("snorkel_sync_journal_overflows_total", "Times the active gateway's sync journal filled up while a passive gateway was connected, forcing a resync.", nil, nil)
	descSyncReplica  = prometheus.NewDesc("snorkel_sync_replica_flows", "Flows the passive gateway holds to take over.", nil, nil)
	descSyncLag      = prometheus.NewDesc("snorkel_sync_lag_seconds", "Time from a flow event on the active gateway to its record reaching the passive one, for the last record received.", nil, nil)
	descSyncConn     = prometheus.NewDesc("snorkel_sync_connected", "1 while the sync connection between the gateways is up.", []string{"role"}, nil)
	descNATEvictions = prometheus.NewDesc("snorkel_nat_evictions_total", "Globalnet flows and pending first fragments removed to make room, by reason: unreplied, fair_share, fragment_source_limit, fragment_table_full.", []string{"reason"}, nil)
)

// natCounter is a translator that counts what it does: the NAT engine.
type natCounter interface {
	Stats() natengine.Stats
}

// flowLister is a translator that can list its connection-tracking table.
type flowLister interface {
	Flows() []natengine.Flow
}

// Describe implements prometheus.Collector.
func (g *Gateway) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRxBytes, descTxBytes, descConns, descEstab, descRxPkts, descTxPkts, descDrops, descTrDrops,
		descLatency, descRTT, descProbesSent, descProbesRecvd, descProbesLost,
		descNATFlows, descNATFragments, descNATCreated, descNATRemoved, descNATDrops, descNATEvictions,
		descCSConns, descCSCreated, descCSRemoved, descCSXlated, descCSDrops,
		descSyncSent, descSyncRecvd, descSyncResyncs, descSyncOverflow, descSyncReplica, descSyncLag, descSyncConn} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads the counters at scrape
// time, so the data path never touches Prometheus.
func (g *Gateway) Collect(ch chan<- prometheus.Metric) {
	st := g.Stats()
	host, _ := os.Hostname()
	for _, r := range st.Remotes {
		ep := r.Endpoint
		lbl := []string{st.Transport, st.Cluster, host, "", r.Cluster, "", ep}
		ch <- prometheus.MustNewConstMetric(descRxBytes, prometheus.GaugeValue, float64(r.RxBytes), lbl...)
		ch <- prometheus.MustNewConstMetric(descTxBytes, prometheus.GaugeValue, float64(r.TxBytes), lbl...)
		ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, 1, append(lbl, r.Status)...)
		if r.Established != nil {
			ch <- prometheus.MustNewConstMetric(descEstab, prometheus.GaugeValue, float64(r.Established.Unix()), lbl...)
		}
		ch <- prometheus.MustNewConstMetric(descRxPkts, prometheus.CounterValue, float64(r.RxPackets), r.Cluster)
		ch <- prometheus.MustNewConstMetric(descTxPkts, prometheus.CounterValue, float64(r.TxPackets), r.Cluster)
		for reason, n := range r.Drops {
			ch <- prometheus.MustNewConstMetric(descDrops, prometheus.CounterValue, float64(n), r.Cluster, reason)
		}
		if h := r.Health; h != nil {
			collectHealth(ch, r.Cluster, h, lbl)
		}
	}
	for reason, n := range st.Unattributed {
		ch <- prometheus.MustNewConstMetric(descDrops, prometheus.CounterValue, float64(n), "", reason)
	}
	for _, d := range st.TransportDrops {
		ch <- prometheus.MustNewConstMetric(descTrDrops, prometheus.CounterValue, float64(d.Count), d.Cluster, d.Reason)
	}
	if st.Globalnet != nil && st.Globalnet.NAT != nil {
		n := st.Globalnet.NAT
		ch <- prometheus.MustNewConstMetric(descNATFlows, prometheus.GaugeValue, float64(n.Flows))
		ch <- prometheus.MustNewConstMetric(descNATFragments, prometheus.GaugeValue, float64(n.Fragments))
		ch <- prometheus.MustNewConstMetric(descNATCreated, prometheus.CounterValue, float64(n.Created))
		ch <- prometheus.MustNewConstMetric(descNATRemoved, prometheus.CounterValue, float64(n.Expired), "expired")
		ch <- prometheus.MustNewConstMetric(descNATRemoved, prometheus.CounterValue, float64(n.Evicted), "evicted")
		ch <- prometheus.MustNewConstMetric(descNATRemoved, prometheus.CounterValue, float64(n.Retired), "retired")
		for reason, v := range n.Drops {
			ch <- prometheus.MustNewConstMetric(descNATDrops, prometheus.CounterValue, float64(v), reason)
		}
		for reason, v := range n.Evictions {
			ch <- prometheus.MustNewConstMetric(descNATEvictions, prometheus.CounterValue, float64(v), reason)
		}
	}
	if st.Sync != nil {
		collectSync(ch, st.Sync)
	}
	if c := st.ClustersetIP; c != nil {
		ch <- prometheus.MustNewConstMetric(descCSConns, prometheus.GaugeValue, float64(c.Connections))
		ch <- prometheus.MustNewConstMetric(descCSCreated, prometheus.CounterValue, float64(c.LocalFlows), "local")
		ch <- prometheus.MustNewConstMetric(descCSCreated, prometheus.CounterValue, float64(c.RemoteFlows), "remote")
		ch <- prometheus.MustNewConstMetric(descCSRemoved, prometheus.CounterValue, float64(c.Expired), "expired")
		ch <- prometheus.MustNewConstMetric(descCSRemoved, prometheus.CounterValue, float64(c.Retired), "retired")
		ch <- prometheus.MustNewConstMetric(descCSXlated, prometheus.CounterValue, float64(c.Translated))
		for reason, v := range c.Drops {
			ch <- prometheus.MustNewConstMetric(descCSDrops, prometheus.CounterValue, float64(v), reason)
		}
	}
}

// collectSync reports a sync end's counters.
func collectSync(ch chan<- prometheus.Metric, s *SyncStatus) {
	up := 0.0
	if s.Connected {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(descSyncConn, prometheus.GaugeValue, up, s.Role)
	ch <- prometheus.MustNewConstMetric(descSyncResyncs, prometheus.CounterValue, float64(s.Resyncs))
	if s.Role == "active" {
		ch <- prometheus.MustNewConstMetric(descSyncSent, prometheus.CounterValue, float64(s.RecordsSent))
		ch <- prometheus.MustNewConstMetric(descSyncOverflow, prometheus.CounterValue, float64(s.Overflows))
		return
	}
	ch <- prometheus.MustNewConstMetric(descSyncRecvd, prometheus.CounterValue, float64(s.RecordsReceived))
	ch <- prometheus.MustNewConstMetric(descSyncReplica, prometheus.GaugeValue, float64(s.Replica))
	ch <- prometheus.MustNewConstMetric(descSyncLag, prometheus.GaugeValue, s.LastLagSeconds)
}

// collectHealth reports the probes to remote cluster; lbl are its cable
// labels.
func collectHealth(ch chan<- prometheus.Metric, cluster string, h *HealthStatus, lbl []string) {
	ch <- prometheus.MustNewConstMetric(descProbesSent, prometheus.CounterValue, float64(h.Sent), cluster)
	ch <- prometheus.MustNewConstMetric(descProbesRecvd, prometheus.CounterValue, float64(h.Received), cluster)
	ch <- prometheus.MustNewConstMetric(descProbesLost, prometheus.CounterValue, float64(h.Lost), cluster)
	rtt := h.RTT
	if rtt == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descLatency, prometheus.GaugeValue, rtt.Last.Seconds(), lbl...)
	for _, s := range []struct {
		name string
		d    time.Duration
	}{{"last", rtt.Last}, {"min", rtt.Min}, {"average", rtt.Average}, {"max", rtt.Max}, {"stddev", rtt.StdDev}} {
		ch <- prometheus.MustNewConstMetric(descRTT, prometheus.GaugeValue, s.d.Seconds(), cluster, s.name)
	}
}

// TransportDrops returns what the transport discarded, if it counts drops.
func (g *Gateway) TransportDrops() []transport.Drop {
	if dc, ok := g.tr.(transport.DropCounter); ok {
		return dc.Drops()
	}
	return nil
}

// MetricsHandler serves what a cluster's monitoring scrapes and probes:
// /metrics (Prometheus) and /healthz. It shows counters only, never an
// address or a key, so it may listen on the node's address.
func (g *Gateway) MetricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(g)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	return mux
}

// DebugHandler serves the gateway's state for its operator: /status (Stats
// as JSON) and /flows (the Globalnet connection-tracking table as JSON).
// These name pod addresses, their global addresses, endpoints and IKE SPIs,
// so they belong on a listener only the node can reach.
func (g *Gateway) DebugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(g.Stats())
	})
	mux.HandleFunc("/flows", func(w http.ResponseWriter, _ *http.Request) {
		fl, ok := g.xlate.(flowLister)
		if !ok {
			http.Error(w, "Globalnet is off on this gateway: it translates nothing and tracks no flows", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(flowStatuses(fl.Flows()))
	})
	return mux
}

// Stats returns a snapshot of the gateway's counters.
func (g *Gateway) Stats() Stats {
	rs := g.set.Load()
	st := Stats{
		Cluster:      g.spec.Cluster.ID,
		Transport:    g.spec.Transport.Kind,
		MTU:          g.mtu,
		PublicKey:    g.publicKey,
		Unattributed: g.unattributed().dropMap(),
	}
	if gs := g.globalnet.Load(); gs != nil {
		st.Globalnet = gs.status()
		if nc, ok := g.xlate.(natCounter); ok {
			st.Globalnet.NAT = natStatus(nc.Stats())
		}
	}
	st.ClustersetIP = g.clustersetStatus()
	if g.sync != nil {
		ss := g.sync.c.status("active")
		st.Sync = &ss
	}
	for _, d := range g.TransportDrops() {
		cluster := ""
		if r := rs.state(d.Peer); r != nil {
			cluster = r.id
		}
		st.TransportDrops = append(st.TransportDrops, TransportDrop{Cluster: cluster, Reason: d.Reason, Count: d.Count})
	}
	now := g.now.Load()
	ipsec := g.ipsecStatus()
	for i, slot := range rs.slots {
		r := rs.bySlot[slot]
		c := r.c
		var is *IPsecStatus
		if v, ok := ipsec[slot]; ok {
			is = &v
		}
		out := RemoteStats{
			Cluster:   r.id,
			Endpoint:  endpointString(rs.spec.remotes[i].endpoint),
			TxPackets: c.txPackets.Load(),
			TxBytes:   c.txBytes.Load(),
			RxPackets: c.rxPackets.Load(),
			RxBytes:   c.rxBytes.Load(),
			Drops:     c.dropMap(),
			Status:    connectionStatus(now, c.lastRx.Load()),
			IPsec:     is,
		}
		established := time.Unix(c.established.Load(), 0)
		if c.established.Load() == 0 {
			established = time.Time{}
		}
		if h := rs.health; h != nil && h.probers[slot] != nil {
			out.Status, out.StatusMessage, out.Health, established = h.probers[slot].snapshot()
		}
		if !established.IsZero() {
			at := established.UTC()
			out.Established = &at
		}
		st.Remotes = append(st.Remotes, out)
	}
	return st
}

// connectionStatus is the status of a remote that is not probed, in
// Submariner's words: a cable is "connected" while traffic arrives from the
// remote, "connecting" before any has.
func connectionStatus(now, lastRx int64) string {
	switch {
	case lastRx == 0:
		return statusConnecting
	case now-lastRx <= connectedWindow:
		return statusConnected
	default:
		return statusError
	}
}

// connectedWindow is how long, in seconds, a remote counts as connected after
// its last packet.
const connectedWindow = 180
