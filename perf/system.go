package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/topo"
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
	Client *topo.NS
	Server *topo.NS
	// ServerAddr is where the client sends.
	ServerAddr netip.Addr
	// ServerIP is the server namespace's own address, which its traffic
	// server binds: ServerAddr, unless a gateway translates one into the
	// other (Globalnet).
	ServerIP netip.Addr
}

// A Setup brings up one system.
type Setup struct {
	// Name is the system's name in results ("snorkel-wireguard").
	Name string
	// Tag is a short form of Name for namespace prefixes and state
	// directories: at most 3 characters.
	Tag string
	// Kind is KindSnorkel or KindBaseline. A Snorkel system that cannot
	// come up fails the run; a baseline is reported unavailable.
	Kind string
	// Check, if set, says why the system cannot run on this machine
	// (a missing program), before anything is built.
	Check func() error
	Up    func(ctx context.Context, env Env) (System, error)
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
// pod of the first cluster, its server a pod of the second (serverPod).
type labSystem struct {
	lab    *lab.Lab
	info   SystemInfo
	path   Path
	tunnel []*topo.Process
}

// upLab brings up the lab of a scenario for a system, first removing what
// an earlier, interrupted run left in the same state directory.
func upLab(ctx context.Context, env Env, scenario lab.Scenario, transport string, info SystemInfo) (*labSystem, error) {
	if old, err := lab.Attach(env.StateDir); err == nil {
		fmt.Fprintf(env.Progress, "  removing the lab an earlier run left in %s\n", env.StateDir)
		if err := lab.Down(old.StateDir, io.Discard); err != nil {
			return nil, fmt.Errorf("perf: remove earlier lab: %w", err)
		}
	} else if !errors.Is(err, lab.ErrNotUp) {
		return nil, err
	}
	l, err := lab.Up(ctx, lab.Options{
		Scenario:  scenario,
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
	cp := l.Plan.Clusters[0].Pods[0]
	sp, addr, err := serverPod(&l.Plan.Clusters[1])
	if err != nil {
		s.Close()
		return nil, err
	}
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
	s.path = Path{Client: client, Server: server, ServerAddr: addr, ServerIP: sp.IP}
	s.info.Prefix = env.Prefix
	s.info.Client = fmt.Sprintf("%s (%s, %s)", client, cp.IP, cp.Cluster)
	at := sp.IP.String()
	if addr != sp.IP {
		at = fmt.Sprintf("global IP %s, pod IP %s", addr, sp.IP)
	}
	s.info.Server = fmt.Sprintf("%s (%s, %s)", server, at, sp.Cluster)
	s.tunnel = s.gatewayProcesses(snorkelGatewayProcess)
	return s, nil
}

// snorkelGatewayProcess starts the name of the lab's gateway processes.
const snorkelGatewayProcess = "gateway-"

// serverPod returns the pod of cluster c that serves a system's traffic and
// the address clients reach it at: the first pod at its pod IP or, with
// Globalnet, the first pod with a global IP of its own (a headless
// service's) at that global IP, so that both gateways translate the flow.
func serverPod(c *lab.ClusterPlan) (lab.PodPlan, netip.Addr, error) {
	if !c.Spec.GlobalCIDR.IsValid() {
		return c.Pods[0], c.Pods[0].IP, nil
	}
	for _, p := range c.Pods {
		if p.GlobalIP.IsValid() {
			return p, p.GlobalIP, nil
		}
	}
	return lab.PodPlan{}, netip.Addr{}, fmt.Errorf("perf: no pod of cluster %s has a global IP; back a headless service with one", c.Spec.ID)
}

// gatewayProcesses returns the processes running in the gateway nodes'
// namespaces whose name starts with prefix: whatever carries the tunnel
// there, and not the node's other daemons.
func (s *labSystem) gatewayProcesses(prefix string) []*topo.Process {
	nodes := map[string]bool{}
	for _, c := range s.lab.Plan.Clusters {
		nodes[s.lab.Plan.Prefix+c.Gateway.NS] = true
	}
	var out []*topo.Process
	for _, p := range s.lab.Topo.Processes() {
		if nodes[p.NS] && strings.HasPrefix(p.Name, prefix) {
			out = append(out, p)
		}
	}
	return out
}

// gatewayLinkMTU returns the MTU of a link of the first cluster's gateway
// node, or 0 if it cannot be read.
func (s *labSystem) gatewayLinkMTU(ctx context.Context, link string) int {
	ns, err := s.lab.Gateway(s.lab.Plan.Clusters[0].Spec.ID)
	if err != nil {
		return 0
	}
	out, err := ns.Run(ctx, "cat", "/sys/class/net/"+link+"/mtu")
	if err != nil {
		return 0
	}
	mtu, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return mtu
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

// SnorkelSetup returns the setup of Snorkel gateways over transport,
// joining two clusters with distinct CIDRs.
func SnorkelSetup(transport string) Setup {
	name := "snorkel-" + transport
	return Setup{
		Name: name,
		Tag:  "s" + transport[:1],
		Kind: KindSnorkel,
		Up: func(ctx context.Context, env Env) (System, error) {
			return upSnorkel(ctx, env, lab.Basic(), SystemInfo{
				Name:        name,
				Kind:        KindSnorkel,
				Transport:   transport,
				Description: "snorkel gateway on a TUN device in each gateway node, " + transport + " transport over UDP",
			})
		},
	}
}

// GlobalnetSetup returns the setup of Snorkel gateways over transport,
// joining two clusters with the same CIDRs by Globalnet: the client's
// gateway translates the flow's source to a cluster egress IP, and the
// server's gateway its destination, a pod's global IP, back to the pod IP.
func GlobalnetSetup(transport string) Setup {
	name := "snorkel-" + transport + "-globalnet"
	return Setup{
		Name: name,
		Tag:  "g" + transport[:1],
		Kind: KindSnorkel,
		Up: func(ctx context.Context, env Env) (System, error) {
			return upSnorkel(ctx, env, lab.Globalnet(), SystemInfo{
				Name:        name,
				Kind:        KindSnorkel,
				Transport:   transport,
				Globalnet:   true,
				Description: "snorkel gateway on a TUN device in each gateway node, " + transport + " transport over UDP, with Globalnet translation in each gateway (source to a cluster egress IP leaving g1, global destination to the pod IP entering g2) between clusters with the same CIDRs",
			})
		},
	}
}

// upSnorkel brings up a lab of Snorkel gateways over info.Transport.
func upSnorkel(ctx context.Context, env Env, scenario lab.Scenario, info SystemInfo) (System, error) {
	s, err := upLab(ctx, env, scenario, info.Transport, info)
	if err != nil {
		return nil, err
	}
	s.info.Version = binaryVersion(ctx, env.Binary, "version")
	s.info.TunnelMTU = s.gatewayLinkMTU(ctx, s.lab.Plan.Clusters[0].Gateway.TUN)
	return &snorkelSystem{s}, nil
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
			b, err := cpuProfile(ctx, ns, lab.DebugAddress, seconds)
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

// VethSetup returns the setup of the lab with plain kernel routes between
// the gateway nodes and no tunnel: the packets cross veth pairs and the
// underlay bridge and nothing else, the ceiling every tunnel is measured
// against.
func VethSetup() Setup {
	return Setup{
		Name: BaselineVeth,
		Tag:  "ve",
		Kind: KindBaseline,
		Up: func(ctx context.Context, env Env) (System, error) {
			return upLab(ctx, env, lab.Basic(), lab.TransportKernel, SystemInfo{
				Name:           BaselineVeth,
				Kind:           KindBaseline,
				KernelDataPath: true,
				Description:    "no tunnel: the gateway nodes route the remote CIDRs over the underlay bridge (veth pairs and a bridge, kernel forwarding)",
			})
		},
	}
}
