package nodes

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
)

// startNode makes a node: its namespace on the underlay, the routes to the
// cluster's other pods, the cluster's masquerade, its cgroup, then
// containerd (with the lab's images), kubelet and kube-proxy.
func (l *Lab) startNode(ctx context.Context, c Cluster, n Node, tools Tools, archive string) error {
	d := nodeDirs{nodeDir(l.StateDir, n.Name)}
	for _, dir := range []string{d.base, d.cniConf(), filepath.Join(d.base, "pod-logs")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("nodes: %s: %w", n.Name, err)
		}
	}
	ns, err := l.Topo.NewNS(n.Name)
	if err != nil {
		return err
	}
	ul := l.Topo.NS(UnderlayNS)
	if err := topo.Veth(ul, n.Name, ns, "eth0"); err != nil {
		return err
	}
	if err := ul.SetMaster(n.Name, underlayBridge); err != nil {
		return err
	}
	if err := ns.AddAddr("eth0", netip.PrefixFrom(n.IP, UnderlayCIDR.Bits())); err != nil {
		return err
	}
	if err := nodeRoutes(ns, c, n); err != nil {
		return err
	}
	if err := ns.Sysctl("net.ipv4.ip_forward", "1"); err != nil {
		return err
	}
	if err := ns.Nft(ctx, masqueradeRules(c)); err != nil {
		return err
	}
	cgroup := l.Topo.Prefix() + n.Name
	if err := makeCgroup(cgroup); err != nil {
		return err
	}
	kubeconfig := filepath.Join(l.StateDir, "kube", n.Cluster, "kubeconfig")
	cni, err := cniConfig(n, d)
	if err != nil {
		return err
	}
	kubelet, err := kubeletConfig(c, n, d, "/"+cgroup)
	if err != nil {
		return err
	}
	proxy, err := kubeProxyConfig(c, &n, kubeconfig)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		d.file("containerd.toml"):                     []byte(containerdConfig(d)),
		filepath.Join(d.cniConf(), "10-lab.conflist"): cni,
		d.file("kubelet.yaml"):                        kubelet,
		d.file("kube-proxy.yaml"):                     proxy,
		d.file("resolv.conf"):                         []byte(resolvConf(c)),
	}
	for path, b := range files {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return fmt.Errorf("nodes: %s: %w", n.Name, err)
		}
	}
	if err := l.startProcesses(ctx, n, tools, archive); err != nil {
		return err
	}
	l.step("node %s: %s, pods %s, containerd, kubelet, kube-proxy", n.Name, n.IP, n.PodCIDR)
	return nil
}

// nodeRoutes gives node n its routes. The default route ends in the
// underlay namespace, which forwards nothing: a node has a route for every
// address, as a real one does, and nothing leaves the lab.
func nodeRoutes(ns *topo.NS, c Cluster, n Node) error {
	if err := ns.AddRoute(topo.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: APIHost}); err != nil {
		return err
	}
	for dst, via := range podRoutes(c, n) {
		if err := ns.AddRoute(topo.Route{Dst: dst, Via: via}); err != nil {
			return err
		}
	}
	return nil
}

// startProcesses starts node n's containerd, kubelet and kube-proxy in
// its cgroup, and with archive, imports the lab's images first.
func (l *Lab) startProcesses(ctx context.Context, n Node, tools Tools, archive string) error {
	d := nodeDirs{nodeDir(l.StateDir, n.Name)}
	ns := l.Topo.NS(n.Name)
	enter, err := cgroupEnter(l.Topo.Prefix() + n.Name)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(l.StateDir, "kube", n.Cluster, "kubeconfig")
	if _, err := ns.StartNetOnly(n.Name+"-containerd", "sh", "-c", enter, "containerd", "--config", d.file("containerd.toml")); err != nil {
		return err
	}
	if err := waitFor(ctx, settle, n.Name+": containerd answering on "+d.socket(), func() error {
		_, err := run(ctx, "ctr", "-a", d.socket(), "version")
		return err
	}); err != nil {
		return err
	}
	if archive != "" {
		if _, err := run(ctx, "ctr", "-a", d.socket(), "-n", "k8s.io", "images", "import", archive); err != nil {
			return fmt.Errorf("nodes: %s: import images: %w", n.Name, err)
		}
	}
	if _, err := ns.StartNetOnly(n.Name+"-kubelet", "sh", "-c", enter, tools.Kubelet,
		"--config", d.file("kubelet.yaml"), "--kubeconfig", kubeconfig, "--root-dir", d.kubeletRoot(),
		"--hostname-override", n.Name, "--node-ip", n.IP.String(), "--oom-score-adj=0", "--v=1"); err != nil {
		return err
	}
	if _, err := ns.StartNetOnly(n.Name+"-kube-proxy", "sh", "-c", enter, tools.KubeProxy,
		"--config", d.file("kube-proxy.yaml"), "--v=1"); err != nil {
		return err
	}
	return nil
}

// restartNode starts a node whose processes were killed again: containerd
// with its images and state, kubelet, which starts the node's pods again,
// and kube-proxy.
func (l *Lab) restartNode(ctx context.Context, n Node) error {
	if err := l.Topo.Forget(l.Topo.NS(n.Name)); err != nil {
		return err
	}
	return l.startProcesses(ctx, n, l.tools, "")
}

// relink sets node n's link up again after a cut and gives it back the
// routes the cut took.
func (l *Lab) relink(c Cluster, n Node) error {
	ns := l.Topo.NS(n.Name)
	if err := ns.LinkUp("eth0"); err != nil {
		return err
	}
	return nodeRoutes(ns, c, n)
}

// waitFor retries f until it succeeds, ctx ends or timeout passes; the
// error names what was awaited and carries f's last error.
func waitFor(ctx context.Context, timeout time.Duration, what string, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodes: waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-tick.C:
		}
	}
}
