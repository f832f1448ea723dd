package gateway

import (
	"net/netip"
)

// SyncConfig is the sync section of the file; see SyncSpec.
type SyncConfig struct {
	// Listen is ip:port on the active gateway (port default 4491).
	Listen string `json:"listen,omitempty"`
	// Follow is the active gateway's ip:port, on the passive one.
	Follow string `json:"follow,omitempty"`
	// Key is the secret both gateways hold, at least 16 bytes.
	Key   string `json:"key"`
	Rate  int    `json:"rate,omitempty"`
	Queue int    `json:"queue,omitempty"`
}

// parseSync parses the sync section into s.Sync.
func (c *Config) parseSync(errs *errList, s *Spec) {
	sc := c.Sync
	if sc == nil {
		return
	}
	s.Sync = &SyncSpec{Key: []byte(sc.Key), Rate: sc.Rate, Queue: sc.Queue}
	for _, f := range []struct {
		field, v string
		to       *netip.AddrPort
	}{{"sync.listen", sc.Listen, &s.Sync.Listen}, {"sync.follow", sc.Follow, &s.Sync.Follow}} {
		if f.v == "" {
			continue
		}
		ap, err := parseEndpoint(f.v, DefaultSyncPort)
		if err != nil {
			errs.add(f.field, "%q is not IP or IP:port; write it like 10.0.0.5:%d", f.v, DefaultSyncPort)
		}
		*f.to = ap
	}
}

// config renders s as the file's section.
func (s *SyncSpec) config() *SyncConfig {
	if s == nil {
		return nil
	}
	c := &SyncConfig{Key: string(s.Key), Rate: s.Rate, Queue: s.Queue}
	if s.Listen.IsValid() {
		c.Listen = s.Listen.String()
	}
	if s.Follow.IsValid() {
		c.Follow = s.Follow.String()
	}
	return c
}

// SyncSpec is the connection-tracking sync between a cluster's two
// gateways (sync.go): the active one serves its Globalnet flows on Listen,
// the passive one follows the active's address and keeps a replica, which
// it imports when it becomes active, so that established connections keep
// their global addresses and ports. Exactly one of Listen and Follow is set.
type SyncSpec struct {
	// Listen is where the active gateway serves the sync: the node's
	// private IP and a port (default DefaultSyncPort).
	Listen netip.AddrPort
	// Follow is the active gateway's sync address, on the passive one.
	Follow netip.AddrPort
	// Key is the secret both gateways hold (the agent gives the clusterset
	// PSK); each connection derives its keys from it.
	Key []byte
	// Rate caps the flow records sent per second; default
	// DefaultSyncRate.
	Rate int
	// Queue bounds the records waiting to be sent; a consumer that falls
	// further behind is resynchronised from a dump. Default
	// DefaultSyncQueue.
	Queue int
}

// Sync defaults.
const (
	DefaultSyncPort  = 4491
	DefaultSyncRate  = 100_000
	DefaultSyncQueue = 1 << 16
	// minSyncKey is the shortest key accepted: a PSK of 128 bits.
	minSyncKey = 16
)

// check validates s (nil is off) and fills its defaults.
func (s *SyncSpec) check(errs *errList, globalnet bool) {
	if s == nil {
		return
	}
	if s.Listen.IsValid() && s.Listen.Port() == 0 {
		s.Listen = netip.AddrPortFrom(s.Listen.Addr(), DefaultSyncPort)
	}
	if s.Follow.IsValid() && s.Follow.Port() == 0 {
		s.Follow = netip.AddrPortFrom(s.Follow.Addr(), DefaultSyncPort)
	}
	if s.Rate == 0 {
		s.Rate = DefaultSyncRate
	}
	if s.Queue == 0 {
		s.Queue = DefaultSyncQueue
	}
	switch {
	case s.Listen.IsValid() && s.Follow.IsValid():
		errs.add("sync.follow", "is set with sync.listen; the active gateway serves (listen), the passive one follows (follow): set one")
	case !s.Listen.IsValid() && !s.Follow.IsValid():
		errs.add("sync.listen", "is not set, nor sync.follow; set listen to this node's private IP and port on the active gateway, follow to the active's on the passive one")
	case s.Listen.IsValid() && !globalnet:
		errs.add("sync.listen", "is set but Globalnet is off; only Globalnet's flows are replicated: add a globalnet section or remove sync")
	case s.Follow.IsValid() && (s.Follow.Addr().IsUnspecified() || s.Follow.Addr().IsMulticast()):
		errs.add("sync.follow", "%s is not a unicast address; give the active gateway's private IP and sync port, like 10.0.0.5:%d", s.Follow, DefaultSyncPort)
	}
	if len(s.Key) < minSyncKey {
		errs.add("sync.key", "is %d bytes; give the clusterset PSK (at least %d bytes) that both gateways hold", len(s.Key), minSyncKey)
	}
	if s.Rate < 0 {
		errs.add("sync.rate", "%d is negative; give records per second, or 0 for %d", s.Rate, DefaultSyncRate)
	}
	if s.Queue < 0 {
		errs.add("sync.queue", "%d is negative; give the records to queue, or 0 for %d", s.Queue, DefaultSyncQueue)
	}
}
