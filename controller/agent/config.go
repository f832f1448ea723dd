package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/natdiscovery"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
)

// Dataplane is the gateway the agent configures.
type Dataplane interface {
	// Apply makes the gateway match cfg: the local cluster and transport
	// and the remotes. A cfg without remotes means there is nobody to
	// connect to (or this gateway is no longer the active one).
	Apply(ctx context.Context, s *gateway.Spec) error
	// Status reports each remote's connection: status, message, RTT.
	Status() []RemoteStatus
}

// RemoteStatus is the state of the connection to one remote cluster.
type RemoteStatus struct {
	// ID is the remote cluster's ID, as in gateway.Remote.ID.
	ID      string
	Status  submv1.ConnectionStatus
	Message string
	// RTT is nil until a round trip has been measured.
	RTT *RTT
}

// RTT summarises the round-trip times measured through a connection.
type RTT struct {
	Last, Min, Average, Max, StdDev time.Duration
}

// Election tunes the leader election. Zero fields take the defaults, which
// hand over within a few seconds.
type Election struct {
	// LeaseName names the Lease in Config.Namespace; default
	// DefaultLeaseName.
	LeaseName string
	// LeaseDuration is how long a lease the active gateway stopped
	// renewing blocks the others; RenewDeadline how long the active one
	// keeps trying to renew before it steps down; RetryPeriod how often
	// every candidate tries. LeaseDuration > RenewDeadline >
	// 1.2 × RetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Defaults of Config. The election's take a crashed or cut-off active
// gateway's place about two seconds after its last renewal (the Lease, and
// a quarter-second poll), and a stopped one's within a quarter second of
// its release; the active gateway steps down when it cannot renew for
// 1.5 s, half a second before the others may take over. The real-node
// lab measures what each contributes (README, "Gateway failover").
const (
	DefaultLeaseName      = api.GatewayLeaseName
	DefaultLeaseDuration  = 2 * time.Second
	DefaultRenewDeadline  = 1500 * time.Millisecond
	DefaultRetryPeriod    = 250 * time.Millisecond
	DefaultStatusInterval = 5 * time.Second
	DefaultResyncPeriod   = 30 * time.Second
)

// Keys of an Endpoint's backend_config, as Submariner's cable drivers name
// them.
const (
	// BackendConfigPublicKey holds a WireGuard gateway's public key.
	BackendConfigPublicKey = "publicKey"
	// BackendConfigUDPPort holds the gateway's UDP port.
	BackendConfigUDPPort = "udp-port"
	// BackendConfigPreferredServer says "true" when the gateway would
	// rather be the IKE responder (`snorkel join --preferred-server`).
	BackendConfigPreferredServer = "preferred-server"
	// BackendConfigNATDiscoveryPort holds the gateway's NAT discovery
	// port; a remote without it is not probed.
	BackendConfigNATDiscoveryPort = "natt-discovery-port"
	// BackendConfigCheckedSegments says "true" from a Snorkel gateway:
	// it checks the TCP checksum of every segment it sends, so that its
	// peers join its segments without summing them again
	// (gateway.Remote.CheckedSegments). A gateway that does not say so is
	// not trusted to.
	BackendConfigCheckedSegments = "checked-segments"
)

// DefaultMetricsPort is the port of the agent's /metrics and /healthz
// listener (`snorkel agent --metrics-address`) by default.
const DefaultMetricsPort = 9898

// Config configures an Agent.
type Config struct {
	// Member is this cluster's agent configuration, as `snorkel join`
	// recorded it (api.LoadAgentConfig).
	Member *api.AgentConfig
	// LocalConfig reaches this cluster's API server; Local is a client of
	// the same server (made from LocalConfig when nil).
	Local       kubernetes.Interface
	LocalConfig *rest.Config
	// Namespace holds the Lease, the Gateway objects and the local copy
	// of the Endpoint; default api.AgentNamespace.
	Namespace string
	// Identity names this gateway among the cluster's: its Lease holder
	// identity and its Gateway object; default the host name.
	Identity string
	// Hostname is the node's name in the Endpoint; default Identity.
	Hostname string
	// PrivateIP is this gateway's underlay address inside its network;
	// PublicIP, if set, the address other clusters reach it at across
	// NAT. Remotes connect to the address NAT discovery finds answering,
	// else to PublicIP when set, else to PrivateIP.
	// Without PublicIP, the address a remote gateway reached across NAT
	// sees this gateway's discovery requests come from is published.
	PrivateIP, PublicIP string
	// NATDiscoveryPort is the UDP port of NAT discovery, which the active
	// gateway serves and publishes unless NAT traversal is off; default
	// natdiscovery.DefaultPort.
	NATDiscoveryPort int
	// Port is the gateway's UDP port; default the one `snorkel join
	// --nattport` recorded in Member (4500 unless given).
	Port int
	// SyncPort is the TCP port on PrivateIP where, under Globalnet, the
	// active gateway serves its connection tracking to the passive ones;
	// default gateway.DefaultSyncPort.
	SyncPort int
	// HealthCheckIP is the gateway's address on its TUN device, which
	// other gateways probe; it becomes the TUN address when Gateway.TUN
	// has none.
	HealthCheckIP string
	// BackendConfig is published in the Endpoint's backend_config; the
	// wireguard cable driver needs BackendConfigPublicKey. The agent adds
	// BackendConfigUDPPort.
	BackendConfig map[string]string
	// Gateway holds the gateway settings the agent does not decide: TUN,
	// underlay MTU, metrics address, the transport's bind address and
	// local key file, ESP proposals, Globalnet's supernet and table size.
	// The agent fills in the cluster, the transport type, port and PSK,
	// Globalnet's global CIDR and the remotes.
	Gateway gateway.Spec
	// Dataplane receives every configuration the active gateway builds.
	Dataplane Dataplane
	// Registerer, when set, gets the metrics of the service sync and of
	// Globalnet's IPAM under Submariner's names.
	Registerer prometheus.Registerer
	// OnActive run while this gateway is the active one, each with a
	// context that ends when leadership is lost. One that fails is
	// started again after a pause.
	OnActive []func(ctx context.Context) error
	Election Election
	// StatusInterval is how often the Gateway status is written; default
	// DefaultStatusInterval.
	StatusInterval time.Duration
	// ResyncPeriod is how often the active gateway checks its published
	// objects against the API servers; default DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// Version is reported in the Gateway status.
	Version string
	// Logger receives the agent's logs; default slog.Default().
	Logger *slog.Logger
}

// applyDefaults fills the zero fields of c.
func (c *Config) applyDefaults() {
	if c.Namespace == "" {
		c.Namespace = api.AgentNamespace
	}
	if c.Identity == "" {
		c.Identity, _ = os.Hostname()
	}
	if c.Hostname == "" {
		c.Hostname = c.Identity
	}
	if c.Port == 0 {
		c.Port = gateway.DefaultPort
		if c.Member != nil {
			c.Port = c.Member.Port()
		}
	}
	if c.NATDiscoveryPort == 0 {
		c.NATDiscoveryPort = natdiscovery.DefaultPort
	}
	if c.SyncPort == 0 {
		c.SyncPort = gateway.DefaultSyncPort
	}
	e := &c.Election
	if e.LeaseName == "" {
		e.LeaseName = DefaultLeaseName
	}
	if e.LeaseDuration == 0 {
		e.LeaseDuration = DefaultLeaseDuration
	}
	if e.RenewDeadline == 0 {
		e.RenewDeadline = DefaultRenewDeadline
	}
	if e.RetryPeriod == 0 {
		e.RetryPeriod = DefaultRetryPeriod
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.ResyncPeriod == 0 {
		c.ResyncPeriod = DefaultResyncPeriod
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// validate checks c after applyDefaults, naming each bad field and the fix.
// It normalises Member.CableDriver.
func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("agent: "+format, args...)) }

	if m := c.Member; m == nil {
		bad("Config.Member is nil; load the agent configuration with api.LoadAgentConfig (`snorkel join` writes it)")
	} else {
		if err := api.ValidateClusterID(m.ClusterID); err != nil {
			bad("Config.Member.ClusterID %q is not a cluster ID; run `snorkel join` again", m.ClusterID)
		}
		if m.BrokerURL == "" || m.BrokerNamespace == "" || m.BrokerToken == "" {
			bad("Config.Member lacks the broker's URL, namespace or token; run `snorkel join` again")
		}
		if d, err := api.NormalizeCableDriver(m.CableDriver); err != nil {
			bad("Config.Member.CableDriver: %v", err)
		} else {
			m.CableDriver = d
		}
		if len(m.ClusterCIDRs) == 0 || len(m.ServiceCIDRs) == 0 {
			bad("Config.Member has no Pod or Service CIDRs; run `snorkel join` again with --clustercidr and --servicecidr")
		}
		for _, s := range append(append([]string(nil), m.ClusterCIDRs...), m.ServiceCIDRs...) {
			if _, err := netip.ParsePrefix(s); err != nil {
				bad("Config.Member: CIDR %q is not a CIDR; run `snorkel join` again", s)
			}
		}
		if m.GlobalCIDR != "" {
			if p, err := netip.ParsePrefix(m.GlobalCIDR); err != nil || !p.Addr().Is4() {
				bad("Config.Member.GlobalCIDR %q is not an IPv4 CIDR; run `snorkel join` again", m.GlobalCIDR)
			}
		}
		if _, _, err := m.ClustersetIP(); err != nil {
			bad("Config.Member: clusterset IP: %v; run `snorkel join` again", err)
		}
		if m.CableDriver == transport.WireGuard && !isWireGuardKey(c.BackendConfig[BackendConfigPublicKey]) {
			bad("Config.BackendConfig[%q] is %q; the wireguard cable driver needs the gateway's public key there (base64, 44 characters; `snorkel pubkey < KEYFILE`)",
				BackendConfigPublicKey, c.BackendConfig[BackendConfigPublicKey])
		}
		if m.CableDriver == transport.ESP && len(m.PSK) < 16 {
			bad("Config.Member.PSK has %d bytes; the esp cable driver needs the clusterset's pre-shared key (at least 16 bytes): run `snorkel join` again", len(m.PSK))
		}
	}
	if c.LocalConfig == nil {
		bad("Config.LocalConfig is nil; give the rest.Config of this cluster's API server")
	}
	if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		bad("Config.Namespace %q is not a namespace name: %s", c.Namespace, strings.Join(errs, "; "))
	}
	if c.Identity == "" {
		bad("Config.Identity is empty and the host name is unknown; give the node's name")
	} else if errs := validation.IsDNS1123Subdomain(c.Identity); len(errs) > 0 {
		bad("Config.Identity %q cannot name the Gateway object (%s); give the node's name", c.Identity, strings.Join(errs, "; "))
	}
	if a, err := netip.ParseAddr(c.PrivateIP); err != nil || a.Zone() != "" {
		bad("Config.PrivateIP %q is not an IP address; give the node's address on the network between gateways, like 172.18.0.5", c.PrivateIP)
	}
	for _, f := range []struct{ name, v string }{{"PublicIP", c.PublicIP}, {"HealthCheckIP", c.HealthCheckIP}} {
		if a, err := netip.ParseAddr(f.v); f.v != "" && (err != nil || a.Zone() != "") {
			bad("Config.%s %q is not an IP address; give one like 198.51.100.7, or leave it empty", f.name, f.v)
		}
	}
	if c.Port < 1 || c.Port > 65535 {
		bad("Config.Port %d is not a UDP port; use 1 to 65535 (default %d)", c.Port, gateway.DefaultPort)
	}
	if c.SyncPort < 1 || c.SyncPort > 65535 {
		bad("Config.SyncPort %d is not a TCP port; use 1 to 65535 (default %d)", c.SyncPort, gateway.DefaultSyncPort)
	}
	if c.NATDiscoveryPort < 1 || c.NATDiscoveryPort > 65535 {
		bad("Config.NATDiscoveryPort %d is not a UDP port; use 1 to 65535 (default %d)", c.NATDiscoveryPort, natdiscovery.DefaultPort)
	}
	if c.Dataplane == nil {
		bad("Config.Dataplane is nil; give the gateway the agent configures")
	}
	for i, h := range c.OnActive {
		if h == nil {
			bad("Config.OnActive[%d] is nil; remove it", i)
		}
	}
	e := c.Election
	if e.LeaseDuration <= e.RenewDeadline || e.RenewDeadline*5 <= e.RetryPeriod*6 || e.RetryPeriod < 100*time.Millisecond {
		bad("Config.Election (--lease-duration, --renew-deadline, --retry-period): lease %v, renew deadline %v, retry %v; leaseDuration must exceed renewDeadline, renewDeadline 1.2 × retryPeriod, and retryPeriod 100ms (defaults %v, %v, %v)",
			e.LeaseDuration, e.RenewDeadline, e.RetryPeriod, DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod)
	}
	if e.LeaseDuration < time.Second || e.LeaseDuration%time.Second != 0 {
		bad("Config.Election.LeaseDuration (--lease-duration) %v: a Lease records whole seconds, and the other gateways wait what it records; use a whole number of seconds, at least 1s (default %v)", e.LeaseDuration, DefaultLeaseDuration)
	}
	if c.StatusInterval < 0 || c.StatusInterval > DefaultStatusInterval {
		bad("Config.StatusInterval %v: the Gateway status must be refreshed at least every %v; use a shorter interval", c.StatusInterval, DefaultStatusInterval)
	}
	if c.ResyncPeriod < 0 {
		bad("Config.ResyncPeriod %v is negative; give a period like 30s", c.ResyncPeriod)
	}
	return errors.Join(errs...)
}

// PublicIPAnnotation is the node annotation that sets a gateway's public
// IP, as Submariner reads it: "ipv4:198.51.100.7".
const PublicIPAnnotation = "gateway.submariner.io/public-ip"

// ParsePublicIPAnnotation reads the value of PublicIPAnnotation. Submariner's
// other forms ("dns:", "api:", "lb:") ask a service outside the clusterset or
// the cloud, which Snorkel does not.
func ParsePublicIPAnnotation(v string) (string, error) {
	ip, ok := strings.CutPrefix(v, "ipv4:")
	if a, err := netip.ParseAddr(ip); !ok || err != nil || !a.Is4() {
		return "", fmt.Errorf("node annotation %s=%q: give an IPv4 address as ipv4:198.51.100.7", PublicIPAnnotation, v)
	}
	return ip, nil
}

// isWireGuardKey reports whether s is a base64 32-byte key.
func isWireGuardKey(s string) bool {
	b, err := base64.StdEncoding.DecodeString(s)
	return err == nil && len(b) == 32
}
