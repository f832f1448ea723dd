package gateway

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/natengine"
	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// Spec is a gateway's configuration in typed form: addresses are netip
// values, Globalnet's addresses are the NAT engine's rules, and each
// transport has its own typed section. Config (the YAML file) compiles into
// one; the agent builds one directly from Kubernetes state. A running
// gateway applies the difference between two Specs (Runner.Apply).
//
// Field names in Validate's errors are the file's (remotes[1].podCIDRs[0]),
// as the two have the same shape.
type Spec struct {
	Cluster     ClusterSpec
	TUN         TUNSpec
	Transport   TransportSpec
	Remotes     []RemoteSpec
	UnderlayMTU int
	// MetricsAddress is where /metrics and /healthz are served; empty
	// disables the listener.
	MetricsAddress string
	// Globalnet is nil when Globalnet is off.
	Globalnet *GlobalnetSpec
	// ClustersetIP is nil when no clusterset IP is in use.
	ClustersetIP *ClustersetIPSpec
	Health       HealthSpec
	// Sync replicates Globalnet's connection tracking between a cluster's
	// two gateways; nil when off.
	Sync *SyncSpec
}

// ClusterSpec is the local cluster.
type ClusterSpec struct {
	ID           string
	PodCIDRs     []netip.Prefix
	ServiceCIDRs []netip.Prefix
}

// TUNSpec is the local tunnel device. Addr is invalid when the device has
// no address (and the gateway then neither probes nor answers probes).
type TUNSpec struct {
	Name string
	Addr netip.Prefix
	MTU  int
}

// TransportSpec is the tunnel: Kind is one of transport.Kinds, and the
// section of that kind is set.
type TransportSpec struct {
	Kind string
	Port uint16
	// Keepalive is the interval of the keepalives that hold NAT mappings
	// open; see TransportConfig.Keepalive.
	Keepalive time.Duration
	WireGuard *WireGuardSpec
	VXLAN     *VXLANSpec
	ESP       *ESPSpec
}

// WireGuardSpec is the local WireGuard identity; see WireGuardConfig.
type WireGuardSpec struct {
	PrivateKeyFile string
	UAPIName       string
}

// VXLANSpec is the local VXLAN tunnel endpoint; MAC is derived from the
// cluster ID when empty.
type VXLANSpec struct {
	VNI uint32
	MAC net.HardwareAddr
}

// ESPSpec is the local side of the esp transport; see ESPConfig. Zero
// durations take the IKE engine's defaults.
type ESPSpec struct {
	PSK          []byte
	PSKFile      string
	LocalID      string
	Proposals    []string
	IKEProposals []string
	RekeyTime    time.Duration
	IKERekeyTime time.Duration
	RekeyBytes   uint64
}

// RemoteSpec is a cluster the gateway connects to. Without Globalnet its
// pod and service CIDRs are routed to it; with Globalnet only GlobalCIDR is.
type RemoteSpec struct {
	ID           string
	PodCIDRs     []netip.Prefix
	ServiceCIDRs []netip.Prefix
	GlobalCIDR   netip.Prefix
	Endpoint     netip.AddrPort
	// Gateway names the remote cluster's gateway that serves Endpoint
	// (its Endpoint object's hostname); empty when unknown. Another
	// gateway shares none of the tunnel state of the one before it (IKE
	// and ESP SAs, WireGuard sessions, a learned VXLAN MAC), so when it
	// changes the remote's peer starts anew at once, instead of after the
	// old state is found dead: for ESP, IKE's retransmissions, half a
	// minute.
	Gateway       string
	HealthCheckIP netip.Addr // invalid when the remote is not probed
	NAT           bool       // reached across a NAT; see Remote.NAT
	// CheckedSegments says the remote checks the TCP checksum of every
	// segment it sends that could be joined; see Remote.CheckedSegments.
	CheckedSegments bool
	WireGuard       *WireGuardRemoteSpec
	VXLAN           *VXLANRemoteSpec
	ESP             *ESPRemoteSpec
}

// WireGuardRemoteSpec is a remote gateway's WireGuard identity.
type WireGuardRemoteSpec struct {
	PublicKey        wireguard.Key
	PresharedKeyFile string
}

// VXLANRemoteSpec describes a remote VTEP; MAC is learned when empty.
type VXLANRemoteSpec struct {
	MAC net.HardwareAddr
}

// ESPRemoteSpec is the remote's IKE identity (default its cluster ID) and
// who initiates (default: the cluster whose ID sorts first).
type ESPRemoteSpec struct {
	ID       string
	Initiate *bool
}

// GlobalnetSpec is Globalnet with every address resolved. Rules holds this
// cluster's global CIDR, cluster egress IPs, egress pools and ingress
// entries; the gateway fills in Rules.Local and Rules.Remotes itself.
type GlobalnetSpec struct {
	Supernet netip.Prefix
	Rules    natengine.Rules
	MaxFlows int
}

