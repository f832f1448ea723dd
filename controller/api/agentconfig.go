package api

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// AgentConfig is what a member cluster's agent needs: who it is, how to
// reach the broker, and how its gateway connects. Join writes it to the
// Secret AgentSecretName in AgentNamespace; LoadAgentConfig reads it.
type AgentConfig struct {
	ClusterID       string
	BrokerURL       string
	BrokerNamespace string
	BrokerToken     string
	// BrokerCA is the PEM certificate the broker's serving certificate
	// chains to; empty means the system's roots.
	BrokerCA []byte
	// BrokerInsecure is --check-broker-certificate=false: the broker's
	// certificate is not checked, as subctl's "insecure" connections.
	BrokerInsecure bool
	// PSK is the clusterset's pre-shared key as Submariner's gateways use
	// it: the base64 of the broker's random key bytes.
	PSK string
	// CableDriver is one of transport.Kinds.
	CableDriver  string
	ClusterCIDRs []string
	ServiceCIDRs []string
	// GlobalCIDR is the cluster's global CIDR; empty without Globalnet.
	GlobalCIDR string
	// GlobalnetCIDRRange is the broker's Globalnet range, which holds
	// every cluster's global CIDR; empty without Globalnet, and in the
	// Secret of a join older than the field, where the gateway's default
	// supernet applies.
	GlobalnetCIDRRange string
	ServiceDiscovery   bool
	// ClustersetIPCIDR is this cluster's block of the broker's clusterset
	// IP range, which the VIPs of the services it exports first come
	// from; its first host address is the gateway's own (SNAT) and never
	// a service's. Empty without service discovery, under Globalnet, and
	// in the Secret of a join older than the field.
	ClustersetIPCIDR string
	// ClustersetIPCIDRRange is the broker's clusterset IP range, which
	// holds every cluster's block; set with ClustersetIPCIDR.
	ClustersetIPCIDRRange string
	// ClustersetIPEnabled is join --enable-clusterset-ip (or the broker's
	// default): a service exported without the annotation
	// UseClustersetIPAnnotation gets a clusterset IP.
	ClustersetIPEnabled bool

	GatewaySettings
}

// GatewaySettings are the gateway settings of `snorkel join`'s flags,
// named and defaulted as subctl's: the zero value of each field is
// subctl's default.
type GatewaySettings struct {
	// NATTraversalOff is --natt=false: the gateway connects to the other
	// clusters' private IPs only, and its Endpoint says nat_enabled false
	// so that they connect to its own.
	NATTraversalOff bool
	// NATTPort is --nattport, the gateway's UDP port with every cable
	// driver, published in its Endpoint; 0 means DefaultNATTPort.
	NATTPort int
	// PreferredServer is --preferred-server: this gateway would rather
	// answer than start the IKE exchange with the other gateways.
	PreferredServer bool
	// HealthCheckOff is --health-check=false: the gateway sends no health
	// probes, and a remote is connected while traffic comes from it.
	HealthCheckOff bool
	// HealthCheckInterval is --health-check-interval, seconds between
	// probes; 0 means DefaultHealthCheckInterval.
	HealthCheckInterval int
	// HealthCheckMaxPacketLossCount is --health-check-max-packet-loss-count,
	// the unanswered probes in a row that make a connection an error; 0
	// means DefaultHealthCheckMaxPacketLossCount.
	HealthCheckMaxPacketLossCount int
	// CustomDomains is --custom-domains: the zones dnsd serves and the
	// cluster's CoreDNS forwards to it besides ClustersetDomain.
	CustomDomains []string
	// AirGapped is --air-gapped: the cluster reaches no service outside
	// the clusterset; the agent learns its addresses only from its node,
	// its flags and the other gateways.
	AirGapped bool
	// Debug is --pod-debug (or --ipsec-debug): the agent logs at debug
	// level, IKE's exchanges included.
	Debug bool
	// CoreDNSCustomConfigMap is --coredns-custom-configmap, NAMESPACE/NAME:
	// the ConfigMap a cluster's CoreDNS imports server blocks from (as
	// AKS's coredns-custom), where DeployMember writes the forwards to dnsd
	// instead of editing the Corefile; empty for the Corefile.
	CoreDNSCustomConfigMap string
	// LoadBalancer is --load-balancer: a Service of type LoadBalancer
	// (GatewayLoadBalancer) carries the gateway's UDP ports, and its
	// ingress address is the gateway's public IP.
	LoadBalancer bool
}

