package gateway

import (
	"sync/atomic"
	"time"
)

// counters are one remote cluster's traffic counters. They are updated once
// per batch, not per packet, so two cores rarely contend on them.
type counters struct {
	txPackets, txBytes atomic.Uint64
	rxPackets, rxBytes atomic.Uint64
	drops              [numDropReasons]atomic.Uint64
	lastRx             atomic.Int64 // coarse clock, unix seconds
	// established is when traffic from the remote last resumed after
	// none for connectedWindow (or ever), unix seconds; 0 before any.
	established atomic.Int64
}

// RemoteStats is a snapshot of one remote cluster's counters.
type RemoteStats struct {
	Cluster   string            `json:"cluster"`
	Endpoint  string            `json:"endpoint"`
	TxPackets uint64            `json:"txPackets"`
	TxBytes   uint64            `json:"txBytes"`
	RxPackets uint64            `json:"rxPackets"`
	RxBytes   uint64            `json:"rxBytes"`
	Drops     map[string]uint64 `json:"drops,omitempty"`
	// Status is Submariner's connection status: connecting, connected or
	// error. With health probes it follows them; without, a remote is
	// connected while traffic arrives from it.
	Status string `json:"status"`
	// StatusMessage says why the status is error.
	StatusMessage string `json:"statusMessage,omitempty"`
	// Established is when the connection last became connected: its first
	// probe answered after none or after an error, or, for a remote that
	// is not probed, its first traffic after none for three minutes.
	Established *time.Time `json:"established,omitempty"`
	// Health is set when the gateway probes the remote: probe counters and
	// round-trip times. Probes are not counted in the Tx and Rx counters.
	Health *HealthStatus `json:"health,omitempty"`
	// IPsec is the IKE state with the remote, for the esp transport.
	IPsec *IPsecStatus `json:"ipsec,omitempty"`
}

// Stats is a snapshot of the gateway's counters. Unattributed holds drops of
// packets that belong to no remote cluster (e.g. egress with no route).
type Stats struct {
	Cluster      string            `json:"cluster"`
	Transport    string            `json:"transport"`
	MTU          int               `json:"mtu"`
	PublicKey    string            `json:"publicKey,omitempty"`
	Remotes      []RemoteStats     `json:"remotes"`
	Unattributed map[string]uint64 `json:"unattributedDrops,omitempty"`
	// TransportDrops are the transport's own drops; Cluster is empty where
	// the sender is unknown.
	TransportDrops []TransportDrop `json:"transportDrops,omitempty"`
	// Globalnet is set when Globalnet is on.
	Globalnet *GlobalnetStatus `json:"globalnet,omitempty"`
	// ClustersetIP is set while the gateway serves clusterset IPs.
	ClustersetIP *ClustersetIPStatus `json:"clustersetIP,omitempty"`
	// Sync is set while the gateway serves its flows to the passive one
	// (sync.listen).
	Sync *SyncStatus `json:"sync,omitempty"`
}

// TransportDrop is a count of packets the transport discarded.
type TransportDrop struct {
	Cluster string `json:"cluster"`
	Reason  string `json:"reason"`
	Count   uint64 `json:"count"`
}

func (c *counters) dropMap() map[string]uint64 {
	var m map[string]uint64
	for r := range c.drops {
		if n := c.drops[r].Load(); n > 0 {
			if m == nil {
				m = map[string]uint64{}
			}
			m[dropReason(r).String()] = n
		}
	}
	return m
}

// tally accumulates per-remote counts over one batch before they are added to
// the shared counters.
type tally struct {
	packets, bytes uint64
}
