package agent

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/transport"
)

// template is Config.Gateway frozen as JSON, so that every configuration
// built from it is a deep copy the Dataplane may keep or change.
type template []byte

func newTemplate(g gateway.Config) (template, error) {
	b, err := json.Marshal(g)
	if err != nil {
		return nil, fmt.Errorf("agent: Config.Gateway: %w", err)
	}
	return b, nil
}

// build returns the gateway configuration for remotes rs: the template
// with this cluster, its transport and Globalnet's global CIDR filled in,
// and with rules (the IPAM's, when not nil) Globalnet's addresses.
// It shares no memory with t or rs. key is the configuration's JSON, to
// tell whether it changed.
func (t template) build(c *Config, rs []gateway.Remote, rules *natengine.Rules) (cfg gateway.Config, key []byte) {
	var g gateway.Config
	// Marshalling and unmarshalling gateway.Config cannot fail: it holds
	// only strings, numbers, slices and structs of them.
	_ = json.Unmarshal(t, &g)
	m := c.Member
	g.Cluster = gateway.Cluster{ID: m.ClusterID, PodCIDRs: slices.Clone(m.ClusterCIDRs), ServiceCIDRs: slices.Clone(m.ServiceCIDRs)}
	g.Transport.Type = m.CableDriver
	g.Transport.Port = c.Port
	if g.TUN.Address == "" {
		g.TUN.Address = c.HealthCheckIP
	}
	if m.CableDriver == transport.ESP {
		if g.Transport.ESP == nil {
			g.Transport.ESP = &gateway.ESPConfig{}
		}
		// The clusterset's key comes from the broker, as Submariner's
		// gateways take it.
		g.Transport.ESP.PSK, g.Transport.ESP.PSKFile = m.PSK, ""
	}
	if m.GlobalCIDR != "" {
		if g.Globalnet == nil {
			g.Globalnet = &gateway.Globalnet{}
		}
		g.Globalnet.GlobalCIDR = m.GlobalCIDR
		if rules != nil {
			g.Globalnet.SetAllocations(*rules)
		}
	} else {
		g.Globalnet = nil
	}
	g.Remotes = rs
	key, _ = json.Marshal(g)
	_ = json.Unmarshal(key, &cfg)
	return cfg, key
}
