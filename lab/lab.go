package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// Defaults of Options.
const (
	DefaultStateDir = "/run/snorkel-lab"
	DefaultPrefix   = "snk-"
)

// Files in the state directory.
const (
	labFile      = "lab.json"
	topologyFile = "topology.json"
	logDir       = "logs"
)

// wgSocketDir is where wireguard-go puts its UAPI sockets, for every
// namespace alike.
const wgSocketDir = "/var/run/wireguard"

// ErrAlreadyUp is returned by Up when the state directory already records a
// lab.
var ErrAlreadyUp = errors.New("lab: a lab is already up")

// ErrNotUp is returned by Attach when the state directory records no lab.
var ErrNotUp = errors.New("lab: no lab is up")

// Options configures Up.
type Options struct {
	Scenario Scenario
	// Transport is a gateway transport (transport.Kinds) or
	// TransportKernel; default wireguard.
	Transport string
	// StateDir holds configs, keys, logs and the record of what to tear
	// down; default DefaultStateDir.
	StateDir string
	// Prefix starts every namespace name; default DefaultPrefix.
	Prefix string
	// Binary is the snorkel binary run as gateway and pods; default
	// os.Executable().
	Binary string
	// PodsInProcess serves the pods' whereami from goroutines of this
	// process, listening inside the pod namespaces, instead of `snorkel
	// lab-pod` processes, and with DNS dnsd (from the static state)
	// instead of `snorkel dnsd`: topology tests then need no snorkel
	// binary. Such a lab's pods end with the process.
	PodsInProcess bool
	// Progress receives a line per build step; nil discards them.
	Progress io.Writer
	// ReadyTimeout bounds the wait for gateways and pods; default
	// DefaultReadyTimeout, or two minutes with Kube.
	ReadyTimeout time.Duration
	// Kube runs the control plane instead of configured gateways: API
	// servers for a broker and each cluster, `snorkel agent` on every
	// gateway node, and the services exported with `snorkel export`.
	Kube bool
	// DNS runs dnsd on the first cluster's gateway node, answering the
	// clusterset's names for its pods, and adds its checks to the demo.
	// `snorkel lab` turns it on.
	DNS bool
}

// Lab is a built lab.
type Lab struct {
	Plan      *Plan
	Transport string
	StateDir  string
	Topo      *topo.Topology

	// Kube says the lab runs the control plane (Options.Kube).
	Kube bool

	progress     io.Writer
	readyTimeout time.Duration
	stopPods     context.CancelFunc
	dns          bool               // Options.DNS
	stopDNSD     context.CancelFunc // an in-process dnsd, on l.pods
	pods         sync.WaitGroup
}

// record is lab.json: what Attach needs to rebuild the Plan. The scenario
// is stored whole, so that labs of scenarios built in code (by the perf
// harness, say) can be attached too.
type record struct {
	Scenario  Scenario `json:"scenario"`
	Transport string   `json:"transport"`
	Prefix    string   `json:"prefix"`
	Kube      bool     `json:"kube,omitempty"`
}

