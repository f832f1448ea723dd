package globalnet

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are Globalnet's allocation gauges under the names and the cidr
// label Submariner's globalnet controller exports them with
// (pkg/globalnet/metrics/metrics.go), so that its dashboards read them
// unchanged. The worker sets them from its allocation state after every
// change, so they are exact however the state was reached: allocations
// read back on a takeover count as Submariner's restored ones do.
type metrics struct {
	available, allocated, egress, clusterEgress, ingress prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, cidr string) *metrics {
	gauge := func(name, help string) (*prometheus.GaugeVec, prometheus.Gauge) {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"cidr"})
		return v, v.WithLabelValues(cidr)
	}
	var m metrics
	var vecs [5]*prometheus.GaugeVec
	vecs[0], m.available = gauge("submariner_global_IP_availability", "Count of available global IPs per CIDR")
	vecs[1], m.allocated = gauge("submariner_global_IP_allocated", "Count of global IPs allocated for Pods/Services per CIDR")
	vecs[2], m.egress = gauge("submariner_global_egress_IP_allocated", "Count of global Egress IPs allocated for Pods/Services per CIDR")
	vecs[3], m.clusterEgress = gauge("submariner_cluster_global_egress_IP_allocated", "Count of global Egress IPs allocated for clusters per CIDR")
	vecs[4], m.ingress = gauge("submariner_global_ingress_IP_allocated", "Count of global Ingress IPs allocated for Pods/Services per CIDR")
	if reg != nil {
		for _, v := range vecs {
			reg.MustRegister(v)
		}
	}
	return &m
}

// record sets the gauges from the runner's allocation state.
func (r *runner) record() {
	var egress, clusterEgress, ingress int
	for it, st := range r.egress {
		if it.kind == kindClusterEgress {
			clusterEgress += len(st.ips)
		} else {
			egress += len(st.ips)
		}
	}
	for _, st := range r.ingress {
		if st.ip.IsValid() {
			ingress++
		}
	}
	m := r.ipam.metrics
	m.available.Set(float64(r.pool.Free()))
	m.allocated.Set(float64(egress + clusterEgress + ingress))
	m.egress.Set(float64(egress))
	m.clusterEgress.Set(float64(clusterEgress))
	m.ingress.Set(float64(ingress))
}