// ClustersetIPSpec is the clusterset IPs (the VIPs that MCS ServiceImports
// carry) this gateway serves. The route agents send the clusterset's VIP
// range to the active gateway, which routes it into its TUN and gives each
// connection to a VIP one backend: a cluster's address for the service
// (without Globalnet, its ClusterIP). A connection keeps its backend for
// its life.
type ClustersetIPSpec struct {
	// CIDR is the clusterset's VIP range (deploy-broker
	// --clusterset-ip-cidr-range, default 243.0.0.0/8).
	CIDR netip.Prefix
	// SNATAddr is this gateway's own address inside CIDR (in this
	// cluster's clusterset IP CIDR, never given to a service). A
	// connection whose backend is in the local cluster leaves with this
	// source, so that its replies come back through the gateway.
	SNATAddr netip.Addr
	Services []ClustersetService
}

// ClustersetService is one VIP: the ports it serves and the clusters that
// back it.
type ClustersetService struct {
	VIP      netip.Addr
	Ports    []ClustersetPort
	Backends []ClustersetBackend
}

// ClustersetPort is one port of a VIP; Proto is the IP protocol number
// (6 TCP, 17 UDP, 132 SCTP).
type ClustersetPort struct {
	Proto uint8
	Port  uint16
}

// ClustersetBackend is one cluster's address for a VIP's service: Cluster
// is the local cluster's ID or a remote's, Addr the service's address in
// that cluster. A connection goes to the local backend when there is one,
// else to a remote whose connection is up.
type ClustersetBackend struct {
	Cluster string
	Addr    netip.Addr
}

// HealthSpec tunes the health probes; zero values take the defaults.
// Enabled, when set, overrides "on when the TUN has an address".
type HealthSpec struct {
	Enabled            *bool
	Interval           time.Duration
	MaxPacketLossCount int
}

// Validate checks a Spec built in code as Config.Validate checks a file,
// and fills the same defaults.
func (s *Spec) Validate() error {
	_, err := s.derive()
	return err
}

func (s *Spec) applyDefaults() {
	if s.UnderlayMTU == 0 {
		s.UnderlayMTU = DefaultUnderlayMTU
	}
	if s.TUN.Name == "" {
		s.TUN.Name = DefaultTUNName
	}
	if s.Transport.Port == 0 {
		s.Transport.Port = DefaultPort
	}
	if s.Transport.Keepalive == 0 {
		s.Transport.Keepalive = DefaultKeepalive
	}
	switch s.Transport.Kind {
	case transport.VXLAN:
		if s.Transport.VXLAN == nil {
			s.Transport.VXLAN = &VXLANSpec{}
		}
		if s.Transport.VXLAN.VNI == 0 {
			s.Transport.VXLAN.VNI = DefaultVNI
		}
	case transport.WireGuard:
		if w := s.Transport.WireGuard; w != nil && w.UAPIName == "" {
			w.UAPIName = s.TUN.Name
		}
	}
	if s.Health.Interval == 0 {
		s.Health.Interval = DefaultHealthInterval
	}
	if s.Health.MaxPacketLossCount == 0 {
		s.Health.MaxPacketLossCount = DefaultMaxPacketLossCount
	}
	if c := s.ClustersetIP; c != nil && !c.CIDR.IsValid() {
		c.CIDR = netip.MustParsePrefix(DefaultClustersetIPCIDR)
	}
	if g := s.Globalnet; g != nil && !g.Supernet.IsValid() {
		g.Supernet = netip.MustParsePrefix(DefaultSupernet)
	}
	for i := range s.Remotes {
		r := &s.Remotes[i]
		if r.Endpoint.IsValid() && r.Endpoint.Port() == 0 {
			r.Endpoint = netip.AddrPortFrom(r.Endpoint.Addr(), DefaultPort)
		}
	}
}

