package broker

import (
	"context"
	"fmt"
	"io"
	"math/bits"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/deploy"
)

// commandTimeout bounds one command's work against the API servers.
const commandTimeout = 5 * time.Minute

// DeployBrokerCommand is what `snorkel deploy-broker` is asked to do.
type DeployBrokerCommand struct {
	// Kubeconfig and Context name the broker cluster; empty means
	// $KUBECONFIG or ~/.kube/config and its current context.
	Kubeconfig, Context string
	Broker              BrokerOptions
	// PSKFrom is a broker-info.subm to take the pre-shared key from,
	// instead of keeping or making one.
	PSKFrom string
	// Out is where to write the broker information file.
	Out string
}

// RunDeployBroker is `snorkel deploy-broker`: it runs Deploy against the
// kubeconfig context, writes broker-info.subm and tells out what it did.
func RunDeployBroker(c DeployBrokerCommand, out io.Writer) error {
	o := c.Broker
	if c.PSKFrom != "" {
		in, err := ReadInfoFile(c.PSKFrom)
		if err != nil {
			return fmt.Errorf("--ipsec-psk-from: %w", err)
		}
		o.PSK = in.IPSecPSK.Data[pskKey]
	}
	cfg, err := LoadKubeconfig(c.Kubeconfig, c.Context)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	d, err := Deploy(ctx, cfg, o)
	if err != nil {
		return err
	}
	if err := d.Info.WriteFile(c.Out); err != nil {
		return err
	}
	gn := "Globalnet off"
	if d.GlobalnetRange.IsValid() {
		gn = fmt.Sprintf("Globalnet on: %s, a /%d per cluster", d.GlobalnetRange, 32-bits.TrailingZeros64(d.GlobalnetClusterSize))
	}
	if !d.GlobalnetRange.IsValid() {
		// Clusterset IPs are not supported with Globalnet.
		cs := "off by default"
		if d.ClustersetIP {
			cs = "on by default"
		}
		gn += fmt.Sprintf("; clusterset IPs from %s, %s", d.ClustersetIPRange, cs)
	}
	fmt.Fprintf(out, "broker ready at %s in namespace %s (%s)\n", d.Info.BrokerURL, d.Info.Namespace(), gn)
	fmt.Fprintf(out, "client token of ServiceAccount %s/%s valid until %s\n", d.Info.Namespace(), BrokerClientServiceAccount, d.TokenExpires.UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "wrote %s: join each member with `snorkel join %s --clusterid ID`; it holds the broker token and the IPsec pre-shared key, keep it secret\n", c.Out, c.Out)
	return nil
}

// JoinCommand is what `snorkel join` is asked to do.
type JoinCommand struct {
	// InfoFile is the broker information file to join with.
	InfoFile string
	// Kubeconfig and Context name the joining cluster; empty means
	// $KUBECONFIG or ~/.kube/config and its current context.
	Kubeconfig, Context string
	Join                JoinOptions
	Member              MemberOptions
	// NoDeploy only registers the cluster and stores the agent's
	// configuration and RBAC; the user runs the agent, the route agent and
	// dnsd.
	NoDeploy bool
	// LabelGateway labels a worker node as the gateway when no node is
	// labelled (--label-gateway).
	LabelGateway bool
	// BrokerURL, if set, is the broker's API server instead of the one
	// the broker information file names (--broker-url).
	BrokerURL string
}

// RunJoin is `snorkel join`: it runs Join against the kubeconfig context,
// then DeployMember unless NoDeploy, and tells out what it did.
func RunJoin(c JoinCommand, out io.Writer) error {
	if !c.NoDeploy && c.Member.Image != "" {
		if err := deploy.ValidateImage(c.Member.Image); err != nil {
			return err
		}
	}
	info, err := ReadInfoFile(c.InfoFile)
	if err != nil {
		return err
	}
	if c.BrokerURL != "" {
		if err := validateBrokerURL(c.BrokerURL); err != nil {
			return err
		}
		fmt.Fprintf(out, "broker at %s (--broker-url; %s names %s)\n", c.BrokerURL, c.InfoFile, info.BrokerURL)
		info.BrokerURL = c.BrokerURL
	}
	cfg, err := LoadKubeconfig(c.Kubeconfig, c.Context)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	ac, err := Join(ctx, cfg, info, c.Join)
	if err != nil {
		return err
	}
	global := ""
	if ac.GlobalCIDR != "" {
		global = ", global CIDR " + ac.GlobalCIDR
	}
	fmt.Fprintf(out, "cluster %s joined the broker at %s (namespace %s): pods %s, services %s%s, cable driver %s\n",
		ac.ClusterID, ac.BrokerURL, ac.BrokerNamespace, strings.Join(ac.ClusterCIDRs, ","), strings.Join(ac.ServiceCIDRs, ","), global, ac.CableDriver)
	if ac.ClustersetIPCIDR != "" {
		def := "only for services exported with --use-clusterset-ip"
		if ac.ClustersetIPEnabled {
			def = "for every exported service unless it is exported with --use-clusterset-ip=false"
		}
		fmt.Fprintf(out, "clusterset IP CIDR %s (VIPs of the services this cluster exports first, %s)\n", ac.ClustersetIPCIDR, def)
	}
	fmt.Fprintf(out, "agent configuration in Secret %s/%s, ServiceAccount %s\n", api.AgentNamespace, api.AgentSecretName, api.AgentServiceAccount)
	printGatewaySettings(out, &ac.GatewaySettings)
	if ac.BrokerInsecure {
		fmt.Fprintln(out, "the broker's certificate is not checked (--check-broker-certificate=false), by join or by the agent")
	}
	if c.LabelGateway {
		kc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		node, err := labelGatewayNode(ctx, kc)
		if err != nil {
			return fmt.Errorf("cluster %q joined, but %w", ac.ClusterID, err)
		}
		if node != "" {
			fmt.Fprintf(out, "labelled node %s as the gateway (%s=true)\n", node, GatewayLabel)
		}
	}
	if c.NoDeploy {
		fmt.Fprintf(out, "not deployed (--no-deploy): run the agent, the route agent and dnsd with `kubectl apply -k deploy/kustomize/member`, and forward %s to dnsd in the cluster's DNS\n", ClustersetZone)
		return nil
	}
	d, err := DeployMember(ctx, cfg, c.Member)
	if err != nil {
		return fmt.Errorf("cluster %q joined, but deploying Snorkel in it failed: %w; run the join again", ac.ClusterID, err)
	}
	printMemberDeployment(out, d)
	return nil
}

