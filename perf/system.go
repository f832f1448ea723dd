package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/snorkel-net/snorkel/perf/lab"
	"github.com/snorkel-net/snorkel/perf/topo"
)

// A System is one data path under test, up and able to carry traffic from
// its client namespace to its server address.
type System interface {
	Info() SystemInfo
	Path() Path
	// TunnelProcesses are the processes that carry the tunnel; their CPU
	// is sampled during every measurement.
	TunnelProcesses() []*topo.Process
	// Topology owns the system's namespaces and processes; the harness
	// starts its traffic servers in it so that Close stops them too.
	Topology() *topo.Topology
	Close() error
}

// Profiler is a System whose tunnel processes serve Go CPU profiles.
type Profiler interface {
	// Profile records a CPU profile of every tunnel process for the given
	// number of seconds and returns them by a short name ("c1").
	Profile(ctx context.Context, seconds int) (map[string][]byte, error)
}

// Path is where a workload's traffic starts and ends.
type Path struct {
	Client     *topo.NS
	Server     *topo.NS
	ServerAddr netip.Addr
}

// A Setup brings up one system.
type Setup struct {
	// Name is the system's name in results ("snorkel-wireguard").
	Name string
	// Tag is a short form of Name for namespace prefixes and state
	// directories: at most 3 characters.
	Tag string
	Up  func(ctx context.Context, env Env) (System, error)
}

// Env is what a Setup gets from the run.
type Env struct {
	// StateDir is the system's own state directory.
	StateDir string
	// Prefix is the system's own namespace prefix.
	Prefix string
	// Binary is the snorkel binary gateways and lab pods run from.
	Binary   string
	Progress io.Writer
}

// labSystem is a system built on the lab topology: its client is the first
// pod of the first cluster, its server the first pod of the second.
type labSystem struct {
	lab    *lab.Lab
	info   SystemInfo
	path   Path
	tunnel []*topo.Process
}

// upLab brings up the lab for a system, first removing what an earlier,
// interrupted run left in the same state directory.
func upLab(ctx context.Context, env Env, transport string, info SystemInfo) (*labSystem, error) {
	if old, err := lab.Attach(env.StateDir); err == nil {
		fmt.Fprintf(env.Progress, "  removing the lab an earlier run left in %s\n", env.StateDir)
		if err := lab.Down(old.StateDir, io.Discard); err != nil {
			return nil, fmt.Errorf("perf: remove earlier lab: %w", err)
		}
	} else if !errors.Is(err, lab.ErrNotUp) {
		return nil, err
	}
	l, err := lab.Up(ctx, lab.Options{
		Transport: transport,
		StateDir:  env.StateDir,
		Prefix:    env.Prefix,
		Binary:    env.Binary,
		Progress:  env.Progress,
	})
	if err != nil {
		return nil, err
	}
	s := &labSystem{lab: l, info: info}
	if len(l.Plan.Clusters) < 2 {
		s.Close()
		return nil, fmt.Errorf("perf: scenario %s has fewer than two clusters", l.Plan.Scenario.Name)
	}
	cp, sp := l.Plan.Clusters[0].Pods[0], l.Plan.Clusters[1].Pods[0]
	client, _, err := l.Pod(cp.Name)
	if err != nil {
		s.Close()
		return nil, err
	}
	server, _, err := l.Pod(sp.Name)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.path = Path{Client: client, Server: server, ServerAddr: sp.IP}
	s.info.Prefix = env.Prefix
	s.info.Client = fmt.Sprintf("%s (%s, %s)", client, cp.IP, cp.Cluster)
	s.info.Server = fmt.Sprintf("%s (%s, %s)", server, sp.IP, sp.Cluster)
	s.tunnel = s.gatewayProcesses()
	return s, nil
}

// gatewayProcesses returns the processes running in the gateway nodes'
// namespaces: whatever carries the tunnel there.
func (s *labSystem) gatewayProcesses() []*topo.Process {
	nodes := map[string]bool{}
	for _, c := range s.lab.Plan.Clusters {
		nodes[s.lab.Plan.Prefix+c.Gateway.NS] = true
	}
	var out []*topo.Process
	for _, p := range s.lab.Topo.Processes() {
		if nodes[p.NS] {
			out = append(out, p)
		}
	}
	return out
}

func (s *labSystem) Info() SystemInfo                 { return s.info }
func (s *labSystem) Path() Path                       { return s.path }
func (s *labSystem) TunnelProcesses() []*topo.Process { return s.tunnel }
func (s *labSystem) Topology() *topo.Topology         { return s.lab.Topo }

// Close tears the lab down and removes its files, the logs of processes
// the harness added to it too.
func (s *labSystem) Close() error {
	procs := s.lab.Topo.Processes()
	if err := s.lab.Close(); err != nil {
		return err
	}
	for _, p := range procs {
		os.Remove(p.Log)
	}
	return s.lab.Clean()
}

// SnorkelSetup returns the setup of Snorkel gateways over transport.
func SnorkelSetup(transport string) Setup {
	name := "snorkel-" + transport
	return Setup{
		Name: name,
		Tag:  "s" + transport[:1],
		Up: func(ctx context.Context, env Env) (System, error) {
			s, err := upLab(ctx, env, transport, SystemInfo{
				Name:        name,
				Kind:        KindSnorkel,
				Transport:   transport,
				Description: "snorkel gateway on a TUN device in each gateway node, " + transport + " transport over UDP",
			})
			if err != nil {
				return nil, err
			}
			s.info.Version = binaryVersion(ctx, env.Binary, "version")
			return &snorkelSystem{s}, nil
		},
	}
}

// snorkelSystem is a lab with Snorkel gateways, which serve pprof.
type snorkelSystem struct{ *labSystem }

var _ Profiler = (*snorkelSystem)(nil)

func (s *snorkelSystem) Profile(ctx context.Context, seconds int) (map[string][]byte, error) {
	type result struct {
		name string
		b    []byte
		err  error
	}
	ch := make(chan result, len(s.lab.Plan.Clusters))
	for _, c := range s.lab.Plan.Clusters {
		go func() {
			ns, err := s.lab.Gateway(c.Spec.ID)
			if err != nil {
				ch <- result{name: c.Spec.ID, err: err}
				return
			}
			b, err := cpuProfile(ctx, ns, lab.MetricsAddress, seconds)
			ch <- result{name: c.Spec.ID, b: b, err: err}
		}()
	}
	out := map[string][]byte{}
	var errs []error
	for range s.lab.Plan.Clusters {
		r := <-ch
		if r.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.name, r.err))
			continue
		}
		out[r.name] = r.b
	}
	return out, errors.Join(errs...)
}

// KernelSetup returns the setup of the lab with plain kernel routes between
// the gateway nodes and no tunnel: the ceiling every tunnel is measured
// against.
func KernelSetup() Setup {
	return Setup{
		Name: "kernel",
		Tag:  "k",
		Up: func(ctx context.Context, env Env) (System, error) {
			return upLab(ctx, env, lab.TransportKernel, SystemInfo{
				Name:        "kernel",
				Kind:        KindBaseline,
				Description: "no tunnel: the gateway nodes route the remote CIDRs over the underlay",
			})
		},
	}
}