func (o *Options) applyDefaults() {
	if o.Transport == "" {
		o.Transport = transport.WireGuard
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Scenario.Name == "" {
		o.Scenario = Basic()
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = DefaultReadyTimeout
		if o.Kube {
			o.ReadyTimeout = kubeReadyTimeout
		}
	}
}

// DefaultReadyTimeout bounds the wait for a lab's gateways and pods. They
// are ready within a second or two on an idle host; the bound is for a
// host whose cores are busy with other work.
const DefaultReadyTimeout = time.Minute

// Up builds the lab and starts its gateways and pods. On failure, or when
// ctx is cancelled, it tears down what it built, keeps the logs, and says
// where they are.
func Up(ctx context.Context, o Options) (*Lab, error) {
	o.applyDefaults()
	if !slices.Contains(Transports, o.Transport) {
		return nil, fmt.Errorf("lab: unknown transport %q; use one of %s", o.Transport, strings.Join(Transports, ", "))
	}
	plan, err := NewPlan(o.Scenario, o.Prefix)
	if err != nil {
		return nil, err
	}
	if o.Kube && o.Transport == TransportKernel {
		return nil, fmt.Errorf("lab: --kube runs Snorkel's agents, which configure gateways; use transport %s", strings.Join(transport.Kinds, ", "))
	}
	if plan.Globalnet() && o.Transport == TransportKernel {
		return nil, fmt.Errorf("lab: scenario %s needs Globalnet's translation, which kernel routing does not do; use transport %s", o.Scenario.Name, strings.Join(transport.Kinds, " or "))
	}
	if _, err := os.Stat(filepath.Join(o.StateDir, labFile)); err == nil {
		return nil, fmt.Errorf("%w with its state in %s; run `snorkel lab down --state-dir %s` first", ErrAlreadyUp, o.StateDir, o.StateDir)
	}
	var taken []string
	for _, ns := range plan.Namespaces() {
		if topo.Exists(o.Prefix + ns) {
			taken = append(taken, o.Prefix+ns)
		}
	}
	if len(taken) > 0 {
		return nil, fmt.Errorf("lab: namespaces %s already exist; another lab with prefix %q is up (use another --prefix), or remove them with `ip netns delete`", strings.Join(taken, ", "), o.Prefix)
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("lab: state dir: %w", err)
	}
	rec, err := json.Marshal(record{Scenario: o.Scenario, Transport: o.Transport, Prefix: o.Prefix, Kube: o.Kube})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.StateDir, labFile), append(rec, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("lab: state dir: %w", err)
	}
	t, err := topo.New(topo.Options{
		Prefix:    o.Prefix,
		LogDir:    filepath.Join(o.StateDir, logDir),
		StateFile: filepath.Join(o.StateDir, topologyFile),
		Binary:    o.Binary,
	})
	if err != nil {
		os.Remove(filepath.Join(o.StateDir, labFile))
		return nil, err
	}
	l := &Lab{Plan: plan, Transport: o.Transport, StateDir: o.StateDir, Topo: t, Kube: o.Kube, dns: o.DNS, progress: o.Progress, readyTimeout: o.ReadyTimeout}
	if l.progress == nil {
		l.progress = io.Discard
	}
	if err := l.build(ctx, o.PodsInProcess); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("lab: interrupted: %w", err)
		}
		if cerr := l.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, fmt.Errorf("%w\nlogs: %s", err, t.LogDir())
	}
	return l, nil
}

func (l *Lab) step(format string, args ...any) {
	fmt.Fprintf(l.progress, "  "+format+"\n", args...)
}

func (l *Lab) build(ctx context.Context, podsInProcess bool) error {
	t := l.Topo
	l.step("underlay: namespace %s%s, bridge %s, %s", l.Plan.Prefix, UnderlayNS, UnderlayBridge, UnderlayCIDR)
	ul, err := t.NewNS(UnderlayNS)
	if err != nil {
		return err
	}
	if err := ul.Bridge(UnderlayBridge); err != nil {
		return err
	}
	for i := range l.Plan.Clusters {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := l.buildCluster(ctx, ul, &l.Plan.Clusters[i]); err != nil {
			return err
		}
	}
	if err := l.startPods(ctx, podsInProcess); err != nil {
		return err
	}
	switch {
	case l.Transport == TransportKernel:
		err = l.kernelRoutes()
	case l.Kube:
		err = l.startKube(ctx)
	default:
		err = l.startGateways(ctx)
	}
	if err != nil || !l.dns {
		return err
	}
	return l.startDNSD(ctx, podsInProcess)
}

