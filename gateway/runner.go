package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"reflect"
	"sync"

	"github.com/snorkel-net/snorkel/natengine"
)

// Runner is a gateway that follows a changing configuration, as the agent
// feeds it from Kubernetes. Apply starts the gateway on the first
// configuration. A change to Globalnet's pools and ingress addresses alone is
// applied in place: the NAT engine swaps its rule snapshot and keeps every
// flow the new rules still give, so traffic is not disturbed. Any other change
// (a remote joining or leaving, keys, the transport) restarts the gateway:
// the TUN device, its routes and the transport's socket are made anew, and
// the guard (guard.go) follows the new remotes. The guard stays while no
// gateway runs: across a restart, and after a configuration without remotes,
// which is also what a gateway that has turned passive gets.
type Runner struct {
	log *slog.Logger

	mu  sync.Mutex
	cur *running
}

// running is one started gateway.
type running struct {
	cfg Config
	g   *Gateway
	sys *System
	// metrics and debug are g's handlers, made once: each builds its own
	// mux (and, for metrics, a Prometheus registry).
	metrics http.Handler
	debug   http.Handler
	cancel  context.CancelFunc
	done    chan error
}

// NewRunner returns a Runner that runs nothing until Apply.
func NewRunner(log *slog.Logger) *Runner {
	if log == nil {
		log = slog.Default()
	}
	return &Runner{log: log}
}

// Apply makes the running gateway match cfg. An invalid cfg is refused and
// leaves the running gateway as it was; a cfg without remotes stops it and
// leaves the guard as it was, since a passive gateway's node must not send
// the remotes' traffic in cleartext either.
func (r *Runner) Apply(ctx context.Context, cfg Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(cfg.Remotes) == 0 {
		// With no one to connect to, the gateway has nothing to do.
		r.stopLocked()
		return nil
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if r.cur != nil {
		if reflect.DeepEqual(r.cur.cfg, cfg) {
			return nil
		}
		if rulesOnly(&r.cur.cfg, &cfg) {
			if _, ok := r.cur.g.xlate.(*natengine.Engine); ok {
				s, err := cfg.build()
				if err != nil {
					return err
				}
				if err := r.cur.g.updateGlobalnet(s.globalnet); err != nil {
					return err
				}
				r.cur.cfg = cfg
				r.log.Info("globalnet rules updated", "pools", len(cfg.Globalnet.EgressPools), "ingress", len(cfg.Globalnet.Ingress))
				return nil
			}
		}
		r.stopLocked()
	}
	cur, err := r.start(cfg)
	if err != nil {
		return err
	}
	r.cur = cur
	return nil
}

// rulesOnly reports whether a and b differ only in what the NAT engine's
// rules carry: the egress pools, the ingress addresses and the cluster
// egress IPs, with the same global CIDR.
func rulesOnly(a, b *Config) bool {
	if a.Globalnet == nil || b.Globalnet == nil {
		return false
	}
	ga, gb := *a.Globalnet, *b.Globalnet
	if ga.GlobalCIDR != gb.GlobalCIDR || ga.Supernet != gb.Supernet || ga.MaxFlows != gb.MaxFlows {
		return false
	}
	ca, cb := *a, *b
	ca.Globalnet, cb.Globalnet = nil, nil
	return reflect.DeepEqual(ca, cb)
}

func (r *Runner) start(cfg Config) (*running, error) {
	g, err := New(cfg, Options{Logger: r.log})
	if err != nil {
		return nil, err
	}
	dev, sys, err := OpenTUN(&cfg, g.MTU())
	if err != nil {
		g.Close()
		return nil, err
	}
	if sys.Warning != "" {
		r.log.Warn(sys.Warning)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cur := &running{cfg: cfg, g: g, sys: sys, metrics: g.MetricsHandler(), debug: g.DebugHandler(), cancel: cancel, done: make(chan error, 1)}
	go func() { cur.done <- g.Run(ctx, dev) }()
	r.log.Info("gateway up", "tun", cfg.TUN.Name, "mtu", g.MTU(), "transport", cfg.Transport.Type,
		"port", cfg.Transport.Port, "remotes", len(cfg.Remotes))
	return cur, nil
}

// stopLocked ends the running gateway and removes its routes. Under r.mu.
func (r *Runner) stopLocked() {
	cur := r.cur
	if cur == nil {
		return
	}
	r.cur = nil
	if err := cur.sys.Undo(); err != nil {
		r.log.Warn("cleanup", "err", err)
	}
	cur.cancel()
	if err := <-cur.done; err != nil {
		r.log.Warn("gateway stopped", "err", err)
	}
	r.log.Info("gateway down", "tun", cur.cfg.TUN.Name)
}

// Close stops the gateway, if one runs.
func (r *Runner) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

// Stats returns the running gateway's statistics, or false when none runs.
func (r *Runner) Stats() (Stats, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		return Stats{}, false
	}
	return r.cur.g.Stats(), true
}

// PublicKey is the running gateway's WireGuard public key, empty when none
// runs or the transport is not WireGuard.
func (r *Runner) PublicKey() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		return ""
	}
	return r.cur.g.PublicKey()
}

// errNotRunning answers HTTP requests while no gateway runs.
var errNotRunning = errors.New("no gateway is running: no remote cluster is known yet")

// MetricsHandler serves the running gateway's Gateway.MetricsHandler.
func (r *Runner) MetricsHandler() http.Handler {
	return r.handler(func(cur *running) http.Handler { return cur.metrics })
}

// DebugHandler serves the running gateway's Gateway.DebugHandler.
func (r *Runner) DebugHandler() http.Handler {
	return r.handler(func(cur *running) http.Handler { return cur.debug })
}

// handler serves with pick's handler of whichever gateway runs at the time
// of each request, so that the listeners outlive restarts.
func (r *Runner) handler(pick func(*running) http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		var h http.Handler
		if r.cur != nil {
			h = pick(r.cur)
		}
		r.mu.Unlock()
		if h == nil {
			http.Error(w, errNotRunning.Error(), http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, req)
	})
}
