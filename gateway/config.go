package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// Defaults applied by Validate where a field is left empty.
const (
	DefaultPort        = 4500
	DefaultVNI         = 1000
	DefaultUnderlayMTU = 1500
	DefaultTUNName     = "snorkel0"
	// DefaultKeepalive is WireGuard's advice for persistent keepalives
	// behind a NAT, and within RFC 3948's 20 s for NAT-T keepalives of
	// most NATs' 30 s or more for an idle UDP mapping.
	DefaultKeepalive = 25 * time.Second
)

// maxKeepalive is the longest interval WireGuard's persistent keepalive
// takes (65535 seconds).
const maxKeepalive = 65535 * time.Second

// Config describes one gateway: its own cluster, how it tunnels, and the
// remote clusters it connects to. It is what `snorkel gateway --config FILE`
// reads (YAML, these JSON names) and what the controller builds from
// Kubernetes state. Addresses are strings so that Validate can name the field
// of any bad one.
type Config struct {
	Cluster   Cluster         `json:"cluster"`
	TUN       TUN             `json:"tun"`
	Transport TransportConfig `json:"transport"`
	Remotes   []Remote        `json:"remotes"`
	// UnderlayMTU is the MTU of the network between gateways; the TUN MTU is
	// this less the transport's overhead.
	UnderlayMTU int `json:"underlayMTU,omitempty"`
	// MetricsAddress is where /metrics (Prometheus) and /healthz are
	// served; empty disables the listener. /status and /flows are on
	// snorkel gateway's --debug-address instead, which is loopback.
	MetricsAddress string `json:"metricsAddress,omitempty"`
	// Globalnet, if set, translates between this cluster's addresses and
	// its global CIDR; see globalnet.go.
	Globalnet *Globalnet `json:"globalnet,omitempty"`
	// HealthCheck tunes the probes to the remotes' healthCheckIPs; see
	// health.go.
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
	// ClustersetIP, if set, carries connections to the clusterset IPs
	// of services exported with --use-clusterset-ip; see clusterset.go.
	ClustersetIP *ClustersetIP `json:"clustersetIP,omitempty"`
	// Sync, if set, replicates Globalnet's connection tracking between
	// the cluster's two gateways; see sync.go.
	Sync *SyncConfig `json:"sync,omitempty"`
}

// Cluster is the local cluster.
type Cluster struct {
	ID           string   `json:"id"`
	PodCIDRs     []string `json:"podCIDRs"`
	ServiceCIDRs []string `json:"serviceCIDRs"`
}

// TUN is the local tunnel device.
type TUN struct {
	Name string `json:"name,omitempty"`
	// Address, if set, is assigned to the device (a bare IP gets a host
	// prefix) and is the source of the ICMP errors the gateway generates.
	// It is also this gateway's health-check address (its Endpoint's
	// healthCheckIP): probes leave from it, and the gateway answers the
	// remotes' probes to it.
	Address string `json:"address,omitempty"`
	// MTU overrides the derived MTU (UnderlayMTU less transport overhead).
	// Packets larger than the derived MTU are still refused with an ICMP
	// "fragmentation needed" when they carry DF.
	MTU int `json:"mtu,omitempty"`
}

// TransportConfig selects and configures the tunnel.
type TransportConfig struct {
	Type string `json:"type"`
	// Port is the local UDP port (default 4500).
	Port int `json:"port,omitempty"`
	// BindAddress restricts the UDP socket to one local address.
	BindAddress string `json:"bindAddress,omitempty"`
	// Keepalive is how often a keepalive holds a NAT's mapping open while
	// the tunnel is idle, as a Go duration: WireGuard's persistent
	// keepalive to each remote marked nat, the ESP NAT-T keepalive
	// (RFC 3948 §2.3) to every remote. Default 25s, from 1s to 18h.
	Keepalive string            `json:"keepalive,omitempty"`
	WireGuard *WireGuardConfig  `json:"wireguard,omitempty"`
	VXLAN     *VXLANLocalConfig `json:"vxlan,omitempty"`
	ESP       *ESPConfig        `json:"esp,omitempty"`
}

