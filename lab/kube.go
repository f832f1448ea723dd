package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/servicesync"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab/topo"
)

// KubeHost is where a --kube lab's API servers listen: an address of the
// underlay namespace on its bridge, which every gateway node reaches.
var KubeHost = netip.MustParseAddr("198.19.255.254")

// KubeNamespace is the Kubernetes namespace of the lab's pods and services,
// the Submariner tutorial's.
const KubeNamespace = "sample"

// kubeDir holds each --kube cluster's API server state and kubeconfig.
const kubeDir = "kube"

// BrokerName names the broker's API server in a --kube lab.
const BrokerName = "broker"

// KubeconfigFile is the admin kubeconfig of a --kube lab's cluster (or of
// BrokerName). It works from inside the lab's namespaces, e.g.
// `ip netns exec <prefix>underlay kubectl --kubeconfig FILE get pods -A`.
func KubeconfigFile(stateDir, cluster string) string {
	return filepath.Join(stateDir, kubeDir, cluster, "kubeconfig")
}

// kubeLogs are the logs of the etcd and API server of cluster (or of
// BrokerName).
func kubeLogs(t *topo.Topology, cluster string) []string {
	return []string{t.LogPath("kube-" + cluster + "-etcd"), t.LogPath("kube-" + cluster + "-apiserver")}
}

// agentProcess names a cluster's `snorkel agent` process.
func agentProcess(cluster string) string { return "agent-" + cluster }

