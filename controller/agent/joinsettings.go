package agent

import (
	"net/netip"
	"strconv"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// withJoinSettings applies to the planned peers the connection settings of
// `snorkel join`'s flags: with NAT traversal off (--natt=false) every
// remote is reached at its private IP; and, with the esp cable driver,
// --preferred-server decides which gateway starts the IKE exchange.
func withJoinSettings(m *api.AgentConfig, peers []peer) []peer {
	for i := range peers {
		p := &peers[i]
		if p.remote == nil {
			continue
		}
		if m.NATTraversalOff {
			if a, err := netip.ParseAddr(p.endpoint.PrivateIP); err == nil {
				p.remote.Endpoint = netip.AddrPortFrom(a, p.remote.Endpoint.Port())
				p.usingIP, p.usingNAT = a.String(), false
			}
		}
		if p.remote.ESP != nil {
			p.remote.ESP.Initiate = initiate(m.PreferredServer, prefersServer(p.endpoint))
		}
	}
	return peers
}

// initiate decides whether this gateway starts the IKE exchange with a
// remote, as Submariner's cable drivers do: the side that alone prefers to
// be the server answers, and the other initiates. When both or neither
// prefer it, it returns nil and the gateway's own rule applies: the
// gateway of the lower cluster ID initiates.
func initiate(localPrefers, remotePrefers bool) *bool {
	if localPrefers == remotePrefers {
		return nil
	}
	v := remotePrefers
	return &v
}

// prefersServer reads a remote Endpoint's preferred-server setting.
func prefersServer(e submv1.EndpointSpec) bool {
	return backendFlag(e, BackendConfigPreferredServer)
}

// backendFlag reads a boolean backend_config key of a remote Endpoint; one
// that does not say, or says something else than a boolean, says false.
func backendFlag(e submv1.EndpointSpec, key string) bool {
	b, err := strconv.ParseBool(e.BackendConfig[key])
	return err == nil && b
}