// GatewayLoadBalancer names the Service in AgentNamespace that join
// --load-balancer puts in front of the gateways, as Submariner names it.
const GatewayLoadBalancer = "submariner-gateway"

// DefaultNATTPort is the gateway's UDP port when join is given no
// --nattport, as subctl's.
const DefaultNATTPort = 4500

// Health-check defaults and bounds of join's flags, as subctl's defaults;
// the bounds are the gateway's (an interval up to a minute, up to 1000
// probes).
const (
	DefaultHealthCheckInterval           = 1
	DefaultHealthCheckMaxPacketLossCount = 5
	maxHealthCheckInterval               = 60
	maxHealthCheckMaxPacketLossCount     = 1000
)

// ClustersetDomain is the zone of the clusterset's service names.
const ClustersetDomain = "clusterset.local"

// HealthInterval is the seconds between health probes:
// HealthCheckInterval, or DefaultHealthCheckInterval.
func (c *GatewaySettings) HealthInterval() int {
	if c.HealthCheckInterval == 0 {
		return DefaultHealthCheckInterval
	}
	return c.HealthCheckInterval
}

// HealthMaxPacketLoss is the unanswered probes in a row that make a
// connection an error: HealthCheckMaxPacketLossCount, or
// DefaultHealthCheckMaxPacketLossCount.
func (c *GatewaySettings) HealthMaxPacketLoss() int {
	if c.HealthCheckMaxPacketLossCount == 0 {
		return DefaultHealthCheckMaxPacketLossCount
	}
	return c.HealthCheckMaxPacketLossCount
}

// Port is the gateway's UDP port: NATTPort, or DefaultNATTPort.
func (c *GatewaySettings) Port() int {
	if c.NATTPort == 0 {
		return DefaultNATTPort
	}
	return c.NATTPort
}

// DNSZones are the zones dnsd serves: ClustersetDomain, then the custom
// domains.
func (c *GatewaySettings) DNSZones() []string {
	return append([]string{ClustersetDomain}, c.CustomDomains...)
}

// Keys of the agent Secret's data that dnsd's Deployment reads too.
const (
	AgentClusterIDKey = "clusterID"
	// AgentGlobalnetKey says "true" or "false": whether GlobalCIDR is
	// set, as a flag value the kubelet can pass to dnsd (--globalnet) from
	// the Secret. Reading ignores it.
	AgentGlobalnetKey = "globalnet"
	// AgentDNSZonesKey holds DNSZones, comma-separated, for dnsd's --zone.
	// Reading takes the custom domains from agentCustomDomainsKey.
	AgentDNSZonesKey = "dnsZones"
)

