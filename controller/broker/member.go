package broker

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/natdiscovery"
	"github.com/snorkel-net/snorkel/deploy"
	"github.com/snorkel-net/snorkel/transport"
)

// Names of what DeployMember runs in api.AgentNamespace.
const (
	// AgentDaemonSet runs the agent on every gateway node.
	AgentDaemonSet = "snorkel-agent"
	// RouteAgentDaemonSet runs the route agent on every node, named like
	// Submariner's.
	RouteAgentDaemonSet = "submariner-routeagent"
	// DNSDeployment runs dnsd; DNSService is its Service, whose ClusterIP
	// CoreDNS forwards clusterset.local to. Both are named like
	// Lighthouse's DNS server's.
	DNSDeployment = "submariner-lighthouse-coredns"
	DNSService    = "submariner-lighthouse-coredns"
	// GatewayLabel marks the nodes the agent runs on, with value "true".
	GatewayLabel = "submariner.io/gateway"
)

// MemberManifests is the manifests' base of a member cluster.
const MemberManifests = "member"

// MemberOptions configures DeployMember.
type MemberOptions struct {
	// Image is the Snorkel image the agent, the route agent and dnsd run
	// (--image); default deploy.DefaultImage.
	Image string
}

// MemberDeployment is what DeployMember set up.
type MemberDeployment struct {
	ClusterID string
	Image     string
	// DNSAddress is the ClusterIP of DNSService.
	DNSAddress string
	// Domains are the zones dnsd serves and CoreDNS forwards to it:
	// clusterset.local and the custom domains.
	Domains []string
	// CoreDNS tells whether the cluster's CoreDNS was changed; if it was
	// not found, Stanza is what the cluster's DNS needs.
	CoreDNS CoreDNSResult
	Stanza  string
	// CoreDNSCustom is the custom ConfigMap (NAMESPACE/NAME) CoreDNS was
	// configured in, with --coredns-custom-configmap; empty for the
	// Corefile.
	CoreDNSCustom string
	// GatewayNodes are the nodes labelled GatewayLabel=true, where the
	// agent runs; none means no gateway yet.
	GatewayNodes []string
	// LoadBalancerPorts are the UDP ports of api.GatewayLoadBalancer when
	// the cluster joined with --load-balancer; none without.
	LoadBalancerPorts []int32
}

// DeployMember runs Snorkel in a cluster Join set up: the agent DaemonSet
// on the gateway nodes, the route agent DaemonSet on every node, dnsd and
// its Service (the member manifests but for
// the access objects Join applied), and a forward of clusterset.local to
// dnsd in the cluster's CoreDNS. Running it again changes nothing unless
// the image changed.
func DeployMember(ctx context.Context, member *rest.Config, o MemberOptions) (*MemberDeployment, error) {
	if o.Image == "" {
		o.Image = deploy.DefaultImage
	}
	objs, err := memberWorkloads(o.Image)
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(member)
	if err != nil {
		return nil, err
	}
	cfg, err := api.LoadAgentConfig(ctx, kc, api.AgentNamespace)
	if err != nil {
		return nil, err
	}
	if err := setAgentMemoryRequest(objs, cfg.CableDriver); err != nil {
		return nil, err
	}
	if err := deploy.Apply(ctx, member, objs, false); err != nil {
		return nil, err
	}
	svc, err := kc.CoreV1().Services(api.AgentNamespace).Get(ctx, DNSService, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading dnsd's Service %s/%s: %w", api.AgentNamespace, DNSService, err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == "None" {
		return nil, fmt.Errorf("dnsd's Service %s/%s has no ClusterIP for CoreDNS to forward to; delete it and deploy again", api.AgentNamespace, DNSService)
	}
	d := &MemberDeployment{ClusterID: cfg.ClusterID, Image: o.Image, DNSAddress: svc.Spec.ClusterIP}
	d.Domains = cfg.DNSZones()
	d.CoreDNSCustom = cfg.CoreDNSCustomConfigMap
	if d.CoreDNSCustom != "" {
		d.CoreDNS, err = configureCustomCoreDNS(ctx, kc, d.CoreDNSCustom, d.DNSAddress, cfg.CustomDomains)
	} else {
		d.CoreDNS, err = configureCoreDNS(ctx, kc, d.DNSAddress, cfg.CustomDomains)
	}
	if err != nil {
		return nil, err
	}
	if d.CoreDNS == CoreDNSNotFound {
		if d.Stanza, err = deploy.CoreDNSStanza(d.DNSAddress, cfg.CustomDomains...); err != nil {
			return nil, err
		}
	}
	if d.GatewayNodes, err = gatewayNodes(ctx, kc); err != nil {
		return nil, err
	}
	if d.LoadBalancerPorts, err = applyGatewayLoadBalancer(ctx, kc, cfg); err != nil {
		return nil, err
	}
	return d, nil
}

