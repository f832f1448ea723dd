package dnsd

import (
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// Query types and response codes the query counter tells apart; any other
// type counts as "other".
var (
	countedTypes  = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT, dns.TypeSOA}
	countedRcodes = []int{dns.RcodeSuccess, dns.RcodeFormatError, dns.RcodeServerFailure,
		dns.RcodeNameError, dns.RcodeNotImplemented, dns.RcodeRefused, dns.RcodeBadVers}
)

// metrics counts queries. The counters of every type and rcode exist from
// the start and are picked by index, so that counting takes no lookup by
// label; Lighthouse's per-destination gauge is resolved once per address
// of a table and cached in it.
type metrics struct {
	queries   [][]prometheus.Counter // [type][rcode], the last type "other"
	truncated prometheus.Counter
	discovery *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, store *Store) *metrics {
	queries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "snorkel_dnsd_queries_total",
		Help: "DNS queries answered, by query type and response code.",
	}, []string{"type", "rcode"})
	m := &metrics{
		truncated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "snorkel_dnsd_truncated_total",
			Help: "Answers truncated to fit UDP (the client asks again over TCP).",
		}),
		// Lighthouse's name, labels and type (a gauge that only grows), so
		// that existing dashboards read it unchanged.
		discovery: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "submariner_service_discovery_query",
			Help: "Addresses returned by DNS queries, by source cluster and destination cluster, service and address.",
		}, []string{"source_cluster", "destination_cluster", "destination_service_name", "destination_service_namespace", "destination_service_ip"}),
	}
	types := make([]string, 0, len(countedTypes)+1)
	for _, t := range countedTypes {
		types = append(types, dns.TypeToString[t])
	}
	types = append(types, "other")
	for _, t := range types {
		row := make([]prometheus.Counter, len(countedRcodes))
		for j, rc := range countedRcodes {
			row[j] = queries.WithLabelValues(t, dns.RcodeToString[rc])
		}
		m.queries = append(m.queries, row)
	}
	services := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "snorkel_dnsd_services",
		Help: "Services dnsd answers for.",
	}, func() float64 { return float64(store.Services()) })
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "snorkel_dnsd_ready",
		Help: "1 once dnsd has its services, 0 while it answers SERVFAIL waiting for them.",
	}, func() float64 {
		if store.Ready() {
			return 1
		}
		return 0
	})
	if reg != nil {
		reg.MustRegister(queries, m.truncated, m.discovery, services, ready)
	}
	return m
}

// count records one answer.
func (m *metrics) count(rp *reply, r *dns.Msg) {
	ti := len(countedTypes)
	if len(r.Question) > 0 {
		for i, t := range countedTypes {
			if r.Question[0].Qtype == t {
				ti = i
				break
			}
		}
	}
	for j, rc := range countedRcodes {
		if rp.msg.Rcode == rc {
			m.queries[ti][j].Inc()
			break
		}
	}
	if rp.msg.Truncated {
		m.truncated.Inc()
	}
	for _, a := range rp.addrs {
		g := a.gauge.Load()
		if g == nil {
			gv := m.discovery.WithLabelValues(a.svc.localID, a.cluster, a.svc.name, a.svc.namespace, a.ip.String())
			g = &gv
			a.gauge.Store(g)
		}
		(*g).Inc()
	}
}