// Keys of the agent Secret's data.
const (
	agentBrokerURLKey        = "brokerURL"
	agentBrokerNamespaceKey  = "brokerNamespace"
	agentBrokerTokenKey      = "brokerToken"
	agentBrokerCAKey         = "brokerCA"
	agentPSKKey              = "psk"
	agentCableDriverKey      = "cableDriver"
	agentClusterCIDRsKey     = "clusterCIDRs"
	agentServiceCIDRsKey     = "serviceCIDRs"
	agentGlobalCIDRKey       = "globalCIDR"
	agentGlobalnetRangeKey   = "globalnetCIDRRange"
	agentServiceDiscoveryKey = "serviceDiscovery"
	agentNATTraversalKey     = "natTraversal"
	agentNATTPortKey         = "nattPort"
	agentPreferredServerKey  = "preferredServer"
	agentHealthCheckKey      = "healthCheck"
	agentHealthIntervalKey   = "healthCheckInterval"
	agentHealthLossKey       = "healthCheckMaxPacketLossCount"
	agentCustomDomainsKey    = "customDomains"
	agentAirGappedKey        = "airGapped"
	agentBrokerInsecureKey   = "brokerInsecure"
	agentDebugKey            = "debug"
	agentLoadBalancerKey     = "loadBalancer"
	agentCoreDNSCustomKey    = "corednsCustomConfigMap"
	agentClustersetCIDRKey   = "clustersetIPCIDR"
	agentClustersetRangeKey  = "clustersetIPCIDRRange"
	agentClustersetOnKey     = "clustersetIPEnabled"
)

// BrokerConfig is a client configuration for the broker with the agent's
// credentials.
func (c *AgentConfig) BrokerConfig() *rest.Config {
	cfg := BrokerRESTConfig(c.BrokerURL, c.BrokerToken, c.BrokerCA)
	if c.BrokerInsecure {
		cfg.TLSClientConfig = rest.TLSClientConfig{Insecure: true}
	}
	return cfg
}

// BrokerRESTConfig is a client configuration for the broker at url with a
// bearer token, trusting ca (or the system's roots if it is empty).
func BrokerRESTConfig(url, token string, ca []byte) *rest.Config {
	return &rest.Config{
		Host:            url,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		UserAgent:       "snorkel",
		// Joins racing for the Globalnet ConfigMap retry in bursts.
		QPS:   50,
		Burst: 100,
	}
}

// SecretData encodes c as the agent Secret's data; lists are
// comma-separated.
func (c *AgentConfig) SecretData() map[string][]byte {
	return map[string][]byte{
		AgentClusterIDKey:        []byte(c.ClusterID),
		agentBrokerURLKey:        []byte(c.BrokerURL),
		agentBrokerNamespaceKey:  []byte(c.BrokerNamespace),
		agentBrokerTokenKey:      []byte(c.BrokerToken),
		agentBrokerCAKey:         c.BrokerCA,
		agentPSKKey:              []byte(c.PSK),
		agentCableDriverKey:      []byte(c.CableDriver),
		agentClusterCIDRsKey:     []byte(strings.Join(c.ClusterCIDRs, ",")),
		agentServiceCIDRsKey:     []byte(strings.Join(c.ServiceCIDRs, ",")),
		agentGlobalCIDRKey:       []byte(c.GlobalCIDR),
		agentGlobalnetRangeKey:   []byte(c.GlobalnetCIDRRange),
		agentServiceDiscoveryKey: []byte(strconv.FormatBool(c.ServiceDiscovery)),
		AgentGlobalnetKey:        []byte(strconv.FormatBool(c.GlobalCIDR != "")),
		agentNATTraversalKey:     []byte(strconv.FormatBool(!c.NATTraversalOff)),
		agentNATTPortKey:         []byte(strconv.Itoa(c.Port())),
		agentPreferredServerKey:  []byte(strconv.FormatBool(c.PreferredServer)),
		agentHealthCheckKey:      []byte(strconv.FormatBool(!c.HealthCheckOff)),
		agentHealthIntervalKey:   []byte(strconv.Itoa(c.HealthInterval())),
		agentHealthLossKey:       []byte(strconv.Itoa(c.HealthMaxPacketLoss())),
		agentCustomDomainsKey:    []byte(strings.Join(c.CustomDomains, ",")),
		AgentDNSZonesKey:         []byte(strings.Join(c.DNSZones(), ",")),
		agentAirGappedKey:        []byte(strconv.FormatBool(c.AirGapped)),
		agentBrokerInsecureKey:   []byte(strconv.FormatBool(c.BrokerInsecure)),
		agentDebugKey:            []byte(strconv.FormatBool(c.Debug)),
		agentLoadBalancerKey:     []byte(strconv.FormatBool(c.LoadBalancer)),
		agentCoreDNSCustomKey:    []byte(c.CoreDNSCustomConfigMap),
		agentClustersetCIDRKey:   []byte(c.ClustersetIPCIDR),
		agentClustersetRangeKey:  []byte(c.ClustersetIPCIDRRange),
		agentClustersetOnKey:     []byte(strconv.FormatBool(c.ClustersetIPEnabled)),
	}
}

