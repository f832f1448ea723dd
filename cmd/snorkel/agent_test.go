package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snorkel-net/snorkel/gateway"
)

// TestAgentMetricsServeTheRegistryAndAnswerHealthWhilePassive checks the
// agent's metrics listener: /metrics is the agent's registry, which holds
// the in-process gateway's metrics as well, and /healthz answers while no
// gateway runs, as on a passive gateway node.
func TestAgentMetricsServeTheRegistryAndAnswerHealthWhilePassive(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := gateway.NewRunner(nil)
	defer r.Close()
	reg.MustRegister(r)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "submariner_service_export", Help: "test"})
	reg.MustRegister(g)
	srv := httptest.NewServer(agentMetrics(reg))
	defer srv.Close()
	for path, want := range map[string]string{"/metrics": "submariner_service_export 0", "/healthz": "ok"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %q, want 200 and %q", path, resp.StatusCode, b, want)
		}
	}
}