// derive checks s and computes what the gateway runs on. Problems with a
// field errs already holds (the file's parse errors) are not reported
// again.
func (s *Spec) derive() (*spec, error) {
	var errs errList
	d := s.deriveInto(&errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return d, nil
}

func (s *Spec) deriveInto(errs *errList) *spec {
	s.applyDefaults()
	d := &spec{Spec: s}
	c := &s.Cluster
	if !clusterNameRE.MatchString(c.ID) || len(c.ID) > 63 {
		errs.add("cluster.id", "%q is not a DNS-1123 label; use lower-case letters, digits and '-', at most 63 characters", c.ID)
	}
	d.podPrefixes = checkCIDRs(errs, "cluster.podCIDRs", c.PodCIDRs)
	d.servicePrefixes = checkCIDRs(errs, "cluster.serviceCIDRs", c.ServiceCIDRs)
	d.local = append(slices.Clip(d.podPrefixes), d.servicePrefixes...)
	d.tunAddr = s.TUN.Addr
	d.port = s.Transport.Port
	if len(s.TUN.Name) > 15 || strings.ContainsAny(s.TUN.Name, "/ \t") {
		errs.add("tun.name", "%q is not a valid interface name; use at most 15 characters, no '/' or spaces", s.TUN.Name)
	}
	if s.UnderlayMTU < 576 || s.UnderlayMTU > 65535 {
		errs.add("underlayMTU", "%d is out of range; use a value from 576 to 65535 (1500 on most networks)", s.UnderlayMTU)
	}
	if s.TUN.MTU != 0 && (s.TUN.MTU < 576 || s.TUN.MTU > 65535) {
		errs.add("tun.mtu", "%d is out of range; use a value from 576 to 65535, or leave it unset to derive it from underlayMTU", s.TUN.MTU)
	}
	if s.MetricsAddress != "" {
		if _, _, err := net.SplitHostPort(s.MetricsAddress); err != nil {
			errs.add("metricsAddress", "%q is not host:port; write it like 127.0.0.1:9898 or :9898", s.MetricsAddress)
		}
	}

	t := &s.Transport
	if t.Keepalive < time.Second || t.Keepalive > maxKeepalive {
		errs.add("transport.keepalive", "%s is out of range; use 1s to 18h (default 25s, as NATs forget idle UDP mappings after 30s or more)", t.Keepalive)
	}
	switch t.Kind {
	case transport.WireGuard:
		if t.WireGuard == nil || t.WireGuard.PrivateKeyFile == "" {
			errs.add("transport.wireguard.privateKeyFile", "is required for the wireguard transport; name a file (it is generated if missing)")
		}
	case transport.VXLAN:
		if t.VXLAN.VNI >= 1<<24 {
			errs.add("transport.vxlan.vni", "%d does not fit in 24 bits; use 1 to 16777215 (default 1000)", t.VXLAN.VNI)
		}
	case transport.ESP:
	case "":
		errs.add("transport.type", "is required; use one of %s", strings.Join(transport.Kinds, ", "))
	default:
		errs.add("transport.type", "unknown transport %q; use one of %s", t.Kind, strings.Join(transport.Kinds, ", "))
	}

	ids := map[string]string{c.ID: "cluster.id"}
	keys := map[wireguard.Key]string{}
	for i := range s.Remotes {
		r := &s.Remotes[i]
		f := fmt.Sprintf("remotes[%d]", i)
		if !clusterNameRE.MatchString(r.ID) || len(r.ID) > 63 {
			errs.add(f+".id", "%q is not a DNS-1123 label; use lower-case letters, digits and '-', at most 63 characters", r.ID)
		} else if prev, dup := ids[r.ID]; dup {
			errs.add(f+".id", "cluster %q is already named by %s; every cluster needs its own ID", r.ID, prev)
		} else {
			ids[r.ID] = f + ".id"
		}
		rs := remoteSpec{id: r.ID, cidrs: append(checkCIDRs(errs, f+".podCIDRs", r.PodCIDRs), checkCIDRs(errs, f+".serviceCIDRs", r.ServiceCIDRs)...)}
		if len(r.PodCIDRs)+len(r.ServiceCIDRs) == 0 && s.Globalnet == nil {
			errs.add(f+".podCIDRs", "remote %q has no CIDRs; list its podCIDRs and serviceCIDRs", r.ID)
		}
		switch a := r.Endpoint.Addr(); {
		case !r.Endpoint.IsValid():
			errs.add(f+".endpoint", "is not set; give the remote gateway's address and port, like 198.18.0.2:4500")
		case a.IsUnspecified() || a.IsMulticast():
			errs.add(f+".endpoint", "%s is not a unicast address; give the remote gateway's own address, like 198.18.0.2:4500", r.Endpoint)
		}
		rs.endpoint = r.Endpoint
		if t.Kind == transport.WireGuard {
			switch {
			case r.WireGuard == nil || r.WireGuard.PublicKey.IsZero():
				errs.add(f+".wireguard.publicKey", "is required for the wireguard transport; copy it from the remote gateway's key file (.pub) or `snorkel pubkey`")
			case keys[r.WireGuard.PublicKey] != "":
				errs.add(f+".wireguard.publicKey", "is already the key of %s; every remote gateway has its own key", keys[r.WireGuard.PublicKey])
			default:
				keys[r.WireGuard.PublicKey] = f
			}
		}
		d.remotes = append(d.remotes, rs)
	}
	s.deriveGlobalnet(errs, d)
	s.deriveHealth(errs, d)
	s.deriveClustersetIP(errs, d)
	s.Sync.check(errs, s.Globalnet != nil)
	if t.Kind == transport.ESP {
		s.checkESP(errs, d)
	}
	for _, err := range overlapErrors(s) {
		errs.addErr(err)
	}
	return d
}

// checkCIDRs checks the typed CIDRs at field and returns the good ones.
func checkCIDRs(errs *errList, field string, ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for i, p := range ps {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case !p.IsValid():
			errs.add(f, "is not a CIDR; write it like 10.8.0.0/16")
			continue
		case p != p.Masked():
			errs.add(f, "%q has host bits set; did you mean %s?", p, p.Masked())
			continue
		case p.Overlaps(linkLocal):
			errs.add(f, "%s overlaps %s, which Calico uses for its pods' gateway; choose another range", p, linkLocal)
			continue
		}
		out = append(out, p)
	}
	return out
}