// startKube runs the control plane instead of configured gateways: an API
// server for the broker and for each cluster (etcd and kube-apiserver in
// the underlay namespace), the broker deployed and every cluster joined, the
// objects a kubelet and the controllers would write for the lab's pods and
// services, a `snorkel agent` on each gateway node, and every service
// exported with `snorkel export`. Under Globalnet the plan's global IPs are
// then replaced by those the agents' IPAM allocated.
func (l *Lab) startKube(ctx context.Context) error {
	ul := l.Topo.NS(UnderlayNS)
	if err := ul.AddAddr(UnderlayBridge, netip.PrefixFrom(KubeHost, UnderlayCIDR.Bits())); err != nil {
		return err
	}
	names := []string{BrokerName}
	cidrs := []string{""}
	for _, c := range l.Plan.Clusters {
		names = append(names, c.Spec.ID)
		cidrs = append(cidrs, c.Spec.ServiceCIDR.String())
	}
	// What a lab that was not cleaned up left is stale: start afresh.
	if err := os.RemoveAll(filepath.Join(l.StateDir, kubeDir)); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	servers := make([]*kubelocal.Server, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			servers[i], errs[i] = kubelocal.Start(ctx, kubelocal.Options{
				Name:        name,
				Dir:         filepath.Dir(KubeconfigFile(l.StateDir, name)),
				ServiceCIDR: cidrs[i],
				Address:     KubeHost.String(),
				Spawn: func(proc, bin string, args ...string) (kubelocal.Process, error) {
					return ul.Start("kube-"+proc, bin, args...)
				},
				Dial: ul.DialContext,
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lab: API servers: %w", err)
	}
	l.step("API servers in %s%s at %s: %s", l.Plan.Prefix, UnderlayNS, KubeHost, strings.Join(names, ", "))

	d, err := broker.Deploy(ctx, servers[0].Config(), broker.BrokerOptions{Globalnet: l.Plan.Globalnet()})
	if err != nil {
		return err
	}
	l.step("broker deployed in namespace %s (globalnet %v)", d.Info.Namespace(), l.Plan.Globalnet())
	for i := range l.Plan.Clusters {
		c := &l.Plan.Clusters[i]
		srv := servers[i+1]
		o := broker.JoinOptions{
			ClusterID:    c.Spec.ID,
			CableDriver:  l.Transport,
			ClusterCIDRs: []string{c.Spec.PodCIDR.String()},
			ServiceCIDRs: []string{c.Spec.ServiceCIDR.String()},
		}
		if c.Spec.GlobalCIDR.IsValid() {
			o.GlobalCIDR = c.Spec.GlobalCIDR.String()
		}
		if _, err := broker.Join(ctx, srv.Config(), d.Info, o); err != nil {
			return err
		}
		if err := writeClusterObjects(ctx, srv, c); err != nil {
			return fmt.Errorf("lab: %s: %w", c.Spec.ID, err)
		}
		l.step("%s: joined; %d pods and %d services written to its API server", c.Spec.ID, len(c.Pods), len(c.Services))
	}
	if _, err := l.ensureKeys(); err != nil {
		return err
	}
	for i := range l.Plan.Clusters {
		c := &l.Plan.Clusters[i]
		gw := l.Topo.NS(c.Gateway.NS)
		p, err := gw.Start(agentProcess(c.Spec.ID), l.Topo.Binary(), "agent",
			"--kubeconfig", KubeconfigFile(l.StateDir, c.Spec.ID),
			"--node-name", c.Gateway.NS,
			"--private-ip", c.Gateway.UnderlayIP.Addr().String(),
			"--health-check-ip", c.Gateway.NodeIP.String(),
			"--tun", c.Gateway.TUN,
			"--metrics-address", MetricsAddress,
			"--debug-address", DebugAddress, "--pprof",
			"--wireguard-key-file", KeyFile(l.StateDir, c.Spec.ID))
		if err != nil {
			return err
		}
		l.step("%s: snorkel agent (pid %d, %s, tun %s)", c.Spec.ID, p.PID, l.Transport, c.Gateway.TUN)
	}
	for i := range l.Plan.Clusters {
		c := &l.Plan.Clusters[i]
		for _, s := range c.Services {
			if _, err := ul.Run(ctx, l.Topo.Binary(), "export", "service", s.Spec.Name, "-n", KubeNamespace,
				"--kubeconfig", KubeconfigFile(l.StateDir, c.Spec.ID)); err != nil {
				return err
			}
			l.step("%s: snorkel export service %s -n %s", c.Spec.ID, s.Spec.Name, KubeNamespace)
		}
	}
	for i := range l.Plan.Clusters {
		c := &l.Plan.Clusters[i]
		gw := l.Topo.NS(c.Gateway.NS)
		name := agentProcess(c.Spec.ID)
		err := l.waitFor(ctx, name, func() error {
			return missingRoutes(gw, c.Gateway.TUN, l.Plan.Remotes(c))
		})
		if err != nil {
			return fmt.Errorf("lab: the gateway of %s is not connected: %w\n%s", c.Spec.ID, err, logTail(l.Topo.LogPath(name), 10))
		}
	}
	l.step("agents active: routes to remote clusters point into their TUNs")
	if l.Plan.Globalnet() {
		return l.adoptGlobalIPs(ctx, servers[1:])
	}
	return nil
}

// writeClusterObjects writes what the lab's pods and services would be in
// a real cluster: the Pods with their addresses and readiness (a kubelet's
// job), the Services at the plan's ClusterIPs, and their EndpointSlices
// (the EndpointSlice controller's).
func writeClusterObjects(ctx context.Context, srv *kubelocal.Server, c *ClusterPlan) error {
	kc, err := srv.Client()
	if err != nil {
		return err
	}
	ns := KubeNamespace
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// No controller manager creates the default ServiceAccount, which
	// Pods need.
	if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	service := map[string]string{}
	for _, s := range c.Services {
		for _, b := range s.Backends {
			service[b.Name] = s.Spec.Name
		}
	}
	for _, p := range c.Pods {
		if err := writePod(ctx, kc, c, p, service[p.Name]); err != nil {
			return err
		}
	}
	for _, s := range c.Services {
		if err := writeService(ctx, kc, c, s); err != nil {
			return err
		}
	}
	return nil
}

func writePod(ctx context.Context, kc kubernetes.Interface, c *ClusterPlan, p PodPlan, app string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: KubeNamespace, Labels: map[string]string{}},
		Spec: corev1.PodSpec{
			NodeName:   c.Gateway.NS,
			Containers: []corev1.Container{{Name: "whereami", Image: "snorkel-lab/whereami", Ports: []corev1.ContainerPort{{ContainerPort: WhereamiPort}}}},
		},
	}
	if app != "" {
		pod.Labels["app"] = app
	}
	created, err := kc.CoreV1().Pods(KubeNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	created.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      p.IP.String(),
		PodIPs:     []corev1.PodIP{{IP: p.IP.String()}},
		HostIP:     c.Gateway.NodeIP.String(),
		StartTime:  &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
	}
	_, err = kc.CoreV1().Pods(KubeNamespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

func writeService(ctx context.Context, kc kubernetes.Interface, c *ClusterPlan, s ServicePlan) error {
	port := int32(s.Spec.Port)
	if s.Spec.Headless {
		port = int32(s.Spec.TargetPort)
	}
	target := int32(s.Spec.TargetPort)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s.Spec.Name, Namespace: KubeNamespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": s.Spec.Name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP}},
		},
	}
	svc.Spec.Ports[0].TargetPort.IntVal = target
	if s.Spec.Headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	} else {
		svc.Spec.ClusterIP = s.Spec.ClusterIP.String()
	}
	if _, err := kc.CoreV1().Services(KubeNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: s.Spec.Name + "-lab", Namespace: KubeNamespace, Labels: map[string]string{discoveryv1.LabelServiceName: s.Spec.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: &target, Protocol: new(corev1.ProtocolTCP)}},
	}
	for _, b := range s.Backends {
		ep := discoveryv1.Endpoint{
			Addresses:  []string{b.IP.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
			NodeName:   new(c.Gateway.NS),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: KubeNamespace, Name: b.Name},
		}
		if s.Spec.Headless {
			ep.Hostname = new(b.Name)
		}
		slice.Endpoints = append(slice.Endpoints, ep)
	}
	_, err := kc.DiscoveryV1().EndpointSlices(KubeNamespace).Create(ctx, slice, metav1.CreateOptions{})
	return err
}