func (l *Lab) buildCluster(ctx context.Context, ul *topo.NS, c *ClusterPlan) error {
	g := c.Gateway
	l.step("%s: gateway node %s%s, underlay %s, node %s", c.Spec.ID, l.Plan.Prefix, g.NS, g.UnderlayIP.Addr(), g.NodeIP)
	gw, err := l.Topo.NewNS(g.NS)
	if err != nil {
		return err
	}
	for _, s := range [][2]string{
		{"net.ipv4.ip_forward", "1"},
		// Replies to tunnelled traffic leave through pod links while the
		// requests came from the TUN: keep reverse-path filtering out of
		// the way, as CNIs do on nodes.
		{"net.ipv4.conf.all.rp_filter", "0"},
		{"net.ipv4.conf.default.rp_filter", "0"},
	} {
		if err := gw.Sysctl(s[0], s[1]); err != nil {
			return err
		}
	}
	if err := topo.Veth(gw, UnderlayLink, ul, g.BridgePort); err != nil {
		return err
	}
	if err := ul.SetMaster(g.BridgePort, UnderlayBridge); err != nil {
		return err
	}
	if err := gw.AddAddr(UnderlayLink, g.UnderlayIP); err != nil {
		return err
	}
	node := netip.PrefixFrom(g.NodeIP, 32)
	for _, p := range c.Pods {
		if err := ctx.Err(); err != nil {
			return err
		}
		pod, err := l.Topo.NewNS(p.NS)
		if err != nil {
			return err
		}
		// Routed /32 pods on point-to-point veths, as Calico and Cilium
		// wire them: every packet, pod to pod too, is routed by the node,
		// so the node's nftables sees all of it.
		if err := topo.Veth(pod, PodLink, gw, p.NodeLink); err != nil {
			return err
		}
		for _, step := range []func() error{
			func() error { return pod.AddAddr(PodLink, netip.PrefixFrom(p.IP, 32)) },
			func() error { return pod.AddRoute(topo.Route{Dst: node, Dev: PodLink}) },
			func() error {
				return pod.AddRoute(topo.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: g.NodeIP, Dev: PodLink})
			},
			func() error { return gw.AddAddr(p.NodeLink, node) },
			func() error { return gw.AddRoute(topo.Route{Dst: netip.PrefixFrom(p.IP, 32), Dev: p.NodeLink}) },
		} {
			if err := step(); err != nil {
				return err
			}
		}
	}
	if rs := c.ServiceRuleset(); rs != "" {
		for _, s := range c.clusterIPServices() {
			l.step("%s: service %s %s:%d -> %d backends (nftables numgen)", c.Spec.ID, s.Spec.Name, s.Spec.ClusterIP, s.Spec.Port, len(s.Backends))
		}
		if err := gw.Nft(ctx, rs); err != nil {
			return err
		}
	}
	return nil
}

// kernelRoutes routes every remote cluster's CIDRs through its gateway
// node's underlay address.
func (l *Lab) kernelRoutes() error {
	for i := range l.Plan.Clusters {
		c := &l.Plan.Clusters[i]
		gw := l.Topo.NS(c.Gateway.NS)
		for _, r := range l.Plan.Remotes(c) {
			for _, dst := range r.RoutedCIDRs() {
				if err := gw.AddRoute(topo.Route{Dst: dst, Via: r.Gateway.UnderlayIP.Addr()}); err != nil {
					return err
				}
			}
		}
		l.step("%s: kernel routes to %d remote clusters over the underlay", c.Spec.ID, len(l.Plan.Remotes(c)))
	}
	return nil
}

// Close stops the lab's processes and pods and deletes its namespaces. The
// logs, configs and keys stay in the state directory until Clean.
func (l *Lab) Close() error {
	if l.stopDNSD != nil {
		l.stopDNSD()
	}
	if l.stopPods != nil {
		l.stopPods()
		l.pods.Wait()
	}
	err := l.removeGuards()
	err = errors.Join(err, l.Topo.Close())
	if err == nil {
		// A gateway killed before it could clean up leaves its UAPI socket
		// behind; the name carries the lab's prefix, so it is this lab's.
		for _, c := range l.Plan.Clusters {
			sock := filepath.Join(wgSocketDir, c.Gateway.TUN+".sock")
			if rerr := os.Remove(sock); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("lab: remove stale %s: %w", sock, rerr))
			}
		}
	}
	if err == nil {
		if rerr := os.Remove(filepath.Join(l.StateDir, labFile)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = rerr
		}
	}
	return err
}

// removeGuards stops the processes on each gateway node, then removes the
// guard routes their gateways leave on purpose (gateway.RemoveGuard), as an
// uninstall does: taking the lab down is taking Snorkel off its nodes, and
// a node namespace that outlives its deletion must keep none.
func (l *Lab) removeGuards() error {
	var errs []error
	for _, c := range l.Plan.Clusters {
		ns := l.Topo.NS(c.Gateway.NS)
		if ns == nil {
			continue
		}
		for _, p := range l.Topo.Processes() {
			if p.NS == ns.Name() {
				errs = append(errs, p.Stop(gatewayStopTimeout))
			}
		}
		errs = append(errs, ns.Do(func() error {
			_, err := gateway.RemoveGuard()
			return err
		}))
	}
	return errors.Join(errs...)
}