// WireGuardConfig is the local WireGuard identity.
type WireGuardConfig struct {
	// PrivateKeyFile holds the base64 private key. If the file does not
	// exist, a key is generated and written there (mode 0600), and its public
	// key beside it with the suffix ".pub".
	PrivateKeyFile string `json:"privateKeyFile"`
	// UAPIName names the UAPI socket /var/run/wireguard/NAME.sock that
	// `wg show NAME` reads; default the TUN name.
	UAPIName string `json:"uapiName,omitempty"`
}

// VXLANLocalConfig is the local VXLAN tunnel endpoint.
type VXLANLocalConfig struct {
	VNI uint32 `json:"vni,omitempty"`
	// MAC is the inner Ethernet source address; derived from the cluster ID
	// when empty.
	MAC string `json:"mac,omitempty"`
}

// Remote is a cluster this gateway connects to.
type Remote struct {
	ID string `json:"id"`
	// PodCIDRs and ServiceCIDRs are routed to the remote without Globalnet;
	// with Globalnet they are optional and not used.
	PodCIDRs     []string `json:"podCIDRs,omitempty"`
	ServiceCIDRs []string `json:"serviceCIDRs,omitempty"`
	// GlobalCIDR is the remote's global CIDR, required with Globalnet: it is
	// what is routed to the remote and what its packets may come from.
	GlobalCIDR string `json:"globalCIDR,omitempty"`
	// Endpoint is the remote gateway's underlay address, "IP" or "IP:port".
	Endpoint string `json:"endpoint"`
	// Gateway names the remote gateway (its node); optional. When it
	// changes, the tunnel to the remote starts anew at once: another
	// gateway of that cluster shares no tunnel state with the last one.
	Gateway string `json:"gateway,omitempty"`
	// HealthCheckIP is the remote gateway's health-check address (its
	// tun.address; in Kubernetes its Endpoint's healthCheckIP). When set,
	// the gateway probes it, and answers probes from it.
	HealthCheckIP string `json:"healthCheckIP,omitempty"`
	// NAT says the remote is reached across a NAT, its own or this
	// gateway's: WireGuard sends it persistent keepalives, and VXLAN
	// sends to the port its frames come from, which a NAT may change.
	// WireGuard and ESP follow the remote's address and port whatever
	// this says, as their packets prove who sent them.
	NAT bool `json:"nat,omitempty"`
	// CheckedSegments says the remote is a Snorkel gateway: it checks the
	// TCP checksum of every segment it sends that could be joined, and its
	// transport protects what it sends with a checksum (VXLAN's outer UDP
	// checksum) or authentication (ESP, WireGuard) that this gateway's end
	// verifies. This gateway then joins the remote's segments for the TUN
	// device without summing each one again. Leave it off for any other
	// peer, such as a kernel vxlan device or strongSwan: a segment
	// corrupted before it entered their tunnel would be passed to the
	// local TCP stack as verified.
	CheckedSegments bool                   `json:"checkedSegments,omitempty"`
	WireGuard       *WireGuardRemoteConfig `json:"wireguard,omitempty"`
	VXLAN           *VXLANRemoteConfig     `json:"vxlan,omitempty"`
	ESP             *ESPRemoteConfig       `json:"esp,omitempty"`
}

// WireGuardRemoteConfig is a remote gateway's WireGuard identity.
type WireGuardRemoteConfig struct {
	PublicKey        string `json:"publicKey"`
	PresharedKeyFile string `json:"presharedKeyFile,omitempty"`
}

// VXLANRemoteConfig describes a remote VTEP.
type VXLANRemoteConfig struct {
	// MAC is the destination Ethernet address of frames sent to this
	// remote; learned from its frames when empty.
	MAC string `json:"mac,omitempty"`
}

// clusterNameRE is a DNS-1123 label, the form Kubernetes and Submariner use
// for cluster IDs.
var clusterNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// spec is a validated Spec and what the gateway derives from it.
type spec struct {
	*Spec
	local           []netip.Prefix // pod then service CIDRs of the local cluster
	podPrefixes     []netip.Prefix
	servicePrefixes []netip.Prefix
	remotes         []remoteSpec
	tunAddr         netip.Prefix // zero if unset
	port            uint16
	globalnet       *globalnetSpec  // nil when Globalnet is off
	clusterset      *clustersetSpec // nil without clusterset IPs
	health          *healthSpec
}

type remoteSpec struct {
	id string
	// cidrs are routed to the remote and are the only sources it may send
	// from: its pod and service CIDRs, or with Globalnet its global CIDR.
	cidrs    []netip.Prefix
	endpoint netip.AddrPort
}

