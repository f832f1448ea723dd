package nodes

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Client is a client of one of the lab's clusters (or Broker), through the
// lab's kubeconfig.
func Client(stateDir, cluster string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: KubeconfigFile(stateDir)},
		&clientcmd.ConfigOverrides{CurrentContext: ContextPrefix + cluster}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("nodes: %s: %w", cluster, err)
	}
	return kubernetes.NewForConfig(cfg)
}

// GatewayLabel marks the nodes Snorkel's agent runs on.
const GatewayLabel = "submariner.io/gateway"

// clusterObjects writes what a cluster has before its kubelets start, as
// kind's node images and kubeadm leave it: the Node objects with their Pod
// CIDR slices (the gateway node labelled, as the tutorial's kind
// configuration labels it), kube-proxy's configuration, and CoreDNS.
func (l *Lab) clusterObjects(ctx context.Context, c Cluster, im Images) error {
	kc, err := Client(l.StateDir, c.Name)
	if err != nil {
		return err
	}
	for _, n := range c.Nodes {
		labels := map[string]string{corev1.LabelHostname: n.Name, corev1.LabelOSStable: "linux"}
		if n.Gateway {
			labels[GatewayLabel] = "true"
		}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels},
			Spec:       corev1.NodeSpec{PodCIDR: n.PodCIDR.String(), PodCIDRs: []string{n.PodCIDR.String()}},
		}
		if _, err := kc.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("nodes: %s: node %s: %w", c.Name, n.Name, err)
		}
	}
	proxy, err := kubeProxyConfig(c, nil, "")
	if err != nil {
		return err
	}
	objs := []func() error{
		func() error {
			_, err := kc.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Labels: map[string]string{"app": "kube-proxy"}},
				Data:       map[string]string{"config.conf": string(proxy)},
			}, metav1.CreateOptions{})
			return err
		},
	}
	objs = append(objs, coreDNSObjects(ctx, kc, c)...)
	for _, create := range objs {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("nodes: %s: %w", c.Name, err)
		}
	}
	l.step("cluster %s: nodes %s, kube-proxy configuration, CoreDNS at %s", c.Name, strings.Join(nodeNames(c), ", "), c.DNSIP())
	return nil
}

func nodeNames(c Cluster) []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// corefile is the cluster DNS's configuration as kubeadm writes it, less
// the forward to the host's resolver: no lookup leaves the machine, and a
// name outside the cluster is refused. reload picks up the clusterset
// section `snorkel join` adds within seconds.
const corefile = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    cache 30
    loop
    reload 2s
    loadbalance
}
`

// coreDNSObjects are the cluster DNS as kubeadm installs it: ServiceAccount,
// access, ConfigMap, Deployment and the kube-dns Service at DNSIP.
func coreDNSObjects(ctx context.Context, kc kubernetes.Interface, c Cluster) []func() error {
	ns := metav1.NamespaceSystem
	labels := map[string]string{"k8s-app": "kube-dns"}
	one := int32(1)
	return []func() error{
		func() error {
			_, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "coredns"}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
				Rules: []rbacv1.PolicyRule{
					{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
					{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:coredns"},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "coredns", Namespace: ns}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "coredns"},
				Data:       map[string]string{"Corefile": corefile},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kc.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "coredns", Labels: labels},
				Spec: appsv1.DeploymentSpec{
					Replicas: &one,
					Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{
							ServiceAccountName: "coredns",
							DNSPolicy:          corev1.DNSDefault,
							PriorityClassName:  "system-cluster-critical",
							Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
							Containers: []corev1.Container{{
								Name:            "coredns",
								Image:           CoreDNSImage,
								ImagePullPolicy: corev1.PullNever,
								Args:            []string{"-conf", "/etc/coredns/Corefile"},
								Ports: []corev1.ContainerPort{
									{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
									{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
								},
								ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}}, PeriodSeconds: 2},
								VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
							}},
							Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
								LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"},
								Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
							}}}},
						},
					},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := kc.CoreV1().Services(ns).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Labels: labels},
				Spec: corev1.ServiceSpec{
					Selector:  labels,
					ClusterIP: c.DNSIP().String(),
					Ports: []corev1.ServicePort{
						{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
						{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
					},
				},
			}, metav1.CreateOptions{})
			return err
		},
	}
}

// waitNodesReady waits until every node of every cluster is Ready.
func (l *Lab) waitNodesReady(ctx context.Context) error {
	for _, c := range l.Scenario.Clusters {
		kc, err := Client(l.StateDir, c.Name)
		if err != nil {
			return err
		}
		if err := waitFor(ctx, settle, "the nodes of "+c.Name+" to be Ready", func() error {
			nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			var notReady []string
			for _, n := range nodes.Items {
				if !nodeReady(n) {
					notReady = append(notReady, n.Name)
				}
			}
			if len(notReady) > 0 {
				return fmt.Errorf("not Ready: %s", strings.Join(notReady, ", "))
			}
			return nil
		}); err != nil {
			return err
		}
	}
	l.step("every node Ready")
	return nil
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitDNS waits until the cluster's CoreDNS is ready.
func (l *Lab) waitDNS(ctx context.Context, c Cluster) error {
	kc, err := Client(l.StateDir, c.Name)
	if err != nil {
		return err
	}
	return waitFor(ctx, settle, "CoreDNS of "+c.Name, func() error {
		d, err := kc.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas < 1 {
			return fmt.Errorf("%d of %d replicas ready", d.Status.ReadyReplicas, *d.Spec.Replicas)
		}
		return nil
	})
}
