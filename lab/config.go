package lab

import (
	"fmt"
	"path/filepath"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
)

// TransportKernel is the lab's baseline data plane: no gateway process,
// plain kernel routes between the gateway nodes over the underlay. It tells
// a broken topology from a broken gateway, and gives the perf harness the
// number a tunnel is compared with.
const TransportKernel = "kernel"

// Transports lists the values Options.Transport takes.
var Transports = append(slices.Clone(transport.Kinds), TransportKernel)

// KeyFile is where the lab keeps a cluster's WireGuard private key.
func KeyFile(stateDir, cluster string) string {
	return filepath.Join(stateDir, "keys", cluster+".key")
}

// PSKFile is where the lab keeps the clusterset's IPsec pre-shared key.
func PSKFile(stateDir string) string {
	return filepath.Join(stateDir, "keys", "clusterset.psk")
}

// ConfigFile is where the lab writes a cluster's gateway config.
func ConfigFile(stateDir, cluster string) string {
	return filepath.Join(stateDir, cluster+".yaml")
}

// GatewayConfig returns the config of cluster c's gateway. publicKeys maps
// cluster IDs to base64 WireGuard public keys and is needed only for the
// wireguard transport.
func (p *Plan) GatewayConfig(c *ClusterPlan, transport, stateDir string, publicKeys map[string]string) (gateway.Config, error) {
	// Validate fills defaults in place, through pointers too; check a second
	// copy so that the file keeps only what the lab chose.
	check := p.gatewayConfig(c, transport, stateDir, publicKeys)
	if err := check.Validate(); err != nil {
		return gateway.Config{}, fmt.Errorf("lab: gateway config of %s: %w", c.Spec.ID, err)
	}
	return p.gatewayConfig(c, transport, stateDir, publicKeys), nil
}

func (p *Plan) gatewayConfig(c *ClusterPlan, kind, stateDir string, publicKeys map[string]string) gateway.Config {
	cfg := gateway.Config{
		Cluster: gateway.Cluster{
			ID:           c.Spec.ID,
			PodCIDRs:     []string{c.Spec.PodCIDR.String()},
			ServiceCIDRs: []string{c.Spec.ServiceCIDR.String()},
		},
		TUN:            gateway.TUN{Name: c.Gateway.TUN, Address: c.Gateway.NodeIP.String()},
		Transport:      gateway.TransportConfig{Type: kind, Port: gateway.DefaultPort},
		MetricsAddress: MetricsAddress,
	}
	switch kind {
	case transport.WireGuard:
		cfg.Transport.WireGuard = &gateway.WireGuardConfig{PrivateKeyFile: KeyFile(stateDir, c.Spec.ID)}
	case transport.ESP:
		cfg.Transport.ESP = &gateway.ESPConfig{PSKFile: PSKFile(stateDir)}
	}
	if p.Globalnet() {
		cfg.Globalnet = globalnetConfig(c)
	}
	for _, r := range p.Remotes(c) {
		rc := gateway.Remote{
			ID:       r.Spec.ID,
			Endpoint: r.Gateway.Endpoint().String(),
			// Each gateway probes the other's node address, its TUN
			// address.
			HealthCheckIP: r.Gateway.NodeIP.String(),
			// Every gateway of the lab is Snorkel's.
			CheckedSegments: true,
		}
		if p.Globalnet() {
			// The remote's own CIDRs are this cluster's too: only its
			// global CIDR names it.
			rc.GlobalCIDR = r.Spec.GlobalCIDR.String()
		} else {
			rc.PodCIDRs = []string{r.Spec.PodCIDR.String()}
			rc.ServiceCIDRs = []string{r.Spec.ServiceCIDR.String()}
		}
		if kind == transport.WireGuard {
			rc.WireGuard = &gateway.WireGuardRemoteConfig{PublicKey: publicKeys[r.Spec.ID]}
		}
		cfg.Remotes = append(cfg.Remotes, rc)
	}
	return cfg
}

// globalnetConfig exports every service of c: a ClusterIP service at its
// global IP, each pod of a headless service at the pod's own. The cluster
// egress IPs are left to the gateway's default.
func globalnetConfig(c *ClusterPlan) *gateway.Globalnet {
	g := &gateway.Globalnet{GlobalCIDR: c.Spec.GlobalCIDR.String()}
	for _, s := range c.Services {
		if !s.Spec.Headless {
			g.Ingress = append(g.Ingress, gateway.GlobalIngress{
				Name: s.Spec.Name, Kind: gateway.IngressKindService,
				GlobalIP: s.GlobalIP.String(), LocalIP: s.Spec.ClusterIP.String(),
			})
			continue
		}
		for _, b := range s.Backends {
			g.Ingress = append(g.Ingress, gateway.GlobalIngress{
				Name: s.Spec.Name + "/" + b.Name, Kind: gateway.IngressKindHeadlessPod,
				GlobalIP: b.GlobalIP.String(), LocalIP: b.IP.String(),
			})
		}
	}
	return g
}

// MarshalConfig renders a gateway config as the YAML `snorkel gateway
// --config` reads.
func MarshalConfig(cfg gateway.Config) ([]byte, error) {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("lab: encode gateway config: %w", err)
	}
	return b, nil
}
