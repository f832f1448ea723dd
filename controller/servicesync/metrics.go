package servicesync

import (
	"github.com/prometheus/client_golang/prometheus"
)

// op is a write the Syncer made to a ServiceImport, named as Submariner's
// resource syncer names it in its metrics' operation label.
type op string

const (
	opCreate op = "create"
	opUpdate op = "update"
	opDelete op = "delete"
)

// metrics counts the Syncer's ServiceImport writes under the names,
// labels and values Lighthouse's agent exports them with, so that
// dashboards built for Submariner read them unchanged: gauges that only
// grow, one child per operation. Lighthouse's "Local ServiceImport"
// syncer counts a cluster's exports written to the broker, its "Remote
// ServiceImport" syncer the imports written into the member
// (pkg/agent/controller/service_import.go; admiral's resource syncer
// labels them direction, operation and syncer_name).
type metrics struct {
	exports, imports *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	labels := []string{"direction", "operation", "syncer_name"}
	m := &metrics{
		exports: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "submariner_service_export",
			Help: "Count of exported services",
		}, labels),
		imports: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "submariner_service_import",
			Help: "Count of imported services",
		}, labels),
	}
	if reg != nil {
		// The agent makes a Syncer per term of its leadership, all counting
		// into the same series.
		m.exports = register(reg, m.exports)
		m.imports = register(reg, m.imports)
	}
	return m
}

// register registers v with reg, or returns the vector registered before
// under the same name.
func register(reg prometheus.Registerer, v *prometheus.GaugeVec) *prometheus.GaugeVec {
	if err := reg.Register(v); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if prev, ok := are.ExistingCollector.(*prometheus.GaugeVec); ok {
				return prev
			}
		}
		panic(err)
	}
	return v
}

// exported counts a write of this cluster's ServiceImport on the broker.
func (m *metrics) exported(o op) {
	if o != "" {
		m.exports.WithLabelValues("localToRemote", string(o), "Local ServiceImport").Inc()
	}
}

// imported counts a write of a merged ServiceImport in the member.
func (m *metrics) imported(o op) {
	if o != "" {
		m.imports.WithLabelValues("none", string(o), "Remote ServiceImport").Inc()
	}
}
