package agent

import (
	"net/netip"
	"testing"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/natdiscovery"
)

func TestDiscoveryChoosesTheAddress(t *testing.T) {
	e := endpoint("c2-a", "c2", "esp", 1, func(s *submv1.EndpointSpec) {
		s.PublicIP, s.NATEnabled, s.BackendConfig[BackendConfigUDPPort] = "198.51.100.9", true, "4600"
		s.BackendConfig[BackendConfigNATDiscoveryPort] = "4490"
	})
	priv, pub := netip.MustParseAddr("172.18.0.9"), netip.MustParseAddr("198.51.100.9")
	target := natdiscovery.Target{Cluster: "c2", Private: priv, Public: pub, Port: 4490}
	seen := netip.MustParseAddrPort("203.0.113.5:4490")
	for _, tc := range []struct {
		name     string
		found    map[string]discovered
		want     string
		usingNAT bool
	}{
		{"the private address answered: private, no NAT", map[string]discovered{"c2": {target, natdiscovery.Result{Addr: priv, Seen: seen}}}, "172.18.0.9:4600", false},
		{"only the public address answered: public across NAT", map[string]discovered{"c2": {target, natdiscovery.Result{Addr: pub, NAT: true, Seen: seen}}}, "198.51.100.9:4600", true},
		{"nothing answered: the Endpoint's rule (public when published)", map[string]discovered{"c2": {target, natdiscovery.Result{}}}, "198.51.100.9:4600", true},
		{"not yet discovered: the Endpoint's rule", nil, "198.51.100.9:4600", true},
		{"discovered for an earlier Endpoint: the Endpoint's rule", map[string]discovered{"c2": {natdiscovery.Target{Cluster: "c2", Private: netip.MustParseAddr("172.18.0.8"), Public: pub, Port: 4490},
			natdiscovery.Result{Addr: netip.MustParseAddr("172.18.0.8")}}}, "198.51.100.9:4600", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := espMember(api.GatewaySettings{})
			peers := withJoinSettings(m, withDiscovery(plan(newLocal(&Config{Port: 4500, Member: m}), []*submv1.Endpoint{e}, nil), tc.found))
			p := peers[0]
			if p.remote.Endpoint != netip.MustParseAddrPort(tc.want) || p.remote.NAT != tc.usingNAT || p.usingIP != p.remote.Endpoint.Addr().String() || p.usingNAT != tc.usingNAT {
				t.Errorf("endpoint %v (NAT %v), using %s (NAT %v); want %s, NAT %v", p.remote.Endpoint, p.remote.NAT, p.usingIP, p.usingNAT, tc.want, tc.usingNAT)
			}
		})
	}
}

func TestARemoteWithoutDiscoveryPortIsNotProbed(t *testing.T) {
	e := endpoint("c2-a", "c2", "esp", 1, func(s *submv1.EndpointSpec) { s.PublicIP = "198.51.100.9" })
	if tg, ok := discoveryTarget(e.Spec); ok {
		t.Errorf("an Endpoint without %s is probed: %+v", BackendConfigNATDiscoveryPort, tg)
	}
}

func TestPublicIPIsLearnedFromWhatARemoteSees(t *testing.T) {
	// answer is one remote's discovery answer: the source it saw, and
	// whether it answered at its public address.
	type answer struct {
		remote, seen string
		nat          bool
	}
	pub := func(remote, seen string) answer { return answer{remote, seen, true} }
	priv := func(remote, seen string) answer { return answer{remote, seen, false} }
	const own = "172.18.0.5:4490" // validConfig's private IP
	for _, tc := range []struct {
		name, given string
		answers     []answer
		want        string
		nat         bool
	}{
		{"a source seen across NAT becomes the public IP", "", []answer{pub("c2", "203.0.113.5:61000")}, "203.0.113.5", true},
		{"a remote reached at its private IP that sees another source teaches it too", "", []answer{priv("c2", "203.0.113.5:61000")}, "203.0.113.5", true},
		{"the private IP seen means no NAT on this side", "", []answer{pub("c2", own)}, "", false},
		{"--public-ip wins over what is seen", "198.51.100.5", []answer{pub("c2", "203.0.113.5:61000")}, "198.51.100.5", true},
		{"a new source replaces the learned one", "", []answer{pub("c2", "203.0.113.5:61000"), pub("c2", "203.0.113.9:61000")}, "203.0.113.9", true},
		{"the latest of two remotes wins", "", []answer{pub("c2", "203.0.113.5:61000"), pub("c3", "203.0.113.9:4490")}, "203.0.113.9", true},
		{"a source seen across the internet outranks one seen inside a private network", "", []answer{pub("c2", "203.0.113.5:61000"), priv("c3", "10.9.0.1:4490")}, "203.0.113.5", true},
		{"once every remote sees the private IP the learned one goes", "", []answer{pub("c2", "203.0.113.5:61000"), pub("c2", own)}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			c.PublicIP = tc.given
			a, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			for _, ans := range tc.answers {
				a.learnPublicIP(ans.remote, natdiscovery.Result{NAT: ans.nat, Seen: netip.MustParseAddrPort(ans.seen)})
			}
			if s := a.endpointSpec(); s.PublicIP != tc.want || s.NATEnabled != tc.nat {
				t.Errorf("public IP %q (nat_enabled %v), want %q (%v)", s.PublicIP, s.NATEnabled, tc.want, tc.nat)
			}
		})
	}
}

func TestAGoneRemoteLeavesTheLearnedPublicIPToTheOthers(t *testing.T) {
	a, err := New(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	a.learnPublicIP("c2", natdiscovery.Result{NAT: true, Seen: netip.MustParseAddrPort("203.0.113.5:4490")})
	a.learnPublicIP("c3", natdiscovery.Result{NAT: true, Seen: netip.MustParseAddrPort("203.0.113.9:4490")})
	a.forgetSeen("c3")
	if got := a.endpointSpec().PublicIP; got != "203.0.113.5" {
		t.Errorf("after c3 left: public IP %q, want c2's 203.0.113.5", got)
	}
	a.forgetSeen("c2")
	if got := a.endpointSpec().PublicIP; got != "203.0.113.5" {
		t.Errorf("with no remote left: public IP %q, want the last learned 203.0.113.5 kept", got)
	}
}
