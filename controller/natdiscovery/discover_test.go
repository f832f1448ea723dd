package natdiscovery

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

// fakeProber answers at the addresses it lists, with the seen source
// given, and never at the others.
type fakeProber map[netip.Addr]netip.AddrPort

func (f fakeProber) Probe(ctx context.Context, to netip.AddrPort, _ string) (netip.AddrPort, error) {
	if s, ok := f[to.Addr()]; ok {
		return s, nil
	}
	<-ctx.Done()
	return netip.AddrPort{}, errors.New("no answer")
}

func TestDiscoverChoosesAnAddress(t *testing.T) {
	priv, pub := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("203.0.113.2")
	mySeen := netip.MustParseAddrPort("198.51.100.1:4490")
	target := Target{Cluster: "c2", Private: priv, Public: pub, Port: DefaultPort}
	for _, tc := range []struct {
		name   string
		prober fakeProber
		target Target
		want   Result
	}{
		{"the private address answering is used without NAT", fakeProber{priv: mySeen, pub: mySeen}, target, Result{Addr: priv, Seen: mySeen}},
		{"only the public address answering is used across NAT", fakeProber{pub: mySeen}, target, Result{Addr: pub, NAT: true, Seen: mySeen}},
		{"no answer leaves the choice to the caller", fakeProber{}, target, Result{}},
		{"a remote without public address is probed at its private one", fakeProber{priv: mySeen}, Target{Cluster: "c2", Private: priv, Port: DefaultPort}, Result{Addr: priv, Seen: mySeen}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if got := Discover(ctx, tc.prober, tc.target); got != tc.want {
				t.Errorf("Discover = %+v, want %+v", got, tc.want)
			}
		})
	}
}
