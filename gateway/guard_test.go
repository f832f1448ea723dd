package gateway

import (
	"slices"
	"testing"
)

func TestGuardCoversWhatIsRoutedIntoTheTUN(t *testing.T) {
	v6 := validConfig()
	v6.Remotes[0].PodCIDRs = append(v6.Remotes[0].PodCIDRs, "fd00:9::/64")
	v6.Remotes = append(v6.Remotes, Remote{
		ID: "c3", PodCIDRs: []string{"10.7.0.0/16"}, Endpoint: "198.18.0.3",
		WireGuard: &WireGuardRemoteConfig{PublicKey: "Rk5kWjB0dnpKd2hGbU9XYk1hVnJHdXV4SlN6UlZ0Qzg="},
	})
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"every remote's pod and service CIDRs", validConfig(), []string{"10.9.0.0/16", "10.99.0.0/16"}},
		{"IPv6 CIDRs and every remote alike", v6, []string{"10.9.0.0/16", "fd00:9::/64", "10.99.0.0/16", "10.7.0.0/16"}},
		// The remote's pod and service CIDRs are this cluster's own: a
		// guard on them would cut the cluster off from itself.
		{"with Globalnet only the remotes' global CIDRs", globalnetConfig(), []string{"242.2.0.0/16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.cfg.build()
			if err != nil {
				t.Fatal(err)
			}
			var got, routed []string
			for _, g := range s.guarded() {
				got = append(got, g.cidr.String())
				if !slices.Contains(s.remotes[g.remote].cidrs, g.cidr) {
					t.Errorf("%s is guarded for remote %d, which does not own it", g.cidr, g.remote)
				}
			}
			for _, r := range s.remotes {
				for _, p := range r.cidrs {
					routed = append(routed, p.String())
				}
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(got, routed) {
				t.Errorf("guarded %v, want %v, which is what the TUN gets (%v)", got, tc.want, routed)
			}
		})
	}
}