// printGatewaySettings tells how the gateway will connect, as the join
// flags set it.
func printGatewaySettings(out io.Writer, s *api.GatewaySettings) {
	onOff := map[bool]string{true: "on", false: "off"}
	role := "IKE initiator or responder by cluster ID"
	if s.PreferredServer {
		role = "preferred server (IKE responder)"
	}
	health := onOff[!s.HealthCheckOff]
	if !s.HealthCheckOff && (s.HealthInterval() != api.DefaultHealthCheckInterval || s.HealthMaxPacketLoss() != api.DefaultHealthCheckMaxPacketLossCount) {
		health += fmt.Sprintf(" (a probe every %ds, an error after %d unanswered)", s.HealthInterval(), s.HealthMaxPacketLoss())
	}
	fmt.Fprintf(out, "gateway: UDP port %d, NAT traversal %s, health check %s, %s", s.Port(), onOff[!s.NATTraversalOff], health, role)
	if s.AirGapped {
		fmt.Fprint(out, ", air-gapped")
	}
	if s.Debug {
		fmt.Fprint(out, ", debug logs")
	}
	fmt.Fprintf(out, "; DNS domains %s\n", strings.Join(s.DNSZones(), ", "))
}

// printMemberDeployment tells what DeployMember did and what is left to
// the user.
func printMemberDeployment(out io.Writer, d *MemberDeployment) {
	fmt.Fprintf(out, "deployed %s: DaemonSet %s/%s on the nodes labelled %s=true, the route agent (DaemonSet %s) on every node, dnsd (Deployment %s) at %s\n",
		d.Image, api.AgentNamespace, AgentDaemonSet, GatewayLabel, RouteAgentDaemonSet, DNSDeployment, d.DNSAddress)
	zones := strings.Join(d.Domains, ", ")
	switch {
	case d.CoreDNSCustom != "" && d.CoreDNS == CoreDNSUpdated:
		fmt.Fprintf(out, "CoreDNS's custom ConfigMap %s now forwards %s to %s (key %s); the Corefile is left alone\n", d.CoreDNSCustom, zones, d.DNSAddress, customCoreDNSKey)
		printGatewayNodes(out, d)
		return
	case d.CoreDNSCustom != "":
		fmt.Fprintf(out, "CoreDNS's custom ConfigMap %s already forwards %s to %s (key %s)\n", d.CoreDNSCustom, zones, d.DNSAddress, customCoreDNSKey)
		printGatewayNodes(out, d)
		return
	}
	switch d.CoreDNS {
	case CoreDNSUpdated:
		fmt.Fprintf(out, "CoreDNS (%s/%s) now forwards %s to %s\n", metav1.NamespaceSystem, CoreDNSConfigMap, zones, d.DNSAddress)
	case CoreDNSUnchanged:
		fmt.Fprintf(out, "CoreDNS (%s/%s) already forwards %s to %s\n", metav1.NamespaceSystem, CoreDNSConfigMap, zones, d.DNSAddress)
	case CoreDNSNotFound:
		fmt.Fprintf(out, "no ConfigMap %s/%s: make the cluster's DNS forward %s to %s, e.g. with this Corefile section:\n%s",
			metav1.NamespaceSystem, CoreDNSConfigMap, zones, d.DNSAddress, d.Stanza)
	}
	printGatewayNodes(out, d)
}

// printGatewayNodes tells the load balancer and the gateway nodes.
func printGatewayNodes(out io.Writer, d *MemberDeployment) {
	if len(d.LoadBalancerPorts) > 0 {
		fmt.Fprintf(out, "load balancer: Service %s/%s (type LoadBalancer, UDP %d and %d) in front of the gateways; the agent publishes its ingress address as the public IP\n",
			api.AgentNamespace, api.GatewayLoadBalancer, d.LoadBalancerPorts[0], d.LoadBalancerPorts[1])
	}
	if len(d.GatewayNodes) == 0 {
		fmt.Fprintf(out, "no gateway node yet: label one with `kubectl label node NODE %s=true`\n", GatewayLabel)
	} else {
		fmt.Fprintf(out, "gateway nodes: %s\n", strings.Join(d.GatewayNodes, ", "))
	}
}

// LoadKubeconfig returns the client configuration of a kubeconfig context:
// the file's (or the default files') current context if context is empty.
func LoadKubeconfig(path, kubeContext string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		where := "the kubeconfig"
		if path != "" {
			where = "--kubeconfig " + path
		}
		if kubeContext != "" {
			where += " --context " + kubeContext
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if cfg.QPS == 0 {
		// Installing the CRDs and RBAC is a burst of requests.
		cfg.QPS, cfg.Burst = 50, 100
	}
	return cfg, nil
}

// validateBrokerURL checks --broker-url: an https URL of a host, as the
// agent dials it.
func validateBrokerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("--broker-url %q is not the broker's API server URL: give https://HOST[:PORT], e.g. https://broker.example.com:6443", s)
	}
	return nil
}
