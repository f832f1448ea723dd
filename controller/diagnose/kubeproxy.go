package diagnose

import (
	"context"
	"strings"

	"github.com/snorkel-net/snorkel/controller/internal/statusline"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The ConfigMap kubeadm keeps kube-proxy's configuration in.
const (
	kubeProxyConfigMap = "kube-proxy"
	kubeProxyConfigKey = "config.conf"
)

// kubeProxyModes says how Snorkel fares with each kube-proxy mode: a
// remote cluster's traffic leaves the gateway's TUN device to a pod or,
// under Globalnet, to a ClusterIP that kube-proxy balances on the gateway
// node; every mode that serves ClusterIPs to routed traffic does.
var kubeProxyModes = map[string]struct {
	mark statusline.Mark
	note string
}{
	"iptables": {statusline.OK, "supported"},
	"nftables": {statusline.OK, "supported"},
	"ipvs":     {statusline.Warn, "not covered by Snorkel's tests: pod-to-pod traffic does not depend on it, but a Globalnet ingress to a ClusterIP is balanced by it on the gateway node"},
}

func checkKubeProxyMode(ctx context.Context, c *cluster, r *result) {
	cm, err := c.Kube.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, kubeProxyConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		r.Warn("No ConfigMap %s/%s: kube-proxy is not deployed by kubeadm, or a CNI replaces it; Snorkel needs ClusterIPs served to traffic routed from the gateway",
			metav1.NamespaceSystem, kubeProxyConfigMap)
		return
	}
	if err != nil {
		r.Fail("Cannot read the kube-proxy ConfigMap %s/%s: %v", metav1.NamespaceSystem, kubeProxyConfigMap, err)
		return
	}
	var cfg struct {
		Mode string `json:"mode"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data[kubeProxyConfigKey]), &cfg); err != nil {
		r.Fail("The kube-proxy configuration (%s/%s key %s) is not YAML: %v", metav1.NamespaceSystem, kubeProxyConfigMap, kubeProxyConfigKey, err)
		return
	}
	mode := strings.TrimSpace(cfg.Mode)
	if mode == "" {
		// kube-proxy's default on Linux.
		mode = "iptables"
	}
	m, ok := kubeProxyModes[mode]
	if !ok {
		r.Fail("The kube-proxy mode %q is not supported: use iptables or nftables (`mode:` in %s/%s key %s)", mode, metav1.NamespaceSystem, kubeProxyConfigMap, kubeProxyConfigKey)
		return
	}
	r.Add(m.mark, "The kube-proxy mode %q is %s", mode, m.note)
}
