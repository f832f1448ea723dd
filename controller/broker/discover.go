package broker

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// kubernetesServiceCIDR is the ServiceCIDR object the API server keeps for
// its --service-cluster-ip-range.
const kubernetesServiceCIDR = "kubernetes"

// discoverServiceCIDRs reads the cluster's Service CIDRs from the
// ServiceCIDR object the API server keeps. It returns no CIDRs, and why,
// when the cluster does not tell.
func discoverServiceCIDRs(ctx context.Context, kc kubernetes.Interface) ([]string, string) {
	sc, err := kc.NetworkingV1().ServiceCIDRs().Get(ctx, kubernetesServiceCIDR, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Sprintf("reading ServiceCIDR %q: %v", kubernetesServiceCIDR, err)
	}
	if len(sc.Spec.CIDRs) == 0 {
		return nil, fmt.Sprintf("ServiceCIDR %q lists no CIDRs", kubernetesServiceCIDR)
	}
	return sc.Spec.CIDRs, ""
}

// discoverPodCIDRs finds the cluster's Pod CIDRs: the --cluster-cidr of a
// kube-controller-manager pod, else the clusterCIDR of kube-proxy's
// configuration, else the podCIDRs of the cluster's node when
// it has one (with several, each node holds only its own slice of the
// cluster's range). It returns no CIDRs, and why, when the cluster does not
// tell.
func discoverPodCIDRs(ctx context.Context, kc kubernetes.Interface) ([]string, string) {
	var why []string
	pods, err := kc.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=kube-controller-manager"})
	if err != nil {
		why = append(why, fmt.Sprintf("listing kube-controller-manager pods: %v", err))
	} else {
		for _, p := range pods.Items {
			for _, c := range p.Spec.Containers {
				if v := flagValue(append(append([]string{}, c.Command...), c.Args...), "--cluster-cidr"); v != "" {
					return strings.Split(v, ","), ""
				}
			}
		}
		why = append(why, "no kube-controller-manager pod in kube-system shows --cluster-cidr")
	}
	cidrs, reason := kubeProxyClusterCIDR(ctx, kc)
	if len(cidrs) > 0 {
		return cidrs, ""
	}
	why = append(why, reason)
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	switch {
	case err != nil:
		why = append(why, fmt.Sprintf("listing nodes: %v", err))
	case len(nodes.Items) == 1 && len(nodes.Items[0].Spec.PodCIDRs) > 0:
		return nodes.Items[0].Spec.PodCIDRs, ""
	case len(nodes.Items) == 1 && nodes.Items[0].Spec.PodCIDR != "":
		return []string{nodes.Items[0].Spec.PodCIDR}, ""
	case len(nodes.Items) == 0:
		why = append(why, "the cluster has no nodes")
	case len(nodes.Items) == 1:
		why = append(why, "its node has no podCIDRs")
	default:
		why = append(why, fmt.Sprintf("its %d nodes each hold only their own podCIDRs", len(nodes.Items)))
	}
	return nil, strings.Join(why, "; ")
}

// flagValue finds --name=value or --name value in a command line.
func flagValue(argv []string, name string) string {
	for i, a := range argv {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(argv) {
			return argv[i+1]
		}
	}
	return ""
}

// kubeProxyConfigMap is where kubeadm (and kind) keep kube-proxy's
// KubeProxyConfiguration, under kubeProxyConfigKey.
const (
	kubeProxyConfigMap = "kube-proxy"
	kubeProxyConfigKey = "config.conf"
)

// kubeProxyClusterCIDR reads clusterCIDR, the cluster's Pod CIDRs
// (comma-separated), from kube-proxy's ConfigMap; it returns why not when
// there is none.
func kubeProxyClusterCIDR(ctx context.Context, kc kubernetes.Interface) ([]string, string) {
	cm, err := kc.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, kubeProxyConfigMap, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Sprintf("reading ConfigMap kube-system/%s: %v", kubeProxyConfigMap, err)
	}
	var conf struct {
		ClusterCIDR string `json:"clusterCIDR"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data[kubeProxyConfigKey]), &conf); err != nil {
		return nil, fmt.Sprintf("ConfigMap kube-system/%s %s: %v", kubeProxyConfigMap, kubeProxyConfigKey, err)
	}
	if conf.ClusterCIDR == "" {
		return nil, fmt.Sprintf("ConfigMap kube-system/%s sets no clusterCIDR", kubeProxyConfigMap)
	}
	return strings.Split(conf.ClusterCIDR, ","), ""
}
