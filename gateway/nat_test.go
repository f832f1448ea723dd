package gateway

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// natSpec is c1 with two remotes over kind: c2 across a NAT, c3 not.
func natSpec(kind string) *Spec {
	s := &Spec{
		Cluster:   ClusterSpec{ID: "c1", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
		Transport: TransportSpec{Kind: kind, WireGuard: &WireGuardSpec{PrivateKeyFile: "unused"}},
	}
	for i, id := range []string{"c2", "c3"} {
		k, _ := wireguard.GenerateKey()
		s.Remotes = append(s.Remotes, RemoteSpec{
			ID:        id,
			PodCIDRs:  []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(2 + i), 0, 0}), 16)},
			Endpoint:  netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(2 + i)}), 4500),
			NAT:       id == "c2",
			WireGuard: &WireGuardRemoteSpec{PublicKey: k.Public()},
		})
	}
	return s
}

func TestRemotesAcrossANATGetKeepalivesAndFollowTheirPort(t *testing.T) {
	s := natSpec(transport.WireGuard)
	d, err := s.derive()
	if err != nil {
		t.Fatal(err)
	}
	k := keys{wgPSK: make([]*wireguard.Key, 2)}
	if got := d.wgPeer(0, k).PersistentKeepalive; got != int(DefaultKeepalive/time.Second) {
		t.Errorf("WireGuard keepalive to the remote across a NAT is %ds, want %v", got, DefaultKeepalive)
	}
	if got := d.wgPeer(1, k).PersistentKeepalive; got != 0 {
		t.Errorf("WireGuard keepalive to the remote without a NAT is %ds, want none", got)
	}
	s.Transport.Keepalive = 5 * time.Second
	if got := d.wgPeer(0, k).PersistentKeepalive; got != 5 {
		t.Errorf("WireGuard keepalive is %ds, want the configured 5s", got)
	}

	v := natSpec(transport.VXLAN)
	dv, err := v.derive()
	if err != nil {
		t.Fatal(err)
	}
	if !dv.vxlanPeer(0).FollowPort || dv.vxlanPeer(1).FollowPort {
		t.Errorf("VXLAN follows the port of c2 %v and c3 %v, want only c2, the remote across a NAT", dv.vxlanPeer(0).FollowPort, dv.vxlanPeer(1).FollowPort)
	}
}

func TestKeepaliveOutOfRangeIsRefused(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 20 * time.Hour} {
		s := natSpec(transport.VXLAN)
		s.Transport.Keepalive = d
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "transport.keepalive") {
			t.Errorf("keepalive %v: %v, want an error naming transport.keepalive", d, err)
		}
	}
	c := natSpec(transport.VXLAN).Config()
	c.Transport.Keepalive = "soon"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "transport.keepalive: \"soon\" is not a duration") {
		t.Errorf("keepalive \"soon\": %v", err)
	}
	c.Transport.Keepalive = "10s"
	s, err := c.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if s.Transport.Keepalive != 10*time.Second || !s.Remotes[0].NAT || s.Remotes[1].NAT {
		t.Errorf("the file compiled to keepalive %v, nat %v %v", s.Transport.Keepalive, s.Remotes[0].NAT, s.Remotes[1].NAT)
	}
}
