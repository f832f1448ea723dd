package nodes

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Tools are the Kubernetes programs the lab runs, as `make tools` builds
// them into .cache/bin (controller/kubelocal/build-kube).
type Tools struct {
	Kubelet, KubeProxy, ControllerManager, Scheduler, Kubectl string
}

// ToolsIn names the programs of dir built for version ("v1.37.2").
func ToolsIn(dir, version string) Tools {
	p := func(name string) string { return filepath.Join(dir, name+"-"+version) }
	return Tools{
		Kubelet:           p("kubelet"),
		KubeProxy:         p("kube-proxy"),
		ControllerManager: p("kube-controller-manager"),
		Scheduler:         p("kube-scheduler"),
		Kubectl:           p("kubectl"),
	}
}

// hostPrograms are what the nodes run from Debian, with the package that
// has each.
var hostPrograms = []struct{ path, pkg string }{
	{"containerd", "containerd"},
	{"ctr", "containerd"},
	{"runc", "runc"},
	{"nsenter", "util-linux"},
	{"/usr/lib/cni/bridge", "containernetworking-plugins"},
	{"/usr/lib/cni/host-local", "containernetworking-plugins"},
	{"/usr/lib/cni/portmap", "containernetworking-plugins"},
	{"/usr/lib/cni/loopback", "containernetworking-plugins"},
	{"nft", "nftables"},
}

// check says everything that is missing at once.
func (t Tools) check() error {
	var missing []string
	for _, p := range []struct{ name, path string }{
		{"kubelet", t.Kubelet}, {"kube-proxy", t.KubeProxy},
		{"kube-controller-manager", t.ControllerManager}, {"kube-scheduler", t.Scheduler}, {"kubectl", t.Kubectl},
	} {
		if _, err := os.Stat(p.path); err != nil {
			missing = append(missing, fmt.Sprintf("%s: %s not found; run make tools", p.name, p.path))
		}
	}
	for _, p := range hostPrograms {
		var err error
		if strings.HasPrefix(p.path, "/") {
			_, err = os.Stat(p.path)
		} else {
			_, err = exec.LookPath(p.path)
		}
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s: not found; apt-get install %s", p.path, p.pkg))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return errors.New("nodes: the real-node lab needs:\n  " + strings.Join(missing, "\n  "))
}
