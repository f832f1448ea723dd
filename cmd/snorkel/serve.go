package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"golang.org/x/net/netutil"
)

// httpLimits bound what clients can hold of one HTTP listener: without
// them, connections that send half a request stay open for as long as the
// client likes, each with a file descriptor and buffers, until the process
// runs out of either.
type httpLimits struct {
	readHeader time.Duration
	read       time.Duration
	write      time.Duration
	idle       time.Duration
	// maxConns caps the open connections; more wait in the kernel's
	// backlog until one closes.
	maxConns int
}

var (
	// metricsLimits suit scrapes and probes: short GETs from a Prometheus
	// or two and the kubelet. The idle timeout is Go's client default, so
	// a scraper's kept-alive connection is reused rather than cut.
	metricsLimits = httpLimits{readHeader: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second, idle: 90 * time.Second, maxConns: 32}
	// debugLimits suit an operator's tools. A /flows of a busy gateway is
	// megabytes; /debug/pprof/profile and /trace stream for their
	// seconds=, but pprof moves the write deadline on by those seconds
	// itself, and maxProfileSeconds bounds them.
	debugLimits = httpLimits{readHeader: 5 * time.Second, read: 10 * time.Second, write: time.Minute, idle: 90 * time.Second, maxConns: 8}
)

// serveHTTP serves h on ln within lim until the returned server is closed;
// its Addr is ln's. Every HTTP listener of the binary is served by it.
func serveHTTP(ln net.Listener, h http.Handler, lim httpLimits) *http.Server {
	srv := &http.Server{
		Addr:              ln.Addr().String(),
		Handler:           h,
		ReadHeaderTimeout: lim.readHeader,
		ReadTimeout:       lim.read,
		WriteTimeout:      lim.write,
		IdleTimeout:       lim.idle,
	}
	go srv.Serve(netutil.LimitListener(ln, lim.maxConns))
	return srv
}

// listenHTTP listens on addr and serves h there; setting names the flag or
// field that gave addr, for the error.
func listenHTTP(setting, addr string, h http.Handler, lim httpLimits) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot listen on %s (give a free host:port, or empty for none): %w", setting, addr, err)
	}
	return serveHTTP(ln, h, lim), nil
}

// defaultDebugAddress is loopback because /status and /flows name pod
// addresses, their global addresses and the remote endpoints, and the
// profiler shows the process's stacks and can be made to spend CPU, with no
// authentication. The agent runs in the host network: on the node's
// loopback only the node's own processes reach them (kubectl port-forward
// to the agent's pod, kubectl exec, or a shell on the node).
const defaultDebugAddress = "127.0.0.1:9899"

// debugFlags are the flags of the debug listener, which the gateway and the
// agent share.
type debugFlags struct {
	address *string
	pprof   *bool
}

func addDebugFlags(fs *flag.FlagSet) debugFlags {
	return debugFlags{
		address: fs.String("debug-address", defaultDebugAddress, "where the gateway serves /status and /flows (and /debug/pprof/ with --pprof), without authentication: keep it on loopback; empty for none"),
		pprof:   fs.Bool("pprof", false, "also serve the Go profiler under /debug/pprof/ on --debug-address"),
	}
}

// serve starts the debug listener for state, the gateway's debug handler,
// or returns nil if --debug-address is empty.
func (d debugFlags) serve(state http.Handler) (*http.Server, error) {
	if *d.address == "" {
		if *d.pprof {
			return nil, fmt.Errorf("--pprof needs --debug-address, where the profiler is served: drop --debug-address= or give one like %s", defaultDebugAddress)
		}
		return nil, nil
	}
	return listenHTTP("--debug-address", *d.address, debugHandler(state, *d.pprof), debugLimits)
}

// debugHandler is state, and the profiler under /debug/pprof/ if withPprof.
func debugHandler(state http.Handler, withPprof bool) http.Handler {
	if !withPprof {
		return state
	}
	mux := http.NewServeMux()
	mux.Handle("/", state)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", capSeconds(pprof.Profile))
	mux.HandleFunc("/debug/pprof/trace", capSeconds(pprof.Trace))
	return mux
}

// maxProfileSeconds caps seconds= of a CPU profile or an execution trace:
// pprof extends the write deadline by whatever the client asks, and holds
// the process's one CPU profiler or tracer for that long.
const maxProfileSeconds = 300

// capSeconds refuses a seconds= over maxProfileSeconds before h starts.
func capSeconds(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s := r.FormValue("seconds"); s != "" {
			// !(≤) also refuses NaN.
			if sec, err := strconv.ParseFloat(s, 64); err == nil && !(sec <= maxProfileSeconds) {
				http.Error(w, fmt.Sprintf("seconds=%s is too long: ask for at most %d", s, maxProfileSeconds), http.StatusBadRequest)
				return
			}
		}
		h(w, r)
	}
}