// LoadAgentConfig reads the agent configuration from the Secret
// AgentSecretName in namespace and checks it.
func LoadAgentConfig(ctx context.Context, kc kubernetes.Interface, namespace string) (*AgentConfig, error) {
	s, err := kc.CoreV1().Secrets(namespace).Get(ctx, AgentSecretName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("agent configuration: Secret %s/%s: %w; run `snorkel join` for this cluster", namespace, AgentSecretName, err)
	}
	c, err := agentConfigFromSecret(s)
	if err != nil {
		return nil, fmt.Errorf("agent configuration: Secret %s/%s: %w; run `snorkel join` for this cluster again", namespace, AgentSecretName, err)
	}
	return c, nil
}

func agentConfigFromSecret(s *corev1.Secret) (*AgentConfig, error) {
	str := func(k string) string { return strings.TrimSpace(string(s.Data[k])) }
	list := func(k string) []string {
		var out []string
		for _, v := range strings.Split(str(k), ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
		return out
	}
	c := &AgentConfig{
		ClusterID:          str(AgentClusterIDKey),
		BrokerURL:          str(agentBrokerURLKey),
		BrokerNamespace:    str(agentBrokerNamespaceKey),
		BrokerToken:        str(agentBrokerTokenKey),
		BrokerCA:           s.Data[agentBrokerCAKey],
		PSK:                str(agentPSKKey),
		CableDriver:        str(agentCableDriverKey),
		ClusterCIDRs:       list(agentClusterCIDRsKey),
		ServiceCIDRs:       list(agentServiceCIDRsKey),
		GlobalCIDR:         str(agentGlobalCIDRKey),
		GlobalnetCIDRRange: str(agentGlobalnetRangeKey),

		ClustersetIPCIDR:      str(agentClustersetCIDRKey),
		ClustersetIPCIDRRange: str(agentClustersetRangeKey),
	}
	var errs []error
	if v := str(agentCoreDNSCustomKey); v != "" {
		cm, err := ParseCoreDNSCustomConfigMap(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("data %q: %w", agentCoreDNSCustomKey, err))
		}
		c.CoreDNSCustomConfigMap = cm
	}
	// A key a Secret from an older join lacks takes subctl's default.
	boolean := func(k string, def bool) bool {
		v := str(k)
		if v == "" {
			return def
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("data %q: %q is not true or false", k, v))
		}
		return b
	}
	c.ServiceDiscovery = boolean(agentServiceDiscoveryKey, false)
	c.NATTraversalOff = !boolean(agentNATTraversalKey, true)
	c.PreferredServer = boolean(agentPreferredServerKey, false)
	c.HealthCheckOff = !boolean(agentHealthCheckKey, true)
	c.AirGapped = boolean(agentAirGappedKey, false)
	c.BrokerInsecure = boolean(agentBrokerInsecureKey, false)
	c.Debug = boolean(agentDebugKey, false)
	c.LoadBalancer = boolean(agentLoadBalancerKey, false)
	c.ClustersetIPEnabled = boolean(agentClustersetOnKey, false)
	for _, f := range []struct {
		key  string
		dst  *int
		flag string
		max  int
	}{
		{agentHealthIntervalKey, &c.HealthCheckInterval, "--health-check-interval", maxHealthCheckInterval},
		{agentHealthLossKey, &c.HealthCheckMaxPacketLossCount, "--health-check-max-packet-loss-count", maxHealthCheckMaxPacketLossCount},
	} {
		v := str(f.key)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err == nil {
			err = validateHealthSetting(f.flag, n, f.max)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("data %q: %q: %v", f.key, v, err))
		}
		*f.dst = n
	}
	if v := str(agentNATTPortKey); v != "" {
		port, err := strconv.Atoi(v)
		if err == nil {
			err = ValidateNATTPort(port)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("data %q: %q is not a UDP port (1 to 65535)", agentNATTPortKey, v))
		}
		c.NATTPort = port
	}
	if domains := list(agentCustomDomainsKey); len(domains) > 0 {
		if err := ValidateCustomDomains(domains); err != nil {
			errs = append(errs, fmt.Errorf("data %q: %w", agentCustomDomainsKey, err))
		}
		c.CustomDomains = domains
	}
	for _, k := range []string{AgentClusterIDKey, agentBrokerURLKey, agentBrokerNamespaceKey, agentBrokerTokenKey} {
		if str(k) == "" {
			errs = append(errs, fmt.Errorf("data %q is missing", k))
		}
	}
	if c.ClusterID != "" {
		if err := ValidateClusterID(c.ClusterID); err != nil {
			errs = append(errs, fmt.Errorf("data %q: %w", AgentClusterIDKey, err))
		}
	}
	if d, err := NormalizeCableDriver(c.CableDriver); err != nil {
		errs = append(errs, fmt.Errorf("data %q: %w", agentCableDriverKey, err))
	} else {
		c.CableDriver = d
	}
	for _, k := range []string{agentClusterCIDRsKey, agentServiceCIDRsKey, agentGlobalCIDRKey, agentGlobalnetRangeKey} {
		if _, err := ParseCIDRs("data "+strconv.Quote(k), list(k)); err != nil {
			errs = append(errs, err)
		}
	}
	if _, _, err := c.ClustersetIP(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// ParseCoreDNSCustomConfigMap reads --coredns-custom-configmap, [NAMESPACE/]NAME
// with kube-system as subctl's default namespace, into NAMESPACE/NAME.
func ParseCoreDNSCustomConfigMap(v string) (string, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok {
		ns, name = metav1.NamespaceSystem, v
	}
	if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return "", fmt.Errorf("--coredns-custom-configmap %q: give [NAMESPACE/]NAME of the ConfigMap the cluster's CoreDNS imports server blocks from, e.g. kube-system/coredns-custom", v)
	}
	return ns + "/" + name, nil
}

// ClustersetIP returns the broker's clusterset IP range and this
// cluster's block of it, both invalid when the cluster has none.
func (c *AgentConfig) ClustersetIP() (rng, block netip.Prefix, err error) {
	if c.ClustersetIPCIDR == "" && c.ClustersetIPCIDRRange == "" {
		return rng, block, nil
	}
	parse := func(k, v string) (netip.Prefix, error) {
		p, err := netip.ParsePrefix(v)
		if err != nil || !p.Addr().Is4() || p != p.Masked() {
			return p, fmt.Errorf("data %q: %q is not an IPv4 network such as 243.0.0.0/20", k, v)
		}
		return p, nil
	}
	if rng, err = parse(agentClustersetRangeKey, c.ClustersetIPCIDRRange); err != nil {
		return rng, block, err
	}
	if block, err = parse(agentClustersetCIDRKey, c.ClustersetIPCIDR); err != nil {
		return rng, block, err
	}
	if !rng.Contains(block.Addr()) || block.Bits() < rng.Bits() || block.Bits() > 30 {
		return rng, block, fmt.Errorf("data %q: %s is not a block of %s with room for addresses (at most a /30)", agentClustersetCIDRKey, block, rng)
	}
	return rng, block, nil
}