// gatewayStopTimeout is how long a gateway node's process gets to exit
// after SIGTERM before it is killed; a gateway exits at once.
const gatewayStopTimeout = 5 * time.Second

// Clean removes the files the lab wrote to its state directory (logs,
// configs, keys), and the directory if nothing else is in it. Call it after
// Close.
func (l *Lab) Clean() error {
	paths := []string{l.diagnosticsPath(), DNSDFile(l.StateDir), PSKFile(l.StateDir), l.Topo.LogPath(dnsdProcess)}
	for _, c := range l.Plan.Clusters {
		k := KeyFile(l.StateDir, c.Spec.ID)
		paths = append(paths, ConfigFile(l.StateDir, c.Spec.ID), k, k+".pub", l.Topo.LogPath(gatewayProcess(c.Spec.ID)), l.Topo.LogPath(agentProcess(c.Spec.ID)))
		paths = append(paths, kubeLogs(l.Topo, c.Spec.ID)...)
		for _, p := range c.Pods {
			paths = append(paths, l.Topo.LogPath(podProcess(p.Name)))
		}
	}
	paths = append(paths, kubeLogs(l.Topo, BrokerName)...)
	var errs []error
	if err := os.RemoveAll(filepath.Join(l.StateDir, kubeDir)); err != nil {
		errs = append(errs, err)
	}
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	// Only empty directories go: the state directory may be one the user
	// keeps other files in.
	for _, d := range []string{filepath.Join(l.StateDir, "keys"), l.Topo.LogDir(), l.StateDir} {
		os.Remove(d)
	}
	return errors.Join(errs...)
}

// Attach returns the lab recorded in stateDir, to inspect it or tear it
// down from another process.
func Attach(stateDir string) (*Lab, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, labFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (no %s in %s)", ErrNotUp, labFile, stateDir)
	}
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("lab: %s: %w", filepath.Join(stateDir, labFile), err)
	}
	plan, err := NewPlan(rec.Scenario, rec.Prefix)
	if err != nil {
		return nil, err
	}
	l := &Lab{Plan: plan, Transport: rec.Transport, StateDir: stateDir, Kube: rec.Kube, progress: io.Discard}
	t, err := topo.Load(filepath.Join(stateDir, topologyFile))
	if errors.Is(err, os.ErrNotExist) {
		// Up stopped between writing lab.json and creating anything.
		t, err = topo.New(topo.Options{Prefix: rec.Prefix, LogDir: filepath.Join(stateDir, logDir)})
	}
	if err != nil {
		return nil, err
	}
	l.Topo = t
	return l, nil
}

// Pod returns a pod's namespace and plan.
func (l *Lab) Pod(name string) (*topo.NS, PodPlan, error) {
	p, ok := l.Plan.Pod(name)
	if !ok {
		return nil, PodPlan{}, fmt.Errorf("lab: no pod %q in scenario %s", name, l.Plan.Scenario.Name)
	}
	ns := l.Topo.NS(p.NS)
	if ns == nil {
		return nil, PodPlan{}, fmt.Errorf("lab: pod %q has no namespace", name)
	}
	return ns, p, nil
}

// Gateway returns a cluster's gateway node namespace.
func (l *Lab) Gateway(cluster string) (*topo.NS, error) {
	c := l.Plan.Cluster(cluster)
	if c == nil {
		return nil, fmt.Errorf("lab: no cluster %q in scenario %s", cluster, l.Plan.Scenario.Name)
	}
	ns := l.Topo.NS(c.Gateway.NS)
	if ns == nil {
		return nil, fmt.Errorf("lab: cluster %q has no gateway namespace", cluster)
	}
	return ns, nil
}

// ensureKeys creates or loads every cluster's WireGuard key and returns the
// public keys by cluster ID.
func (l *Lab) ensureKeys() (map[string]string, error) {
	pubs := map[string]string{}
	for _, c := range l.Plan.Clusters {
		_, pub, err := wireguard.LoadOrCreateKey(KeyFile(l.StateDir, c.Spec.ID))
		if err != nil {
			return nil, fmt.Errorf("lab: key of %s: %w", c.Spec.ID, err)
		}
		pubs[c.Spec.ID] = pub.String()
	}
	return pubs, nil
}
