package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/lab/topo"
)

// Defaults of Options.
const (
	DefaultStateDir = "/run/snorkel-node-lab"
	DefaultPrefix   = "snkn-"
)

// UnderlayNS is the namespace of the lab's bridge and control planes.
const UnderlayNS = "underlay"

// underlayBridge is the bridge every node and the host attach to.
const underlayBridge = "br0"

// Options says what to bring up and with what.
type Options struct {
	Scenario Scenario
	StateDir string
	Prefix   string
	Tools    Tools
	Images   Images
	// Out receives one line per step.
	Out io.Writer
}

// settle bounds each wait on a condition: a node becoming Ready, a pod
// running. Nodes take about 25 s on an idle host; the lab must hold on a
// busy two-core one with eight kubelets starting.
const settle = 5 * time.Minute

// state is what Down needs, in StateDir/state.json.
type state struct {
	Scenario string            `json:"scenario"`
	Prefix   string            `json:"prefix"`
	Nodes    []string          `json:"nodes"`
	Sysctls  map[string]string `json:"sysctls"`
	// NewAgentState is whether Up found no agentStateDir, which the
	// agent's DaemonSet then creates on the host that all nodes share.
	NewAgentState bool `json:"newAgentState"`
}

// agentStateDir is the agent DaemonSet's host path; each gateway node's
// agent keeps its key in a directory of its own below it.
const agentStateDir = "/var/lib/snorkel"

func stateFile(dir string) string     { return filepath.Join(dir, "state.json") }
func topoFile(dir string) string      { return filepath.Join(dir, "topo.json") }
func nodeDir(dir, node string) string { return filepath.Join(dir, "nodes", node) }

// KubeconfigFile is the lab's kubeconfig, with a context per cluster named
// as kind names them (kind-broker, kind-c1, ...).
func KubeconfigFile(stateDir string) string { return filepath.Join(stateDir, "kubeconfig") }

// Lab is a running real-node lab.
type Lab struct {
	Scenario Scenario
	StateDir string
	Topo     *topo.Topology
	servers  map[string]*kubelocal.Server
	out      io.Writer
	// tools start a node's processes again after a failure.
	tools Tools
}

func (l *Lab) step(format string, args ...any) {
	fmt.Fprintf(l.out, "• "+format+"\n", args...)
}