// Validate checks the whole configuration and reports every problem it finds,
// each naming the field and what to do about it. It also fills defaults.
func (c *Config) Validate() error {
	_, err := c.build()
	return err
}

// Compile checks the configuration as Validate does and returns it in
// typed form.
func (c *Config) Compile() (*Spec, error) {
	s, err := c.build()
	if err != nil {
		return nil, err
	}
	return s.Spec, nil
}

// errList collects problems, one per field: a field whose text did not
// parse is not judged again on what little was made of it.
type errList struct {
	errs   []error
	fields map[string]bool
}

func (l *errList) add(field, format string, args ...any) {
	if l.fields[field] {
		return
	}
	if l.fields == nil {
		l.fields = map[string]bool{}
	}
	l.fields[field] = true
	l.errs = append(l.errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

// addErr records an error that names its own field.
func (l *errList) addErr(err error) { l.errs = append(l.errs, err) }

// err is every problem in l, one per line, or nil if there is none.
func (l *errList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	return fmt.Errorf("invalid gateway config:\n  %w", joinLines(l.errs))
}

func (c *Config) applyDefaults() {
	if c.UnderlayMTU == 0 {
		c.UnderlayMTU = DefaultUnderlayMTU
	}
	if c.TUN.Name == "" {
		c.TUN.Name = DefaultTUNName
	}
	if c.Transport.Port == 0 {
		c.Transport.Port = DefaultPort
	}
	if c.Transport.Type == transport.VXLAN {
		if c.Transport.VXLAN == nil {
			c.Transport.VXLAN = &VXLANLocalConfig{}
		}
		if c.Transport.VXLAN.VNI == 0 {
			c.Transport.VXLAN.VNI = DefaultVNI
		}
	}
	if c.Transport.Type == transport.WireGuard && c.Transport.WireGuard != nil && c.Transport.WireGuard.UAPIName == "" {
		c.Transport.WireGuard.UAPIName = c.TUN.Name
	}
	if c.Globalnet != nil {
		c.Globalnet.applyDefaults()
	}
}

// build parses the file's strings into a Spec, then checks and derives it
// as any Spec is.
func (c *Config) build() (*spec, error) {
	c.applyDefaults()
	var errs errList
	// A gateway with no one to connect to has nothing to do; a Spec may
	// pass through that state (the Runner stops the gateway), a file may
	// not.
	if len(c.Remotes) == 0 {
		errs.add("remotes", "no remote clusters; list at least one cluster to connect to")
	}
	s := c.parse(&errs)
	d := s.deriveInto(&errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return d, nil
}

// parse turns the file's strings into typed values, reporting each that
// does not parse under its field.
func (c *Config) parse(errs *errList) *Spec {
	s := &Spec{
		Cluster: ClusterSpec{
			ID:           c.Cluster.ID,
			PodCIDRs:     parseCIDRs(errs, "cluster.podCIDRs", c.Cluster.PodCIDRs),
			ServiceCIDRs: parseCIDRs(errs, "cluster.serviceCIDRs", c.Cluster.ServiceCIDRs),
		},
		TUN:            TUNSpec{Name: c.TUN.Name, MTU: c.TUN.MTU},
		UnderlayMTU:    c.UnderlayMTU,
		MetricsAddress: c.MetricsAddress,
		Transport:      TransportSpec{Kind: c.Transport.Type},
	}
	if c.TUN.Address != "" {
		p, err := parseHostOrPrefix(c.TUN.Address)
		if err != nil {
			errs.add("tun.address", "%q is not an IP address or CIDR; write it like 10.8.255.254 or 10.8.255.254/32", c.TUN.Address)
		}
		s.TUN.Addr = p
	}
	if c.Transport.Port < 1 || c.Transport.Port > 65535 {
		errs.add("transport.port", "%d is not a UDP port; use 1 to 65535 (default 4500)", c.Transport.Port)
	}
	s.Transport.Port = uint16(c.Transport.Port)
	if c.Transport.Keepalive != "" {
		d, err := time.ParseDuration(c.Transport.Keepalive)
		if err != nil {
			errs.add("transport.keepalive", "%q is not a duration; write it like 25s", c.Transport.Keepalive)
		}
		s.Transport.Keepalive = d
	}
	switch c.Transport.Type {
	case transport.WireGuard:
		if w := c.Transport.WireGuard; w != nil {
			s.Transport.WireGuard = &WireGuardSpec{PrivateKeyFile: w.PrivateKeyFile, UAPIName: w.UAPIName}
		}
	case transport.VXLAN:
		v := c.Transport.VXLAN
		s.Transport.VXLAN = &VXLANSpec{VNI: v.VNI}
		if v.MAC != "" {
			m, err := net.ParseMAC(v.MAC)
			if err != nil {
				errs.add("transport.vxlan.mac", "%q is not a MAC address; write it like 02:53:4e:00:00:01", v.MAC)
			}
			s.Transport.VXLAN.MAC = m
		}
	case transport.ESP:
		s.Transport.ESP = c.parseESP(errs)
	}
	for i, r := range c.Remotes {
		f := fmt.Sprintf("remotes[%d]", i)
		rs := RemoteSpec{
			ID:           r.ID,
			PodCIDRs:     parseCIDRs(errs, f+".podCIDRs", r.PodCIDRs),
			ServiceCIDRs: parseCIDRs(errs, f+".serviceCIDRs", r.ServiceCIDRs),
		}
		ep, err := parseEndpoint(r.Endpoint, DefaultPort)
		if err != nil {
			errs.add(f+".endpoint", "%q is not IP or IP:port; write it like 198.18.0.2:4500", r.Endpoint)
		}
		rs.Endpoint = ep
		rs.Gateway = r.Gateway
		rs.NAT = r.NAT
		rs.CheckedSegments = r.CheckedSegments
		if r.HealthCheckIP != "" {
			a, err := netip.ParseAddr(r.HealthCheckIP)
			if err != nil || a.Zone() != "" {
				errs.add(f+".healthCheckIP", "%q is not an IP address; write the remote gateway's health-check address (its Endpoint's healthCheckIP), like 10.9.255.254", r.HealthCheckIP)
			} else {
				rs.HealthCheckIP = a.Unmap()
			}
		}
		switch c.Transport.Type {
		case transport.WireGuard:
			if r.WireGuard != nil && r.WireGuard.PublicKey != "" {
				k, err := wireguard.ParseKey(r.WireGuard.PublicKey)
				if err != nil || !validKey(r.WireGuard.PublicKey) {
					errs.add(f+".wireguard.publicKey", "is not a base64 WireGuard key (44 characters ending in '=')")
				}
				rs.WireGuard = &WireGuardRemoteSpec{PublicKey: k, PresharedKeyFile: r.WireGuard.PresharedKeyFile}
			}
		case transport.VXLAN:
			if r.VXLAN != nil && r.VXLAN.MAC != "" {
				m, err := net.ParseMAC(r.VXLAN.MAC)
				if err != nil {
					errs.add(f+".vxlan.mac", "%q is not a MAC address; write it like 02:53:4e:00:00:02", r.VXLAN.MAC)
				}
				rs.VXLAN = &VXLANRemoteSpec{MAC: m}
			}
		case transport.ESP:
			if r.ESP != nil {
				rs.ESP = &ESPRemoteSpec{ID: r.ESP.ID, Initiate: r.ESP.Initiate}
			}
		}
		s.Remotes = append(s.Remotes, rs)
	}
	c.parseGlobalnet(errs, s)
	c.parseHealth(errs, s)
	c.parseClustersetIP(errs, s)
	c.parseSync(errs, s)
	return s
}

// overlapErrors reports CIDRs shared by two clusters: routing by destination
// would be ambiguous, which is what Globalnet exists to solve. With Globalnet
// on, only a cluster's own ranges must not overlap each other.
//
// Two prefixes overlap only when one contains the other, so after sorting
// by first address (wider first) each prefix overlaps exactly the prefixes
// on a stack of those that contain its first address: the work is
// O(n log n) plus one step per overlap reported. With Globalnet, where
// clusters may share ranges freely, each cluster is swept on its own so
// that shared ranges cost nothing.
func overlapErrors(c *Spec) []error {
	var all []ownedCIDR
	add := func(cluster string, remote int, pods, svcs []netip.Prefix) {
		for i, p := range pods {
			if p.IsValid() {
				all = append(all, ownedCIDR{cluster, remote, false, i, p.Masked(), len(all)})
			}
		}
		for i, p := range svcs {
			if p.IsValid() {
				all = append(all, ownedCIDR{cluster, remote, true, i, p.Masked(), len(all)})
			}
		}
	}
	add(c.Cluster.ID, -1, c.Cluster.PodCIDRs, c.Cluster.ServiceCIDRs)
	for i, r := range c.Remotes {
		add(r.ID, i, r.PodCIDRs, r.ServiceCIDRs)
	}
	var errs []error
	report := func(a, b *ownedCIDR) {
		// The error goes to the later of the two, which a reader going
		// down the file meets second.
		if a.order > b.order {
			a, b = b, a
		}
		if a.cluster == b.cluster {
			errs = append(errs, fmt.Errorf("%s: %s overlaps %s %s of the same cluster; list each range once", b.field(), b.p, a.field(), a.p))
			return
		}
		errs = append(errs, fmt.Errorf("%s: %s of cluster %q overlaps %s %s of cluster %q; give the clusters distinct CIDRs, or connect them through Globalnet", b.field(), b.p, b.cluster, a.field(), a.p, a.cluster))
	}
	if c.Globalnet == nil {
		sweepOverlaps(all, report)
		return errs
	}
	slices.SortStableFunc(all, func(a, b ownedCIDR) int { return strings.Compare(a.cluster, b.cluster) })
	for len(all) > 0 {
		n := 1
		for n < len(all) && all[n].cluster == all[0].cluster {
			n++
		}
		sweepOverlaps(all[:n], report)
		all = all[n:]
	}
	return errs
}

// ownedCIDR is a CIDR of the configuration and where it was written.
type ownedCIDR struct {
	cluster string
	remote  int // -1 for the local cluster
	service bool
	index   int
	p       netip.Prefix
	order   int // position in the configuration
}

// field names where the CIDR was written; it is formatted only for an
// error, as a configuration may hold tens of thousands of CIDRs.
func (o *ownedCIDR) field() string {
	base, list := "cluster", "podCIDRs"
	if o.remote >= 0 {
		base = fmt.Sprintf("remotes[%d]", o.remote)
	}
	if o.service {
		list = "serviceCIDRs"
	}
	return fmt.Sprintf("%s.%s[%d]", base, list, o.index)
}

// sweepOverlaps calls report once for every pair of overlapping CIDRs in
// cidrs, which it sorts.
func sweepOverlaps(cidrs []ownedCIDR, report func(a, b *ownedCIDR)) {
	slices.SortFunc(cidrs, func(a, b ownedCIDR) int {
		if c := a.p.Addr().Compare(b.p.Addr()); c != 0 {
			return c
		}
		return a.p.Bits() - b.p.Bits()
	})
	// open holds the CIDRs that contain the first address of the one
	// being visited, each containing the next.
	var open []*ownedCIDR
	for i := range cidrs {
		cur := &cidrs[i]
		for len(open) > 0 && !open[len(open)-1].p.Contains(cur.p.Addr()) {
			open = open[:len(open)-1]
		}
		for _, o := range open {
			report(o, cur)
		}
		open = append(open, cur)
	}
}

// parseCIDRs parses the list at field, reporting each bad entry and
// keeping its place (as an invalid prefix) so that later checks name the
// right index.
func parseCIDRs(errs *errList, field string, vals []string) []netip.Prefix {
	var out []netip.Prefix
	for i, v := range vals {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			errs.add(fmt.Sprintf("%s[%d]", field, i), "%q is not a CIDR; write it like 10.8.0.0/16", v)
		}
		out = append(out, p)
	}
	return out
}

func parseHostOrPrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func parseEndpoint(s string, defPort uint16) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return netip.AddrPort{}, errors.New("port 0")
		}
		return ap, nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, defPort), nil
}

// validKey reports whether s is a base64-encoded 32-byte key.
func validKey(s string) bool {
	return len(s) == 44 && strings.HasSuffix(s, "=") && !strings.ContainsFunc(s[:43], func(r rune) bool {
		return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '+' || r == '/')
	})
}

// joinLines joins errors one per line, keeping them unwrappable.
func joinLines(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	slices.Sort(msgs)
	return &multiError{errs: errs, text: strings.Join(msgs, "\n  ")}
}

type multiError struct {
	errs []error
	text string
}

func (m *multiError) Error() string   { return m.text }
func (m *multiError) Unwrap() []error { return m.errs }
