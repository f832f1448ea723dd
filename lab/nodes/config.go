package nodes

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// PauseImage is the sandbox image every pod's containerd starts first. The
// lab builds its own and tags it with the reference containerd's default
// configuration carries, so nothing is ever pulled.
const PauseImage = "registry.k8s.io/pause:3.10"

// nodeDirs are where a node keeps its state, under the lab's state
// directory: containerd's root and state (its socket, the pods' network
// namespaces and rootfs mounts), kubelet's root, the CNI configuration and
// IPAM store, and the configuration files.
type nodeDirs struct{ base string }

func (d nodeDirs) containerdRoot() string  { return filepath.Join(d.base, "containerd") }
func (d nodeDirs) containerdState() string { return filepath.Join(d.base, "run") }
func (d nodeDirs) socket() string          { return filepath.Join(d.containerdState(), "containerd.sock") }
func (d nodeDirs) kubeletRoot() string     { return filepath.Join(d.base, "kubelet") }
func (d nodeDirs) cniConf() string         { return filepath.Join(d.base, "cni") }
func (d nodeDirs) file(name string) string { return filepath.Join(d.base, name) }

// containerdConfig is the node's containerd: its own root, state, socket
// and runc root, so that nodes never share a container. Pitfalls it
// avoids: without restrict_oom_score_adj every sandbox fails on a host
// without CAP_SYS_RESOURCE (runc cannot raise its oom_score_adj), and pods'
// network namespaces go under the state directory, where the teardown
// finds them, instead of the host's /run/netns.
func containerdConfig(d nodeDirs) string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %q
    enable_cdi = false
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = %q
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = %q
  [plugins."io.containerd.internal.v1.opt"]
    path = %q
`, d.containerdRoot(), d.containerdState(), d.socket(), d.socket()+".ttrpc", PauseImage,
		filepath.Join(d.containerdState(), "runc"), d.cniConf(), filepath.Join(d.base, "opt"))
}

// cniConfig is the node's pod network: a bridge with the node's Pod CIDR
// slice, the bridge as the pods' default gateway, and no masquerade of its
// own (the lab adds the cluster-wide one kindnet has).
func cniConfig(n Node, d nodeDirs) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "lab-pods",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      "cni0",
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": filepath.Join(d.base, "ipam"),
					"ranges":  []any{[]any{map[string]any{"subnet": n.PodCIDR.String()}}},
					"routes":  []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// masqueradeRules masquerade what pods send outside the cluster's Pod
// CIDR, as kindnet does on every node. Traffic to a remote cluster must
// not be masqueraded (the far gateway would drop it as spoofed); keeping it
// from this rule is the route agent's job, which the lab proves.
func masqueradeRules(c Cluster) string {
	return fmt.Sprintf(`table ip lab-masquerade {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %s ip daddr != %s masquerade
	}
}
`, c.PodCIDR, c.PodCIDR)
}

// kubeletConfig is the node's KubeletConfiguration. cgroup v1 must be
// allowed explicitly from kubelet 1.37; each node has its own cgroup root;
// the API server reaches the kubelet at the node's address; resolvConf is a
// file of the lab's, so no pod inherits the host's resolver.
func kubeletConfig(c Cluster, n Node, d nodeDirs, cgroupRoot string) ([]byte, error) {
	conf := map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"cgroupDriver":                "cgroupfs",
		"cgroupRoot":                  cgroupRoot,
		"failCgroupV1":                false,
		"failSwapOn":                  false,
		"containerRuntimeEndpoint":    "unix://" + d.socket(),
		"authentication":              map[string]any{"anonymous": map[string]any{"enabled": true}, "webhook": map[string]any{"enabled": false}},
		"authorization":               map[string]any{"mode": "AlwaysAllow"},
		"address":                     n.IP.String(),
		"readOnlyPort":                0,
		"healthzBindAddress":          "127.0.0.1",
		"clusterDomain":               "cluster.local",
		"clusterDNS":                  []string{c.DNSIP().String()},
		"resolvConf":                  d.file("resolv.conf"),
		"podLogsDir":                  filepath.Join(d.base, "pod-logs"),
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"serializeImagePulls":         false,
		"protectKernelDefaults":       false,
		"evictionHard":                map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
	}
	return yaml.Marshal(conf)
}

// kubeProxyConfig is kube-proxy's KubeProxyConfiguration: nftables mode,
// and conntrack settings left as the host has them (0: kube-proxy may not
// change host-wide sysctls). The cluster's copy, in the ConfigMap
// kube-system/kube-proxy as kubeadm keeps it, carries no node's fields;
// join reads clusterCIDR from it.
func kubeProxyConfig(c Cluster, n *Node, kubeconfig string) ([]byte, error) {
	conf := map[string]any{
		"apiVersion":  "kubeproxy.config.k8s.io/v1alpha1",
		"kind":        "KubeProxyConfiguration",
		"mode":        "nftables",
		"clusterCIDR": c.PodCIDR.String(),
		"conntrack": map[string]any{
			"maxPerCore": 0, "min": 0,
			"tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
			"udpTimeout": "0s", "udpStreamTimeout": "0s",
		},
	}
	if n != nil {
		conf["clientConnection"] = map[string]any{"kubeconfig": kubeconfig}
		conf["hostnameOverride"] = n.Name
		conf["bindAddress"] = n.IP.String()
		conf["healthzBindAddress"] = "127.0.0.1:10256"
		conf["metricsBindAddress"] = "127.0.0.1:10249"
	}
	return yaml.Marshal(conf)
}

// resolvConf is the file kubelet gives pods with dnsPolicy Default and
// hostNetwork pods: the cluster DNS, so that no lookup reaches a resolver
// outside the machine.
func resolvConf(c Cluster) string {
	return "nameserver " + c.DNSIP().String() + "\n"
}

// podRoutes are the routes a node needs to the other nodes' pods: plain
// routes through the node's address, as kindnet programs them.
func podRoutes(c Cluster, self Node) map[netip.Prefix]netip.Addr {
	out := map[netip.Prefix]netip.Addr{}
	for _, n := range c.Nodes {
		if n.Name != self.Name {
			out[n.PodCIDR] = n.IP
		}
	}
	return out
}