// Config renders s as the file `snorkel gateway --config` reads, for a
// gateway run apart from the agent that builds s. Key material stays in
// the files s names, except an ESP key given inline.
func (s *Spec) Config() Config {
	c := Config{
		Cluster:        Cluster{ID: s.Cluster.ID, PodCIDRs: cidrStrings(s.Cluster.PodCIDRs), ServiceCIDRs: cidrStrings(s.Cluster.ServiceCIDRs)},
		TUN:            TUN{Name: s.TUN.Name, MTU: s.TUN.MTU},
		Transport:      TransportConfig{Type: s.Transport.Kind, Port: int(s.Transport.Port), Keepalive: durationString(s.Transport.Keepalive)},
		UnderlayMTU:    s.UnderlayMTU,
		MetricsAddress: s.MetricsAddress,
		ClustersetIP:   s.clustersetConfig(),
		Sync:           s.Sync.config(),
	}
	if a := s.TUN.Addr; a.IsValid() {
		c.TUN.Address = a.String()
		if a.IsSingleIP() {
			c.TUN.Address = a.Addr().String()
		}
	}
	if w := s.Transport.WireGuard; w != nil {
		c.Transport.WireGuard = &WireGuardConfig{PrivateKeyFile: w.PrivateKeyFile, UAPIName: w.UAPIName}
	}
	if v := s.Transport.VXLAN; v != nil {
		c.Transport.VXLAN = &VXLANLocalConfig{VNI: v.VNI, MAC: macString(v.MAC)}
	}
	if e := s.Transport.ESP; e != nil {
		c.Transport.ESP = &ESPConfig{PSK: string(e.PSK), PSKFile: e.PSKFile, LocalID: e.LocalID, Proposals: e.Proposals,
			IKEProposals: e.IKEProposals, RekeyTime: durationString(e.RekeyTime), IKERekeyTime: durationString(e.IKERekeyTime), RekeyBytes: e.RekeyBytes}
	}
	if h := s.Health; h != (HealthSpec{}) {
		c.HealthCheck = &HealthCheck{Enabled: h.Enabled, Interval: durationString(h.Interval), MaxPacketLossCount: h.MaxPacketLossCount}
	}
	if g := s.Globalnet; g != nil {
		c.Globalnet = &Globalnet{MaxFlows: g.MaxFlows}
		if g.Supernet.IsValid() {
			c.Globalnet.Supernet = g.Supernet.String()
		}
		c.Globalnet.SetAllocations(g.Rules)
	}
	for _, r := range s.Remotes {
		rc := Remote{ID: r.ID, PodCIDRs: cidrStrings(r.PodCIDRs), ServiceCIDRs: cidrStrings(r.ServiceCIDRs), Endpoint: endpointString(r.Endpoint), Gateway: r.Gateway, NAT: r.NAT, CheckedSegments: r.CheckedSegments}
		if r.GlobalCIDR.IsValid() {
			rc.GlobalCIDR = r.GlobalCIDR.String()
		}
		if r.HealthCheckIP.IsValid() {
			rc.HealthCheckIP = r.HealthCheckIP.String()
		}
		if w := r.WireGuard; w != nil {
			rc.WireGuard = &WireGuardRemoteConfig{PublicKey: w.PublicKey.String(), PresharedKeyFile: w.PresharedKeyFile}
		}
		if v := r.VXLAN; v != nil {
			rc.VXLAN = &VXLANRemoteConfig{MAC: macString(v.MAC)}
		}
		if e := r.ESP; e != nil {
			rc.ESP = &ESPRemoteConfig{ID: e.ID, Initiate: e.Initiate}
		}
		c.Remotes = append(c.Remotes, rc)
	}
	return c
}

func macString(m net.HardwareAddr) string {
	if len(m) == 0 {
		return ""
	}
	return m.String()
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// cidrStrings formats ps for the file, nil for none.
func cidrStrings(ps []netip.Prefix) []string {
	if len(ps) == 0 {
		return nil
	}
	return prefixStrings(ps)
}
