package dnsd

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Store holds what dnsd answers from: the services the clusterset imports
// and which clusters are connected. Writers (the controller's feed, a
// static file) replace either part; each change compiles a new table that
// queries pick up with one atomic load, so a query never waits for a
// writer and never sees half a change.
//
// Until the first SetServices or Set, the store is not ready and queries
// in the zones get SERVFAIL, so that no resolver caches a name as missing
// while the feed is still starting.
type Store struct {
	mu        sync.Mutex
	services  []Service
	haveSvcs  bool
	local     string
	connected map[string]bool

	zones []string
	cur   atomic.Pointer[table]
}

// newStore returns an empty store, not ready, for a server of zones.
func newStore(zones []string) *Store {
	return &Store{zones: zones, connected: map[string]bool{}}
}

// State is a whole store's content, as a static file gives it.
type State struct {
	// LocalCluster is the ID of the cluster dnsd serves; its exports are
	// preferred and always count as connected.
	LocalCluster string
	// Connected are the other clusters the local gateway reports
	// connected. Exports of clusters not listed are not answered for
	// <svc> names.
	Connected []string
	Services  []Service
}

// Set replaces the whole state. Services that cannot be served (names
// that are not DNS-1123 labels, duplicates) are left out and reported in
// the error; the rest is served. The store keeps st.Services to compile
// again when the connectivity changes: the caller must not change them
// afterwards.
func (s *Store) Set(st State) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.local = st.LocalCluster
	s.connected = connectedSet(st.Connected)
	s.services = slices.Clone(st.Services)
	s.haveSvcs = true
	return s.rebuild()
}

// SetServices replaces the services and makes the store ready; as with
// Set, the caller must not change them afterwards.
func (s *Store) SetServices(services []Service) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.services = slices.Clone(services)
	s.haveSvcs = true
	return s.rebuild()
}

// SetConnectivity says which cluster is local and which others are
// connected.
func (s *Store) SetConnectivity(local string, connected []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := connectedSet(connected)
	if local == s.local && mapsEqual(set, s.connected) {
		return nil
	}
	s.local, s.connected = local, set
	if !s.haveSvcs {
		return nil
	}
	return s.rebuild()
}

// Ready reports whether the store has been given its services.
func (s *Store) Ready() bool { return s.cur.Load() != nil }

// Services returns how many services the store serves.
func (s *Store) Services() int {
	if t := s.cur.Load(); t != nil {
		return len(t.services)
	}
	return 0
}

func (s *Store) rebuild() error {
	// The serial is the SOA's: it must grow with every change a secondary
	// could notice; seconds since 1970 do, unless changes come faster than
	// one a second, which no secondary of this zone cares about.
	serial := uint32(time.Now().Unix())
	if prev := s.cur.Load(); prev != nil && serial <= prev.serial {
		serial = prev.serial + 1
	}
	t, err := compile(s.zones, s.local, s.connected, s.services, serial)
	s.cur.Store(t)
	return err
}

func (s *Store) table() *table { return s.cur.Load() }

func connectedSet(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
