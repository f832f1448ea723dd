package dnsd

import (
	"sort"
	"strings"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// gather reads reg's metrics of the given names as
// "name{label=value,...}" → value, labels sorted.
func gather(t *testing.T, reg *prometheus.Registry, names ...string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if !contains(names, f.GetName()) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newServer(t, Config{Registerer: reg}, tutorial())
	for range 4 {
		ask(t, s, "whereami-cs"+zone, dns.TypeA, qopt{})
	}
	ask(t, s, "whereami-ss"+zone, dns.TypeA, qopt{})
	ask(t, s, "nope"+zone, dns.TypeAAAA, qopt{})
	ask(t, s, "example.com.", dns.TypeMX, qopt{})
	ask(t, s, "whereami-cs"+zone, dns.TypeMX, qopt{})

	queries := gather(t, reg, "snorkel_dnsd_queries_total")
	want := map[string]float64{
		"snorkel_dnsd_queries_total{rcode=NOERROR,type=A}":     5,
		"snorkel_dnsd_queries_total{rcode=NXDOMAIN,type=AAAA}": 1,
		"snorkel_dnsd_queries_total{rcode=REFUSED,type=other}": 1,
		"snorkel_dnsd_queries_total{rcode=NOTIMP,type=other}":  1,
	}
	if len(queries) != 6*len(countedRcodes) {
		t.Errorf("%d query counters, want one per type and rcode from the start", len(queries))
	}
	for k, v := range queries {
		if v != want[k] {
			t.Errorf("%s = %v, want %v", k, v, want[k])
		}
	}

	got := gather(t, reg, "submariner_service_discovery_query")
	want = map[string]float64{
		"submariner_service_discovery_query{destination_cluster=c2,destination_service_ip=10.99.0.10,destination_service_name=whereami-cs,destination_service_namespace=sample,source_cluster=c1}": 2,
		"submariner_service_discovery_query{destination_cluster=c3,destination_service_ip=10.98.0.10,destination_service_name=whereami-cs,destination_service_namespace=sample,source_cluster=c1}": 2,
		"submariner_service_discovery_query{destination_cluster=c2,destination_service_ip=10.9.0.12,destination_service_name=whereami-ss,destination_service_namespace=sample,source_cluster=c1}":  1,
		"submariner_service_discovery_query{destination_cluster=c2,destination_service_ip=10.9.0.13,destination_service_name=whereami-ss,destination_service_namespace=sample,source_cluster=c1}":  1,
		"submariner_service_discovery_query{destination_cluster=c3,destination_service_ip=10.10.0.5,destination_service_name=whereami-ss,destination_service_namespace=sample,source_cluster=c1}":  1,
	}
	if len(got) != len(want) {
		t.Errorf("Lighthouse's query gauge has %d series, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}

	got = gather(t, reg, "snorkel_dnsd_services", "snorkel_dnsd_ready")
	if got["snorkel_dnsd_services{}"] != 11 || got["snorkel_dnsd_ready{}"] != 1 {
		t.Errorf("store gauges %v, want 11 services and ready 1", got)
	}
}