// adoptGlobalIPs waits until each cluster's IPAM has given every exported
// ClusterIP service and every pod of an exported headless service its
// global IP, writes them into the plan for the demo, and waits until each
// gateway translates them.
func (l *Lab) adoptGlobalIPs(ctx context.Context, servers []*kubelocal.Server) error {
	for i := range l.Plan.Clusters {
		c := &l.Plan.Clusters[i]
		dc, err := dynamic.NewForConfig(servers[i].Config())
		if err != nil {
			return err
		}
		var ips map[string]netip.Addr
		err = l.waitFor(ctx, agentProcess(c.Spec.ID), func() error {
			var err error
			ips, err = globalIngressIPs(ctx, dc)
			if err != nil {
				return err
			}
			for _, want := range globalIPNames(c) {
				if _, ok := ips[want]; !ok {
					return fmt.Errorf("no global IP for %s yet", want)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("lab: %s's Globalnet IPAM: %w", c.Spec.ID, err)
		}
		for j := range c.Services {
			s := &c.Services[j]
			if !s.Spec.Headless {
				s.GlobalIP = ips[s.Spec.Name]
				continue
			}
			for k := range s.Backends {
				s.Backends[k].GlobalIP = ips[s.Backends[k].Name]
			}
		}
		for j := range c.Pods {
			if a, ok := ips[c.Pods[j].Name]; ok {
				c.Pods[j].GlobalIP = a
			}
		}
		want := make([]netip.Addr, 0, len(ips))
		for _, a := range ips {
			want = append(want, a)
		}
		gw := l.Topo.NS(c.Gateway.NS)
		err = l.waitFor(ctx, agentProcess(c.Spec.ID), func() error {
			st, err := fetchStats(ctx, gw)
			if err != nil {
				return err
			}
			if st.Globalnet == nil {
				return errors.New("the gateway's /status has no Globalnet section")
			}
			for _, a := range want {
				if !slices.ContainsFunc(st.Globalnet.Ingress, func(in gateway.IngressStatus) bool { return in.GlobalIP == a }) {
					return fmt.Errorf("the gateway does not translate %s yet", a)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("lab: %s: %w", c.Spec.ID, err)
		}
		l.step("%s: %d global ingress IPs allocated by the IPAM, translated by the gateway", c.Spec.ID, len(want))
	}
	return nil
}

// globalIPNames are the services and headless pods of c that get global
// IPs: the names globalIngressIPs keys them by.
func globalIPNames(c *ClusterPlan) []string {
	var out []string
	for _, s := range c.Services {
		if !s.Spec.Headless {
			out = append(out, s.Spec.Name)
			continue
		}
		for _, b := range s.Backends {
			out = append(out, b.Name)
		}
	}
	return out
}

// globalIngressIPs reads the allocated GlobalIngressIPs of the lab's
// namespace, by service name or by pod name.
func globalIngressIPs(ctx context.Context, dc dynamic.Interface) (map[string]netip.Addr, error) {
	list, err := dc.Resource(submv1.GlobalIngressIPResource).Namespace(KubeNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]netip.Addr{}
	for i := range list.Items {
		g, err := submv1.FromUnstructured[submv1.GlobalIngressIP](&list.Items[i])
		if err != nil {
			return nil, err
		}
		a, err := netip.ParseAddr(g.Status.AllocatedIP)
		if err != nil {
			continue
		}
		switch {
		case g.Spec.ServiceRef != nil && g.Spec.Target == submv1.ClusterIPService:
			out[g.Spec.ServiceRef.Name] = a
		case g.Spec.PodRef != nil && g.Spec.Target == submv1.HeadlessServicePod:
			out[g.Spec.PodRef.Name] = a
		}
	}
	return out, nil
}

// kubeReadyTimeout bounds the wait for a --kube lab's agents: they elect
// a leader, publish, and configure their gateways from the broker's
// objects, which takes longer than starting a configured gateway.
const kubeReadyTimeout = 2 * time.Minute

// importChecks checks, on the first cluster's API server, that every
// service the other clusters export is imported there: a ServiceImport and
// an EndpointSlice from the exporting cluster with the addresses to reach
// it at (the ClusterIP, its global IP under Globalnet, or a headless
// service's pods).
func (l *Lab) importChecks(ctx context.Context) []Check {
	home := &l.Plan.Clusters[0]
	var checks []Check
	cfg, err := clientcmd.BuildConfigFromFlags("", KubeconfigFile(l.StateDir, home.Spec.ID))
	if err != nil {
		return []Check{{Kind: "import", What: home.Spec.ID, Detail: err.Error()}}
	}
	cfg.Dial = l.Topo.NS(UnderlayNS).DialContext
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return []Check{{Kind: "import", What: home.Spec.ID, Detail: err.Error()}}
	}
	mcs, err := mcsclient.NewForConfig(cfg)
	if err != nil {
		return []Check{{Kind: "import", What: home.Spec.ID, Detail: err.Error()}}
	}
	for _, r := range l.Plan.Remotes(home) {
		for _, s := range r.Services {
			c := Check{Kind: "import", What: fmt.Sprintf("%s/%s from %s in %s", KubeNamespace, s.Spec.Name, r.Spec.ID, home.Spec.ID)}
			want := importAddresses(s)
			var got []string
			err := l.waitFor(ctx, "", func() error {
				if _, err := mcs.MulticlusterV1alpha1().ServiceImports(KubeNamespace).Get(ctx, s.Spec.Name, metav1.GetOptions{}); err != nil {
					return fmt.Errorf("ServiceImport: %w", err)
				}
				list, err := kc.DiscoveryV1().EndpointSlices(KubeNamespace).List(ctx, metav1.ListOptions{
					LabelSelector: servicesync.LabelSourceCluster + "=" + r.Spec.ID + "," + servicesync.LabelServiceName + "=" + s.Spec.Name,
				})
				if err != nil {
					return err
				}
				got = got[:0]
				for _, sl := range list.Items {
					for _, ep := range sl.Endpoints {
						got = append(got, ep.Addresses...)
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					return fmt.Errorf("EndpointSlice addresses %v, want %v", got, want)
				}
				return nil
			})
			c.OK = err == nil
			if c.OK {
				c.Detail = "ServiceImport and EndpointSlice at " + strings.Join(got, ", ")
			} else {
				c.Detail = err.Error()
			}
			checks = append(checks, c)
		}
	}
	return checks
}

// importAddresses are the addresses the importing clusters see for s,
// sorted.
func importAddresses(s ServicePlan) []string {
	var out []string
	switch {
	case !s.Spec.Headless && s.GlobalIP.IsValid():
		out = append(out, s.GlobalIP.String())
	case !s.Spec.Headless:
		out = append(out, s.Spec.ClusterIP.String())
	default:
		for _, b := range s.Backends {
			if b.GlobalIP.IsValid() {
				out = append(out, b.GlobalIP.String())
			} else {
				out = append(out, b.IP.String())
			}
		}
	}
	slices.Sort(out)
	return out
}
