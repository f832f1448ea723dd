package gateway_test

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// relay is the underlay between a gateway on port near and a remote
// gateway on port far, both on loopback: the gateway reaches the remote at
// front, the remote reaches the gateway at back. cut drops everything from
// then on, as a crash of the remote's node does: nothing the remote sends
// afterwards, an IKE Delete as it stops say, arrives.
type relay struct {
	front, back *net.UDPConn
	wg          sync.WaitGroup
}

func newRelay(t *testing.T, near, far int) *relay {
	t.Helper()
	listen := func() *net.UDPConn {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	r := &relay{front: listen(), back: listen()}
	r.wg.Add(2)
	go r.pump(r.front, r.back, far)
	go r.pump(r.back, r.front, near)
	t.Cleanup(r.cut)
	return r
}

// pump sends what arrives at from on to port, from to.
func (r *relay) pump(from, to *net.UDPConn, port int) {
	defer r.wg.Done()
	dst := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	buf := make([]byte, 1<<16)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		to.WriteToUDP(buf[:n], dst)
	}
}

func (r *relay) cut() {
	r.front.Close()
	r.back.Close()
	r.wg.Wait()
}

// endpointOf is the address a gateway is told to reach c at.
func endpointOf(c *net.UDPConn) string { return c.LocalAddr().String() }

// TestInProcessRemoteGatewayTakeover has cluster c2's gateway b1 crash and
// its second gateway b2, on another address with its own keys and no
// tunnel state, take over; c1 is told that c2's endpoint moved to b2 and
// that its gateway is now "b2". Traffic from c1's pod to c2's pod must
// flow again. With ESP, c1 must drop the IKE SA it had with b1 at once
// and start a new one with b2: kept and sent to b2's address, it would be
// found dead only after a liveness check went unanswered through every
// IKE retransmission, half a minute.
func TestInProcessRemoteGatewayTakeover(t *testing.T) {
	for _, kind := range []string{transport.ESP, transport.WireGuard} {
		t.Run(kind, func(t *testing.T) {
			var link *relay
			c1, b1 := startPairWith(t, kind, []netip.Addr{pod1}, []netip.Addr{pod2}, func(cfg1, cfg2 *gateway.Config) {
				link = newRelay(t, cfg1.Transport.Port, cfg2.Transport.Port)
				cfg1.Remotes[0].Endpoint, cfg1.Remotes[0].Gateway = endpointOf(link.front), "b1"
				cfg2.Remotes[0].Endpoint = endpointOf(link.back)
			})
			echo := netip.AddrPortFrom(pod2, 5353)
			echoServer(t, b1, echo)
			awaitEcho(t, c1, echo)
			before := c1.gw.Stats().Remotes[0].IPsec
			if kind == transport.ESP && (before == nil || before.State != string(ike.StateEstablished)) {
				t.Fatalf("c1's IKE state with b1 after an echo: %+v, want established", before)
			}

			link.cut()
			b1.stop()

			cfgB2 := b1.cfg
			cfgB2.Transport.Port = gateway.FreeUDPPort(t)
			cfgB2.Remotes = slices.Clone(b1.cfg.Remotes)
			cfgB2.Remotes[0].Endpoint = fmt.Sprintf("127.0.0.1:%d", c1.cfg.Transport.Port)
			moved := c1.cfg
			moved.Remotes = slices.Clone(c1.cfg.Remotes)
			moved.Remotes[0].Endpoint, moved.Remotes[0].Gateway = fmt.Sprintf("127.0.0.1:%d", cfgB2.Transport.Port), "b2"
			if kind == transport.WireGuard {
				key := filepath.Join(t.TempDir(), "b2.key")
				_, pub, err := wireguard.LoadOrCreateKey(key)
				if err != nil {
					t.Fatal(err)
				}
				cfgB2.Transport.WireGuard = &gateway.WireGuardConfig{PrivateKeyFile: key}
				moved.Remotes[0].WireGuard = &gateway.WireGuardRemoteConfig{PublicKey: pub.String()}
			}
			b2 := start(t, cfgB2, []netip.Addr{pod2})
			echoServer(t, b2, echo)

			s, err := moved.Compile()
			if err != nil {
				t.Fatal(err)
			}
			if err := c1.gw.Update(s); err != nil {
				t.Fatal(err)
			}
			if kind == transport.ESP {
				// Update returns with the engine's new state in place: no
				// IKE SA yet, or already the new one with b2.
				if now := c1.gw.Stats().Remotes[0].IPsec; now == nil || now.IKESPIs == before.IKESPIs {
					t.Fatalf("right after c2's gateway changed to b2, c1's IKE state is %+v; want b1's IKE SA %s gone and a new one set up with b2", now, before.IKESPIs)
				}
			}

			awaitEcho(t, c1, echo)
			if rx := b2.gw.Stats().Remotes[0].RxPackets; rx == 0 {
				t.Error("an echo came back, but b2 counted no packets from c1")
			}
			if kind == transport.ESP {
				if after := c1.gw.Stats().Remotes[0].IPsec; after == nil || after.State != string(ike.StateEstablished) || after.IKESPIs == before.IKESPIs {
					t.Errorf("c1's IKE state with b2 after an echo: %+v; want established, not b1's SA %s", after, before.IKESPIs)
				}
			}
		})
	}
}
