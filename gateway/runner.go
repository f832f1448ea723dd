package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"reflect"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Runner is a gateway that follows a changing configuration, as the agent
// feeds it from Kubernetes or `snorkel gateway` reads it from its file.
// Apply starts the gateway on the first Spec. A change to the remotes or to
// Globalnet's addresses is applied in place (Gateway.update): one remote
// joining, leaving, moving or rekeying touches that remote alone, and the
// TUN device, the socket, the other remotes' sessions and the Globalnet
// flows stay. A change to the local part (the cluster, the TUN device, the
// transport, Globalnet's global CIDR) restarts the gateway: the TUN
// device, its routes and the transport's socket are made anew, and the
// guard (guard.go) follows the new remotes. The guard stays while no
// gateway runs: across a restart, and after a configuration without
// remotes, which is also what a gateway that has turned passive gets.
type Runner struct {
	log *slog.Logger

	mu  sync.Mutex
	cur *running
	// failed receives the error of a gateway that stopped on its own
	// (its device failed), not because the Runner stopped it.
	failed chan error
	// follower keeps the active gateway's flows while this one is passive
	// (Spec.Sync.Follow); the next gateway started takes them over.
	follower *Follower
}

// running is one started gateway.
type running struct {
	spec *Spec
	g    *Gateway
	sys  *System
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
	return &Runner{log: log, failed: make(chan error, 1)}
}

// Apply makes the running gateway match s, which it validates (and fills
// with defaults). An invalid s is refused and leaves the running gateway as
// it was; an s without remotes stops it and leaves the guard as it was,
// since a passive gateway's node must not send the remotes' traffic in
// cleartext either.
//
// A spec with Sync.Follow (the passive gateway's) keeps a Follower of the
// active gateway running; the next gateway started, when this one becomes
// active, imports its flows before it translates a packet.
func (r *Runner) Apply(ctx context.Context, s *Spec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.dropFollowerLocked(s)
	if err := r.followLocked(s); err != nil {
		return err
	}
	if len(s.Remotes) == 0 {
		// With no one to connect to, the gateway has nothing to do.
		r.stopLocked()
		return nil
	}
	next, err := s.derive()
	if err != nil {
		return err
	}
	if r.cur != nil {
		if reflect.DeepEqual(r.cur.spec, s) {
			return nil
		}
		err := r.updateLocked(next)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrLocalChange) {
			r.log.Warn("cannot apply the change in place; restarting the gateway", "err", err)
		}
		r.stopLocked()
	}
	cur, err := r.start(next)
	if err != nil {
		return err
	}
	r.cur = cur
	return nil
}

// updateLocked applies next to the running gateway in place: routes for
// new CIDRs first, then the gateway's own change, then the routes of CIDRs
// that left. Under r.mu.
func (r *Runner) updateLocked(next *spec) error {
	cur := r.cur
	if !sameLocal(cur.spec, next.Spec) {
		return ErrLocalChange
	}
	if cur.sys != nil {
		if err := cur.sys.addRoutes(next); err != nil {
			return err
		}
	}
	if err := cur.g.update(next); err != nil {
		return err
	}
	if cur.sys != nil {
		if err := cur.sys.pruneRoutes(next); err != nil {
			r.log.Warn("cleanup", "err", err)
		}
	}
	cur.spec = next.Spec
	r.log.Info("gateway updated in place", "remotes", len(next.remotes))
	return nil
}

// followLocked starts, moves or keeps the follower as s.Sync says. A spec
// that no longer follows leaves the follower for the gateway Apply starts
// next (dropFollowerLocked ends it if none does). Under r.mu.
func (r *Runner) followLocked(s *Spec) error {
	sy := s.Sync
	if sy == nil || !sy.Follow.IsValid() {
		return nil
	}
	var errs errList
	sy.check(&errs, s.Globalnet != nil)
	if err := errs.err(); err != nil {
		return err
	}
	if f := r.follower; f != nil {
		if f.spec.Follow == sy.Follow && string(f.spec.Key) == string(sy.Key) {
			return nil
		}
		f.Stop()
	}
	maxFlows := 0
	if s.Globalnet != nil {
		maxFlows = s.Globalnet.MaxFlows
	}
	f, err := NewFollower(*sy, maxFlows, r.log)
	if err != nil {
		return err
	}
	r.follower = f
	r.log.Info("sync: following the active gateway", "active", sy.Follow)
	return nil
}

// dropFollowerLocked ends a follower that s no longer wants and no gateway
// took over from. Under r.mu.
func (r *Runner) dropFollowerLocked(s *Spec) {
	if r.follower != nil && (s.Sync == nil || !s.Sync.Follow.IsValid()) {
		r.follower.Stop()
		r.follower = nil
	}
}

// SyncStatus is the follower's status while this gateway is passive.
func (r *Runner) SyncStatus() (SyncStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.follower == nil {
		return SyncStatus{}, false
	}
	return r.follower.Status(), true
}

func (r *Runner) start(s *spec) (*running, error) {
	opts := Options{Logger: r.log}
	if s.Sync == nil || !s.Sync.Follow.IsValid() {
		opts.Takeover, r.follower = r.follower, nil
	}
	g, err := newGatewayFor(s, opts)
	if err != nil {
		return nil, err
	}
	dev, sys, err := openTUN(s, g.MTU())
	if err != nil {
		g.Close()
		return nil, err
	}
	if sys.Warning != "" {
		r.log.Warn(sys.Warning)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cur := &running{spec: s.Spec, g: g, sys: sys, metrics: g.MetricsHandler(), debug: g.DebugHandler(), cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := g.Run(ctx, dev)
		if ctx.Err() == nil {
			if err == nil {
				err = errors.New("gateway: the device closed")
			}
			select {
			case r.failed <- err:
			default:
			}
		}
		cur.done <- err
	}()
	r.log.Info("gateway up", "tun", s.TUN.Name, "mtu", g.MTU(), "transport", s.Transport.Kind,
		"port", s.port, "remotes", len(s.remotes))
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
	r.log.Info("gateway down", "tun", cur.spec.TUN.Name)
}

// Describe implements prometheus.Collector as an unchecked collector: the
// metrics are those of whichever gateway runs when they are collected.
func (r *Runner) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector with the running gateway's
// metrics, none while no gateway runs.
func (r *Runner) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	cur, f := r.cur, r.follower
	r.mu.Unlock()
	if cur != nil {
		cur.g.Collect(ch)
	}
	if f != nil {
		st := f.Status()
		collectSync(ch, &st)
	}
}

// Failed reports the error of a gateway that stopped by itself, its device
// having failed; the Runner does not start it again.
func (r *Runner) Failed() <-chan error { return r.failed }

// Close stops the gateway, if one runs.
func (r *Runner) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
	if r.follower != nil {
		r.follower.Stop()
		r.follower = nil
	}
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

// DebugHandler serves the running gateway's Gateway.DebugHandler; while
// no gateway runs but a follower does (a passive gateway under Globalnet),
// /status is the sync's state alone.
func (r *Runner) DebugHandler() http.Handler {
	running := r.handler(func(cur *running) http.Handler { return cur.debug })
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		f := r.follower
		passive := r.cur == nil && f != nil
		r.mu.Unlock()
		if !passive || req.URL.Path != "/status" {
			running.ServeHTTP(w, req)
			return
		}
		st := f.Status()
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(Stats{Sync: &st})
	})
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