// applyGatewayLoadBalancer puts a Service of type LoadBalancer in front of
// the agents' UDP ports, the gateway's and NAT discovery's, when the
// cluster joined with --load-balancer, and removes it when it did not.
// The agents run on the host network, so the ports are the node's; the
// external traffic policy Local keeps the sources the gateways see, which
// NAT discovery reports and the tunnels authenticate.
func applyGatewayLoadBalancer(ctx context.Context, kc kubernetes.Interface, cfg *api.AgentConfig) ([]int32, error) {
	services := kc.CoreV1().Services(api.AgentNamespace)
	if !cfg.LoadBalancer {
		err := services.Delete(ctx, api.GatewayLoadBalancer, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("removing the gateway's load balancer %s/%s (the cluster joined without --load-balancer): %w", api.AgentNamespace, api.GatewayLoadBalancer, err)
		}
		return nil, nil
	}
	ports := []corev1.ServicePort{
		{Name: "cable-encaps", Protocol: corev1.ProtocolUDP, Port: int32(cfg.Port()), TargetPort: intstr.FromInt32(int32(cfg.Port()))},
		{Name: "natt-discovery", Protocol: corev1.ProtocolUDP, Port: natdiscovery.DefaultPort, TargetPort: intstr.FromInt32(natdiscovery.DefaultPort)},
	}
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: api.GatewayLoadBalancer, Namespace: api.AgentNamespace,
			Labels: map[string]string{"app.kubernetes.io/name": AgentDaemonSet, "app.kubernetes.io/part-of": "snorkel"}},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			Selector:              map[string]string{"app.kubernetes.io/name": AgentDaemonSet},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 ports,
		},
	}
	have, err := services.Get(ctx, api.GatewayLoadBalancer, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = services.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		// Keep what the API server and the cloud set: the node ports, the
		// ClusterIP and the status.
		for i := range ports {
			for _, p := range have.Spec.Ports {
				if p.Name == ports[i].Name && p.Protocol == ports[i].Protocol {
					ports[i].NodePort = p.NodePort
				}
			}
		}
		have.Spec.Type, have.Spec.Selector, have.Spec.ExternalTrafficPolicy, have.Spec.Ports = want.Spec.Type, want.Spec.Selector, want.Spec.ExternalTrafficPolicy, ports
		_, err = services.Update(ctx, have, metav1.UpdateOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("the gateway's load balancer %s/%s: %w", api.AgentNamespace, api.GatewayLoadBalancer, err)
	}
	return []int32{ports[0].Port, ports[1].Port}, nil
}

// Memory requests of the agent, by cable driver, set from the gateways'
// peak memory under load in `snorkel benchmark` (README, Performance). An
// ESP or VXLAN gateway peaks within 64 MiB, and the agent's control plane
// adds what it holds idle, about 41 MiB in the real-node lab. A WireGuard
// gateway is wireguard-go's device, whose queues hold a 64 KiB buffer per
// packet in flight: like plain wireguard-go's, it peaked at about 250 MiB.
const (
	agentMemoryRequest          = "96Mi"
	agentMemoryRequestWireGuard = "320Mi"
)

// setAgentMemoryRequest sets the memory request of the agent DaemonSet in
// objs for the cluster's cable driver.
func setAgentMemoryRequest(objs []*unstructured.Unstructured, driver string) error {
	req := agentMemoryRequest
	if driver == transport.WireGuard {
		req = agentMemoryRequestWireGuard
	}
	for _, u := range objs {
		if u.GetKind() != "DaemonSet" || u.GetName() != AgentDaemonSet {
			continue
		}
		cs, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		if err != nil {
			return fmt.Errorf("the agent DaemonSet's containers: %w", err)
		}
		for _, c := range cs {
			c := c.(map[string]any)
			if c["name"] != "agent" {
				continue
			}
			if err := unstructured.SetNestedField(c, req, "resources", "requests", "memory"); err != nil {
				return fmt.Errorf("the agent container's memory request: %w", err)
			}
		}
		return unstructured.SetNestedSlice(u.Object, cs, "spec", "template", "spec", "containers")
	}
	return fmt.Errorf("the member manifests have no DaemonSet %s", AgentDaemonSet)
}

// memberWorkloads are the member manifests DeployMember applies: all but
// the access objects, which Join applies from their definitions.
func memberWorkloads(image string) ([]*unstructured.Unstructured, error) {
	objs, err := deploy.Manifests(MemberManifests, deploy.ManifestOptions{Image: image})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(objs, func(u *unstructured.Unstructured) bool { return accessKinds[u.GetKind()] }), nil
}