// Up brings the scenario's clusters up: control planes, nodes, pod
// networking, cluster DNS, images on every node. It returns once every
// node is Ready and every cluster's DNS answers; on failure it tears down
// what it built.
func Up(ctx context.Context, o Options) (l *Lab, err error) {
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if err := o.Tools.check(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(stateFile(o.StateDir)); err == nil {
		return nil, fmt.Errorf("nodes: a lab is up in %s; take it down first (snorkel lab down --nodes)", o.StateDir)
	}
	if err := preflight(o); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("nodes: state dir: %w", err)
	}
	sysctls, err := readSysctls()
	if err != nil {
		return nil, err
	}
	st := state{Scenario: o.Scenario.Name, Prefix: o.Prefix, Sysctls: sysctls}
	if _, err := os.Stat(agentStateDir); errors.Is(err, os.ErrNotExist) {
		st.NewAgentState = true
	}
	for _, n := range o.Scenario.allNodes() {
		st.Nodes = append(st.Nodes, n.Name)
	}
	if err := writeJSON(stateFile(o.StateDir), st); err != nil {
		return nil, err
	}
	t, err := topo.New(topo.Options{Prefix: o.Prefix, LogDir: filepath.Join(o.StateDir, "logs"), StateFile: topoFile(o.StateDir), StopTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	l = &Lab{Scenario: o.Scenario, StateDir: o.StateDir, Topo: t, servers: map[string]*kubelocal.Server{}, out: o.Out, tools: o.Tools}
	defer func() {
		if err != nil {
			if derr := l.Down(io.Discard); derr != nil {
				err = errors.Join(err, fmt.Errorf("nodes: teardown after failure: %w", derr))
			}
		}
	}()
	if err := l.underlay(); err != nil {
		return l, err
	}
	archive := filepath.Join(o.StateDir, "images.tar")
	if err := o.Images.write(archive); err != nil {
		return l, err
	}
	l.step("images %s written to %s", strings.Join(o.Images.tags(), ", "), archive)
	if err := l.controlPlanes(ctx, o.Tools); err != nil {
		return l, err
	}
	for _, c := range o.Scenario.Clusters {
		if err := l.clusterObjects(ctx, c, o.Images); err != nil {
			return l, err
		}
	}
	var wg sync.WaitGroup
	nodes := o.Scenario.allNodes()
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		c, _ := o.Scenario.cluster(n.Cluster)
		wg.Go(func() { errs[i] = l.startNode(ctx, c, n, o.Tools, archive) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return l, err
	}
	if err := l.waitNodesReady(ctx); err != nil {
		return l, err
	}
	if restored, err := restoreSysctls(sysctls); err != nil {
		return l, err
	} else if len(restored) > 0 {
		l.step("host sysctls kubelet changed, put back: %s", strings.Join(restored, ", "))
	}
	for _, c := range o.Scenario.Clusters {
		if err := l.waitDNS(ctx, c); err != nil {
			return l, err
		}
	}
	l.step("lab up: KUBECONFIG=%s kubectl --context %s get nodes", KubeconfigFile(o.StateDir), o.Scenario.Clusters[0].Context())
	return l, nil
}

// preflight refuses to start beside another lab: two would share the
// underlay's addresses, and a teardown acts on namespaces and cgroups by
// name, so it must never meet names it did not create.
func preflight(o Options) error {
	if nss, err := topo.List(o.Prefix); err != nil {
		return err
	} else if len(nss) > 0 {
		return fmt.Errorf("nodes: namespaces %s exist: another lab with the prefix %q is up; take it down first, or give another --prefix", strings.Join(nss, ", "), o.Prefix)
	}
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, n := range o.Scenario.allNodes() {
		for _, h := range hs {
			if _, err := os.Stat(filepath.Join(h, o.Prefix+n.Name)); err == nil {
				return fmt.Errorf("nodes: cgroup %s exists: another lab with the prefix %q is up or was not taken down; take it down first", filepath.Join(h, o.Prefix+n.Name), o.Prefix)
			}
		}
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && UnderlayCIDR.Contains(ip.Unmap()) {
			return fmt.Errorf("nodes: this host already has %s, in the lab's underlay %s: another real-node lab is up; take it down first (snorkel lab down --nodes)", ip, UnderlayCIDR)
		}
	}
	return nil
}

// underlay makes the bridge every node attaches to, with the API servers'
// address, and the host's own veth onto it.
func (l *Lab) underlay() error {
	ul, err := l.Topo.NewNS(UnderlayNS)
	if err != nil {
		return err
	}
	if err := ul.Bridge(underlayBridge); err != nil {
		return err
	}
	if err := ul.AddAddr(underlayBridge, netip.PrefixFrom(APIHost, UnderlayCIDR.Bits())); err != nil {
		return err
	}
	hostLink := l.Topo.Prefix() + "host"
	if err := hostVeth(ul, hostLink, "host"); err != nil {
		return err
	}
	if err := ul.SetMaster("host", underlayBridge); err != nil {
		return err
	}
	l.step("underlay %s: bridge %s at %s; host end %s at %s", ul.Name(), underlayBridge, APIHost, hostLink, HostAddr)
	return nil
}

// hostVeth makes a veth pair from the host's namespace (hostName, with
// HostAddr) to ul (peerName). Deleting ul deletes both ends.
func hostVeth(ul *topo.NS, hostName, peerName string) error {
	peer, err := netns.GetFromName(ul.Name())
	if err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	defer peer.Close()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostName}, PeerName: peerName, PeerNamespace: netlink.NsFd(peer)}
	if err := netlink.LinkAdd(v); err != nil {
		return fmt.Errorf("nodes: host veth %s: %w", hostName, err)
	}
	link, err := netlink.LinkByName(hostName)
	if err != nil {
		return fmt.Errorf("nodes: host veth %s: %w", hostName, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: HostAddr.AsSlice(), Mask: net.CIDRMask(UnderlayCIDR.Bits(), 32)}}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("nodes: host veth %s address: %w", hostName, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("nodes: host veth %s up: %w", hostName, err)
	}
	return ul.LinkUp(peerName)
}

// controlPlanes starts etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler for the broker and every cluster, in the underlay, and
// writes the lab's kubeconfig.
func (l *Lab) controlPlanes(ctx context.Context, tools Tools) error {
	ul := l.Topo.NS(UnderlayNS)
	names := []string{Broker}
	cidrs := []string{"10.96.0.0/16"}
	for _, c := range l.Scenario.Clusters {
		names = append(names, c.Name)
		cidrs = append(cidrs, c.ServiceCIDR.String())
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := make([]error, len(names))
	for i, name := range names {
		wg.Go(func() {
			s, err := kubelocal.Start(ctx, kubelocal.Options{
				Name:        name,
				Dir:         filepath.Join(l.StateDir, "kube", name),
				ServiceCIDR: cidrs[i],
				Address:     APIHost.String(),
				Spawn: func(proc, bin string, args ...string) (kubelocal.Process, error) {
					return ul.Start(name+"-"+proc, bin, args...)
				},
			})
			if err != nil {
				errs[i] = fmt.Errorf("nodes: %s API server: %w", name, err)
				return
			}
			mu.Lock()
			l.servers[name] = s
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := l.writeKubeconfig(names); err != nil {
		return err
	}
	for _, c := range l.Scenario.Clusters {
		s := l.servers[c.Name]
		if _, err := ul.Start(c.Name+"-controller-manager", tools.ControllerManager,
			"--kubeconfig", s.Kubeconfig, "--secure-port=0", "--leader-elect=false",
			"--cluster-name", c.Name,
			"--service-account-private-key-file", filepath.Join(s.Dir(), "sa.key"),
			"--root-ca-file", filepath.Join(s.Dir(), "ca.crt"),
			"--service-cluster-ip-range", c.ServiceCIDR.String(),
			"--cluster-cidr", c.PodCIDR.String(), "--allocate-node-cidrs=false",
			"--v=1"); err != nil {
			return err
		}
		if _, err := ul.Start(c.Name+"-scheduler", tools.Scheduler,
			"--kubeconfig", s.Kubeconfig, "--secure-port=0", "--leader-elect=false", "--v=1"); err != nil {
			return err
		}
	}
	l.step("control planes at %s: %s", APIHost, strings.Join(names, ", "))
	return nil
}

// writeKubeconfig merges the API servers' kubeconfigs into one whose
// contexts, clusters and users are named kind-<cluster>.
func (l *Lab) writeKubeconfig(names []string) error {
	cfg := clientcmdapi.NewConfig()
	for _, name := range names {
		s := l.servers[name]
		ctx := ContextPrefix + name
		cfg.Clusters[ctx] = &clientcmdapi.Cluster{Server: s.URL, CertificateAuthorityData: s.CA}
		cfg.AuthInfos[ctx] = &clientcmdapi.AuthInfo{Token: s.Token}
		cfg.Contexts[ctx] = &clientcmdapi.Context{Cluster: ctx, AuthInfo: ctx}
	}
	cfg.CurrentContext = l.Scenario.Clusters[0].Context()
	return clientcmd.WriteToFile(*cfg, KubeconfigFile(l.StateDir))
}

// Down tears a lab down: every process of every node's cgroup, the control
// planes, the namespaces, what kubelet and containerd mounted, the cgroups,
// and the state directory; and puts the host's sysctls back.
func Down(stateDir string, w io.Writer) error {
	return teardown(stateDir, w, nil)
}

// Down tears the lab down from the process that brought it up, whose
// topology holds the namespaces open: deleting them through another
// record would leave them alive, with the host's veth.
func (l *Lab) Down(w io.Writer) error {
	return teardown(l.StateDir, w, l.Topo)
}

// teardown is Down with the lab's topology t, or the one its record
// describes when t is nil.
func teardown(stateDir string, w io.Writer, t *topo.Topology) error {
	var st state
	b, err := os.ReadFile(stateFile(stateDir))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("nodes: no lab in %s", stateDir)
	}
	if err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("nodes: %s: %w", stateFile(stateDir), err)
	}
	var errs []error
	for _, n := range st.Nodes {
		if err := killCgroup(st.Prefix+n, time.Minute); err != nil {
			errs = append(errs, err)
		}
	}
	if t == nil {
		if _, err := os.Stat(topoFile(stateDir)); err == nil {
			if t, err = topo.Load(topoFile(stateDir)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if t != nil {
		nss := t.Namespaces()
		if err := t.Close(); err != nil {
			errs = append(errs, err)
		}
		fmt.Fprintf(w, "deleted %d namespaces\n", len(nss))
	}
	if err := unmountUnder(stateDir); err != nil {
		errs = append(errs, err)
	}
	for _, n := range st.Nodes {
		if err := removeCgroup(st.Prefix + n); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range st.Nodes {
		if err := os.RemoveAll(filepath.Join(agentStateDir, n)); err != nil {
			errs = append(errs, fmt.Errorf("nodes: %w", err))
		}
	}
	if st.NewAgentState {
		if err := os.Remove(agentStateDir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("nodes: %w (it held only the lab's gateway keys)", err))
		}
	}
	restored, err := restoreSysctls(st.Sysctls)
	if err != nil {
		errs = append(errs, err)
	}
	if len(restored) > 0 {
		fmt.Fprintf(w, "host sysctls put back: %s\n", strings.Join(restored, ", "))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.RemoveAll(stateDir); err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	fmt.Fprintf(w, "removed %s\n", stateDir)
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// run runs a command on the host and returns its combined output, which
// the error carries too.
func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}
