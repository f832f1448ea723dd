package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
)

// TestMetricsAndDebugHandlersSplitTheirPaths: the metrics handler listens
// on the node's address, so it must not answer with the gateway's state; the
// debug handler must, and neither serves the profiler (the command mounts it
// only when asked).
func TestMetricsAndDebugHandlersSplitTheirPaths(t *testing.T) {
	c1, _ := startPair(t, transport.VXLAN, []netip.Addr{pod1}, []netip.Addr{pod2})
	metrics := httptest.NewServer(c1.gw.MetricsHandler())
	defer metrics.Close()
	debug := httptest.NewServer(c1.gw.DebugHandler())
	defer debug.Close()

	// served is what a path must answer with on a listener: a status and
	// a piece of the body that only its own handler writes.
	type served struct {
		code int
		body string
	}
	notFound := served{http.StatusNotFound, "404 page not found"}
	for _, tc := range []struct {
		path           string
		metrics, debug served
	}{
		{"/metrics", served{http.StatusOK, "submariner_connections"}, notFound},
		{"/healthz", served{http.StatusOK, "ok"}, notFound},
		{"/status", notFound, served{http.StatusOK, `"cluster": "c1"`}},
		// Globalnet is off in this pair: the debug handler's own 404 says so.
		{"/flows", notFound, served{http.StatusNotFound, "Globalnet is off"}},
		{"/debug/pprof/", notFound, notFound},
		{"/debug/pprof/goroutine?debug=2", notFound, notFound},
	} {
		for _, l := range []struct {
			name string
			url  string
			want served
		}{{"metrics", metrics.URL, tc.metrics}, {"debug", debug.URL, tc.debug}} {
			code, body := get(t, l.url+tc.path)
			if code != l.want.code || !strings.Contains(body, l.want.body) {
				t.Errorf("%s handler, GET %s: %d %.200q; want %d with %q", l.name, tc.path, code, body, l.want.code, l.want.body)
			}
		}
	}
}

// TestRunnerHandlersWithoutAGateway: before a gateway runs, both of the
// Runner's handlers say so rather than answer 404, which would read as
// a listener that serves nothing there.
func TestRunnerHandlersWithoutAGateway(t *testing.T) {
	r := gateway.NewRunner(nil)
	defer r.Close()
	for name, h := range map[string]http.Handler{"metrics": r.MetricsHandler(), "debug": r.DebugHandler()} {
		srv := httptest.NewServer(h)
		code, body := get(t, srv.URL+"/status")
		srv.Close()
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "no gateway is running") {
			t.Errorf("%s handler of an idle Runner: %d %q; want 503 saying no gateway is running", name, code, body)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
