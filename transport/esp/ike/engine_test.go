package ike

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestEstablishWithEachProposal(t *testing.T) {
	type tc struct {
		ike, esp string
		want     Transform
	}
	var cases []tc
	for _, encr := range []string{"aes128gcm16-prfsha256", "aes256gcm16-prfsha256", "aes128-sha256", "aes256-sha256-prfsha256"} {
		for _, g := range []string{"x25519", "ecp256", "modp2048"} {
			cases = append(cases, tc{encr + "-" + g, "aes128gcm16", Transform{Encr: EncrAESGCM16, KeyBits: 128}})
		}
	}
	cases = append(cases,
		tc{"aes128gcm16-prfsha256-x25519", "aes256gcm16", Transform{Encr: EncrAESGCM16, KeyBits: 256}},
		tc{"aes128gcm16-prfsha256-x25519", "aes128-sha256", Transform{Encr: EncrAESCBC, KeyBits: 128, Integ: IntegHMACSHA256_128}},
		tc{"aes128gcm16-prfsha256-x25519", "aes256-sha256", Transform{Encr: EncrAESCBC, KeyBits: 256, Integ: IntegHMACSHA256_128}},
		tc{"aes128gcm16-prfsha256-x25519", "aes256gcm16-esn", Transform{Encr: EncrAESGCM16, KeyBits: 256, ESN: true}},
	)
	for _, c := range cases {
		for _, bInitiates := range []bool{false, true} {
			name := c.ike + " " + c.esp + map[bool]string{false: " A initiates", true: " B initiates"}[bInitiates]
			t.Run(name, func(t *testing.T) {
				p := newPair(t, func(a, b *Config) {
					a.IKEProposals, b.IKEProposals = []string{c.ike}, []string{c.ike}
					a.ESPProposals, b.ESPProposals = []string{c.esp}, []string{c.esp}
					a.Peers[0].Initiate, b.Peers[0].Initiate = !bInitiates, bInitiates
				})
				p.n.run(time.Second)
				ca, _ := p.established(t)
				if ca.Transform != c.want {
					t.Fatalf("transform %+v, want %+v", ca.Transform, c.want)
				}
				if got := p.a.peers[0].ike.suite.String(); !strings.HasSuffix(got, c.ike[strings.LastIndex(c.ike, "-"):]) {
					t.Fatalf("IKE suite %s, want the group of %s", got, c.ike)
				}
				if !slices.Equal(ca.LocalTS, netsA) || !slices.Equal(ca.RemoteTS, netsB) {
					t.Fatalf("selectors %v<->%v, want %v<->%v", ca.LocalTS, ca.RemoteTS, netsA, netsB)
				}
			})
		}
	}
}

func TestInvalidKERetriesWithTheRespondersGroup(t *testing.T) {
	p := newPair(t, func(a, b *Config) {
		a.IKEProposals = []string{"aes128gcm16-prfsha256-x25519-ecp256"}
		b.IKEProposals = []string{"aes128gcm16-prfsha256-ecp256"}
	})
	p.n.run(time.Second)
	p.established(t)
	if g := p.a.peers[0].ike.suite.dh; g != dhECP256 {
		t.Fatalf("group %s, want ecp256", dhName(g))
	}
	if n := p.n.count(addrA, exchIKESAInit, false); n != 2 {
		t.Fatalf("%d IKE_SA_INIT requests, want 2 (x25519, then ecp256)", n)
	}
}

func TestNoProposalChosenIsReported(t *testing.T) {
	t.Run("IKE", func(t *testing.T) {
		p := newPair(t, func(a, b *Config) {
			a.IKEProposals = []string{"aes128gcm16-prfsha256-x25519"}
			b.IKEProposals = []string{"aes256-sha256-x25519"}
		})
		p.n.run(time.Second)
		wantErr(t, p.a, "peer 192.0.2.2:4500: IKE_SA_INIT refused: NO_PROPOSAL_CHOSEN")
		wantErr(t, p.b, "NO_PROPOSAL_CHOSEN sent: the peer's IKE proposals match none of IKEProposals (aes256-sha256-x25519)")
	})
	t.Run("ESP", func(t *testing.T) {
		p := newPair(t, func(a, b *Config) {
			a.ESPProposals, b.ESPProposals = []string{"aes128gcm16"}, []string{"aes256-sha256"}
		})
		p.n.run(time.Second)
		wantErr(t, p.a, "IKE_AUTH: no CHILD_SA: NO_PROPOSAL_CHOSEN")
		wantErr(t, p.b, "the peer's ESP proposals match none of ESPProposals")
		if len(p.dpA.eventLog())+len(p.dpB.eventLog()) != 0 {
			t.Fatal("a CHILD_SA was installed")
		}
		if len(p.a.sas) != 0 || len(p.b.sas) != 0 {
			t.Fatalf("IKE SAs left: A %d, B %d; an IKE SA without its CHILD_SA is deleted", len(p.a.sas), len(p.b.sas))
		}
	})
}

func wantErr(t *testing.T, e *Engine, want string) {
	t.Helper()
	if got := e.Status()[0].LastError; !strings.Contains(got, want) {
		t.Fatalf("LastError %q, want it to contain %q", got, want)
	}
}

func TestTrafficSelectors(t *testing.T) {
	t.Run("the responder narrows and the initiator takes it", func(t *testing.T) {
		narrowA := []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24")}
		p := newPair(t, func(a, b *Config) { b.Peers[0].RemoteTS = narrowA })
		p.n.run(time.Second)
		ca, _ := p.established(t)
		if !slices.Equal(ca.LocalTS, narrowA) {
			t.Fatalf("A's local selectors %v, want the narrowed %v", ca.LocalTS, narrowA)
		}
	})
	t.Run("disjoint selectors are refused", func(t *testing.T) {
		p := newPair(t, func(a, b *Config) { b.Peers[0].RemoteTS = []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16")} })
		p.n.run(time.Second)
		wantErr(t, p.a, "TS_UNACCEPTABLE")
		wantErr(t, p.b, "TS_UNACCEPTABLE sent")
	})
}

func TestCookiesWhenHalfOpenSAsReachTheThreshold(t *testing.T) {
	addrC := netip.MustParseAddrPort("192.0.2.3:4500")
	n := newTestNet(t)
	cfgB := baseConfig(addrB)
	cfgB.CookieThreshold = 1
	cfgB.Peers = append(cfgB.Peers, PeerConfig{Endpoint: addrC, LocalTS: netsB, RemoteTS: []netip.Prefix{netip.MustParsePrefix("10.3.0.0/16")}})
	dpB := newFakeDP()
	b := n.add(addrB, cfgB, dpB, nil)
	cfgC := baseConfig(addrA)
	cfgC.LocalID = "c.test"
	n.add(addrC, cfgC, newFakeDP(), nil)
	dpA := newFakeDP()
	n.add(addrA, baseConfig(addrA), dpA, nil)
	// C never hears back, so its SA at B stays half open.
	n.drop = func(p packet) bool { return p.to == addrC }
	n.start()
	n.run(time.Second)
	if got := b.Status()[0]; got.State != StateEstablished {
		t.Fatalf("A at B: %s (%s), want established", got.State, got.LastError)
	}
	var toA []*message
	for _, p := range n.sent {
		if p.from == addrB && p.to == addrA && p.msg[18] == exchIKESAInit {
			m, err := parseMessage(p.msg)
			if err != nil {
				t.Fatal(err)
			}
			toA = append(toA, m)
		}
	}
	if len(toA) != 2 || len(toA[0].payloads) != 1 || notify(toA[0].payloads, notifyCookie) == nil || toA[0].spiR != 0 {
		t.Fatalf("B's IKE_SA_INIT answers to A: %d; want a lone COOKIE notify without an SPI, then the real answer", len(toA))
	}
	var retry []byte
	for _, p := range n.sent {
		if p.from == addrA && p.msg[18] == exchIKESAInit {
			retry = p.msg
		}
	}
	m, _ := parseMessage(retry)
	if c, ok := m.payloads[0].(*notifyPayload); !ok || c.typ != notifyCookie {
		t.Fatal("A's retry does not start with the COOKIE notify (RFC 7296 §2.6)")
	}
	// A forged cookie gets another cookie and no state.
	sas := len(b.sas)
	m.spiI++
	m.payloads[0].(*notifyPayload).data[5] ^= 1
	n.queue = nil
	b.handle(addrA, m.encode(), n.now)
	if len(b.sas) != sas || len(n.queue) != 1 {
		t.Fatalf("a forged cookie: %d SAs (was %d), %d answers", len(b.sas), sas, len(n.queue))
	}
	if ans, _ := parseMessage(n.queue[0].msg); notify(ans.payloads, notifyCookie) == nil {
		t.Fatal("a forged cookie is not answered with a fresh cookie")
	}
	if d, _ := dpB.dropped(); d[DropCookieRequired] != 1 || d[DropInvalidCookie] != 1 {
		t.Fatalf("drops %v; want A's first request as cookie_required and the forgery as invalid_cookie", d)
	}
}

func TestRetransmission(t *testing.T) {
	tests := []struct {
		name string
		lose func(p packet) bool
	}{
		{"lost IKE_SA_INIT request", func(p packet) bool { return p.from == addrA && p.msg[18] == exchIKESAInit }},
		{"lost IKE_SA_INIT response", func(p packet) bool { return p.from == addrB && p.msg[18] == exchIKESAInit }},
		{"lost IKE_AUTH request", func(p packet) bool { return p.from == addrA && p.msg[18] == exchIKEAuth }},
		{"lost IKE_AUTH response", func(p packet) bool { return p.from == addrB && p.msg[18] == exchIKEAuth }},
	}
	for _, tt := range tests {
		for _, losses := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s %d times", tt.name, losses), func(t *testing.T) {
				p := newPair(t, nil)
				lost := 0
				p.n.drop = func(pk packet) bool {
					if lost < losses && tt.lose(pk) {
						lost++
						return true
					}
					return false
				}
				p.n.run(time.Minute)
				p.established(t)
				if lost != losses {
					t.Fatalf("%d messages lost, want %d", lost, losses)
				}
				if n := len(p.dpB.eventLog()); n != 1 {
					t.Fatalf("B changed its data plane %d times; a retransmitted request must get the stored answer, not a new CHILD_SA", n)
				}
			})
		}
	}
}

// rekeyed checks that each side has exactly one CHILD_SA, not first, that
// it was installed before first was deleted, and returns A's.
func (p *pair) rekeyed(t *testing.T, first ChildSA) ChildSA {
	t.Helper()
	ca, cb := p.established(t)
	if ca.InSPI == first.InSPI || ca.OutSPI == first.OutSPI {
		t.Fatal("the CHILD_SA was not replaced")
	}
	for _, side := range []struct {
		name    string
		dp      *fakeDP
		now, in uint32
	}{{"A", p.dpA, ca.InSPI, first.InSPI}, {"B", p.dpB, cb.InSPI, first.OutSPI}} {
		ev := side.dp.eventLog()
		inst := slices.Index(ev, fmt.Sprintf("install %08x", side.now))
		del := slices.Index(ev, fmt.Sprintf("delete %08x", side.in))
		if inst < 0 || del < 0 || inst > del {
			t.Fatalf("%s's data plane: %v; want the new CHILD_SA installed before the old one is deleted", side.name, ev)
		}
	}
	if len(p.a.spis) != 1 || len(p.b.spis) != 1 {
		t.Fatalf("inbound SPIs reserved: A %d, B %d; want 1 each", len(p.a.spis), len(p.b.spis))
	}
	return ca
}

func TestChildRekey(t *testing.T) {
	for _, side := range []string{"A", "B"} {
		t.Run("started by "+side, func(t *testing.T) {
			p := newPair(t, func(a, b *Config) {
				c := a
				if side == "B" {
					c = b
				}
				c.ChildRekeyTime, c.RekeyJitter = 10*time.Minute, time.Minute
			})
			p.n.run(time.Second)
			first, _ := p.established(t)
			p.n.run(11 * time.Minute)
			p.rekeyed(t, first)
			from, other := addrA, addrB
			if side == "B" {
				from, other = addrB, addrA
			}
			if p.n.count(from, exchCreateChildSA, false) != 1 || p.n.count(other, exchCreateChildSA, false) != 0 {
				t.Fatalf("CREATE_CHILD_SA requests: %s %d, other %d; want 1 and 0", side,
					p.n.count(from, exchCreateChildSA, false), p.n.count(other, exchCreateChildSA, false))
			}
		})
	}
}

func TestChildRekeyWhenTheDataPlaneSaysSo(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(a, b *Config)
		stats SAStats
	}{
		{"sequence numbers near 2^32", nil, SAStats{OutSeq: seqRekey32}},
		{"byte limit", func(a, b *Config) { a.ChildRekeyBytes = 1 << 20 }, SAStats{InBytes: 600 << 10, OutBytes: 500 << 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPair(t, tt.edit)
			p.n.run(time.Second)
			first, _ := p.established(t)
			p.dpA.mu.Lock()
			p.dpA.stats[first.InSPI] = tt.stats
			p.dpA.mu.Unlock()
			p.n.run(statsInterval + time.Second)
			p.rekeyed(t, first)
		})
	}
	t.Run("ESN sequence numbers near 2^32 are fine", func(t *testing.T) {
		p := newPair(t, func(a, b *Config) {
			a.ESPProposals, b.ESPProposals = []string{"aes128gcm16-esn"}, []string{"aes128gcm16-esn"}
		})
		p.n.run(time.Second)
		first, _ := p.established(t)
		p.dpA.stats[first.InSPI] = SAStats{OutSeq: seqRekey32}
		p.n.run(statsInterval + time.Second)
		if c, _ := p.established(t); c.InSPI != first.InSPI {
			t.Fatal("rekeyed a CHILD_SA with 64-bit sequence numbers at 2^32")
		}
	})
}

func TestIKERekey(t *testing.T) {
	for _, side := range []string{"A", "B"} {
		t.Run("started by "+side, func(t *testing.T) {
			p := newPair(t, func(a, b *Config) {
				c := a
				if side == "B" {
					c = b
				}
				c.IKERekeyTime, c.RekeyJitter = 10*time.Minute, time.Minute
			})
			p.n.run(time.Second)
			first, _ := p.established(t)
			before := p.a.Status()[0]
			p.n.run(11 * time.Minute)
			c, _ := p.established(t)
			after := p.a.Status()[0]
			if after.IKESPIi == before.IKESPIi || after.IKESPIr == before.IKESPIr {
				t.Fatal("the IKE SA was not replaced")
			}
			if c.InSPI != first.InSPI || len(p.dpA.eventLog()) != 1 {
				t.Fatalf("the CHILD_SA changed with the IKE SA: %v", p.dpA.eventLog())
			}
			if !after.Established.Equal(before.Established) {
				t.Fatal("Established moved with the rekey")
			}
			if len(p.a.sas) != 1 || len(p.b.sas) != 1 {
				t.Fatalf("IKE SAs: A %d, B %d; the old one must be deleted", len(p.a.sas), len(p.b.sas))
			}
			// A CHILD_SA rekey on the new IKE SA proves both derived
			// the same SK_d.
			sa := p.b.peers[0].ike
			p.b.enqueue(sa, p.b.rekeyChild(sa.children[0]))
			p.n.run(time.Second)
			p.rekeyed(t, first)
		})
	}
}

func TestRekeyCollisions(t *testing.T) {
	t.Run("CHILD_SA", func(t *testing.T) {
		for seed := range 8 {
			p := newPair(t, nil)
			p.n.run(time.Second)
			first, _ := p.established(t)
			for _, e := range []*Engine{p.a, p.b} {
				sa := e.peers[0].ike
				e.enqueue(sa, e.rekeyChild(sa.children[0]))
			}
			if seed%2 == 1 {
				// Cross the requests the other way round in the queue.
				p.n.queue[0], p.n.queue[1] = p.n.queue[1], p.n.queue[0]
			}
			p.n.run(time.Second)
			p.rekeyed(t, first)
			if p.n.count(addrA, exchCreateChildSA, false) != 1 || p.n.count(addrB, exchCreateChildSA, false) != 1 {
				t.Fatal("both sides should have sent one rekey")
			}
		}
	})
	t.Run("IKE SA", func(t *testing.T) {
		for range 8 {
			p := newPair(t, nil)
			p.n.run(time.Second)
			first, _ := p.established(t)
			before := p.a.Status()[0]
			for _, e := range []*Engine{p.a, p.b} {
				e.enqueue(e.peers[0].ike, e.rekeyIKE(0))
			}
			p.n.run(time.Second)
			c, _ := p.established(t)
			if after := p.a.Status()[0]; after.IKESPIi == before.IKESPIi {
				t.Fatal("the IKE SA was not replaced")
			}
			if len(p.a.sas) != 1 || len(p.b.sas) != 1 {
				t.Fatalf("IKE SAs: A %d, B %d; the redundant and the old one must go", len(p.a.sas), len(p.b.sas))
			}
			if c.InSPI != first.InSPI {
				t.Fatal("the CHILD_SA changed")
			}
			sa := p.a.peers[0].ike
			p.a.enqueue(sa, p.a.rekeyChild(sa.children[0]))
			p.n.run(time.Second)
			p.rekeyed(t, first)
		}
	})
}

func TestDelete(t *testing.T) {
	t.Run("CHILD_SA", func(t *testing.T) {
		p := newPair(t, nil)
		p.n.run(time.Second)
		p.established(t)
		sa := p.b.peers[0].ike
		p.b.enqueue(sa, p.b.deleteChild(sa.children[0]))
		p.n.run(time.Second)
		if len(p.dpA.current()) != 0 || len(p.dpB.current()) != 0 {
			t.Fatal("the CHILD_SA is still installed")
		}
		if p.a.Status()[0].State != StateEstablished || len(p.a.spis) != 0 || len(p.b.spis) != 0 {
			t.Fatal("the IKE SA should stay and the SPIs be free")
		}
	})
	t.Run("IKE SA, and the initiator reconnects", func(t *testing.T) {
		p := newPair(t, nil)
		p.n.run(time.Second)
		first, _ := p.established(t)
		before := p.a.Status()[0]
		p.b.deleteIKE(p.b.peers[0].ike)
		p.n.run(100 * time.Millisecond)
		if len(p.dpA.current()) != 0 || len(p.dpB.current()) != 0 || len(p.a.sas)+len(p.b.sas) != 0 {
			t.Fatal("SAs left after the IKE SA was deleted")
		}
		p.n.run(5 * time.Second)
		c, _ := p.established(t)
		if c.InSPI == first.InSPI || p.a.Status()[0].IKESPIi == before.IKESPIi {
			t.Fatal("not reconnected with new SAs")
		}
	})
	t.Run("deletes that cross", func(t *testing.T) {
		p := newPair(t, nil)
		p.n.run(time.Second)
		p.established(t)
		for _, e := range []*Engine{p.a, p.b} {
			sa := e.peers[0].ike
			e.enqueue(sa, e.deleteChild(sa.children[0]))
		}
		p.n.run(time.Second)
		if len(p.dpA.current()) != 0 || len(p.dpB.current()) != 0 || p.b.Status()[0].State != StateEstablished {
			t.Fatal("crossing deletes left a CHILD_SA or lost the IKE SA")
		}
	})
}

func TestDeadPeerDetection(t *testing.T) {
	t.Run("a silent peer is declared dead and the initiator starts over", func(t *testing.T) {
		p := newPair(t, nil)
		p.n.run(time.Second)
		p.established(t)
		p.n.drop = func(pk packet) bool { return pk.from == addrB }
		p.n.run(30*time.Second + 31*time.Second)
		if len(p.dpA.current()) != 0 {
			t.Fatal("the dead peer's CHILD_SA is still installed")
		}
		st := p.a.Status()[0]
		if want := "peer 192.0.2.2:4500: no answer to INFORMATIONAL after 5 transmissions (is the peer up and reachable on UDP port 4500?)"; st.LastError != want {
			t.Fatalf("LastError %q, want %q", st.LastError, want)
		}
		if n := p.n.count(addrA, exchInformational, false); n != 5 {
			t.Fatalf("%d INFORMATIONAL requests, want 5 (1 s doubling)", n)
		}
		p.n.run(2 * time.Second)
		if st := p.a.Status()[0]; st.State != StateConnecting {
			t.Fatalf("state %s, want connecting again", st.State)
		}
		p.n.drop = nil
		p.n.run(time.Minute)
		p.established(t)
	})
	t.Run("ESP traffic from the peer stands in for liveness checks", func(t *testing.T) {
		p := newPair(t, func(a, b *Config) { b.DPDInterval = time.Hour })
		p.n.run(time.Second)
		c, _ := p.established(t)
		p.dpA.stats[c.InSPI] = SAStats{LastIn: p.n.now.Add(10 * time.Minute).UnixNano()}
		p.n.run(5 * time.Minute)
		if n := p.n.count(addrA, exchInformational, false); n != 0 {
			t.Fatalf("%d liveness checks while ESP arrived", n)
		}
		p.dpA.stats[c.InSPI] = SAStats{}
		p.n.run(5 * time.Minute)
		if n := p.n.count(addrA, exchInformational, false); n == 0 {
			t.Fatal("no liveness check once ESP stopped")
		}
		p.established(t)
	})
}

func TestWrongPSKFailsClearly(t *testing.T) {
	other := []byte("another-psk-entirely-0123456789")
	p := newPair(t, func(a, b *Config) { b.PSK = other })
	p.n.run(time.Second)
	wantA := "peer 192.0.2.2:4500: authentication failed: AUTHENTICATION_FAILED (check the PSK on both sides)"
	wantB := "peer 192.0.2.1:4500: authentication failed: the peer's AUTH does not match the PSK, AUTHENTICATION_FAILED sent (check the PSK on both sides)"
	if got := p.a.Status()[0].LastError; got != wantA {
		t.Fatalf("A: %q, want %q", got, wantA)
	}
	if got := p.b.Status()[0].LastError; got != wantB {
		t.Fatalf("B: %q, want %q", got, wantB)
	}
	if len(p.dpA.eventLog())+len(p.dpB.eventLog()) != 0 || len(p.a.sas)+len(p.b.sas) != 0 {
		t.Fatal("state left after a failed authentication")
	}
	if !strings.Contains(p.logsA.String(), wantA) || !strings.Contains(p.logsB.String(), wantB) {
		t.Fatal("the failure is not in the log")
	}
	for _, secret := range [][]byte{psk, other} {
		for _, logs := range []string{p.logsA.String(), p.logsB.String()} {
			if strings.Contains(logs, string(secret)) || strings.Contains(strings.ToLower(logs), hex.EncodeToString(secret)) {
				t.Fatal("a PSK is in the log")
			}
		}
	}
	p.n.run(10 * time.Second)
	if n := p.n.count(addrA, exchIKESAInit, false); n < 2 || n > 5 {
		t.Fatalf("%d attempts in 10 s; want the initiator to retry with a backoff", n)
	}
	if n := strings.Count(p.logsA.String(), wantA); n != 1 {
		t.Fatalf("the error was logged %d times in 10 s of retries; want once a minute", n)
	}
}

func TestLogsHoldNoKeys(t *testing.T) {
	p := newPair(t, func(a, b *Config) {
		a.IKEProposals, b.IKEProposals = []string{"aes128-sha256-x25519"}, []string{"aes128-sha256-x25519"}
	})
	p.n.run(time.Second)
	first, _ := p.established(t)
	keys := [][]byte{psk, first.In.Encr, first.Out.Encr}
	for _, e := range []*Engine{p.a, p.b} {
		k := e.peers[0].ike.keys
		keys = append(keys, k.d, k.ai, k.ar, k.ei, k.er, k.pi, k.pr, e.peers[0].ike.ni, e.peers[0].ike.nr)
	}
	sa := p.a.peers[0].ike
	p.a.enqueue(sa, p.a.rekeyChild(sa.children[0]))
	p.n.run(time.Second)
	logs := strings.ToLower(p.logsA.String() + p.logsB.String())
	for _, k := range keys {
		h := hex.EncodeToString(k)
		if strings.Contains(logs, h[:16]) || strings.Contains(logs, string(k)) {
			t.Fatalf("a key or nonce is in the log")
		}
	}
}

func TestBothSidesInitiating(t *testing.T) {
	for range 8 {
		p := newPair(t, func(a, b *Config) { b.Peers[0].Initiate = true })
		p.n.run(5 * time.Second)
		p.established(t)
		if len(p.a.sas) != 1 || len(p.b.sas) != 1 {
			t.Fatalf("IKE SAs: A %d, B %d; want one", len(p.a.sas), len(p.b.sas))
		}
	}
}

func TestRequestsTheEngineRefuses(t *testing.T) {
	t.Run("IKE_SA_INIT from an unknown address", func(t *testing.T) {
		p := newPair(t, func(a, b *Config) { a.Peers[0].Initiate = false })
		init := initRequestFrom(t, addrB)
		p.b.handle(netip.MustParseAddrPort("198.51.100.7:4500"), init, p.n.now)
		if len(p.n.queue) != 0 || len(p.b.sas) != 0 {
			t.Fatal("answered or kept state for an unknown peer")
		}
	})
	t.Run("an unknown critical payload", func(t *testing.T) {
		p := newPair(t, func(a, b *Config) { a.Peers[0].Initiate = false })
		m, err := parseMessage(initRequestFrom(t, addrB))
		if err != nil {
			t.Fatal(err)
		}
		chain := append([]byte{firstKind(m.payloads), 0x80, 0, 4}, appendPayloads(nil, m.payloads)...)
		b := append(m.appendHeader(nil, 200, headerLen+len(chain)), chain...)
		p.b.handle(addrA, b, p.n.now)
		if len(p.n.queue) != 1 {
			t.Fatalf("%d answers, want 1", len(p.n.queue))
		}
		m, err = parseMessage(p.n.queue[0].msg)
		if err != nil {
			t.Fatal(err)
		}
		n := notify(m.payloads, notifyUnsupportedCriticalPayload)
		if n == nil || !bytes.Equal(n.data, []byte{200}) || !m.isResponse() {
			t.Fatalf("answer %+v, want UNSUPPORTED_CRITICAL_PAYLOAD naming type 200", m.payloads)
		}
	})
}

// initRequestFrom returns the IKE_SA_INIT request an engine with the
// standard A configuration would send to to.
func initRequestFrom(t *testing.T, to netip.AddrPort) []byte {
	n := newTestNet(t)
	cfg := baseConfig(addrA)
	cfg.Peers[0].Endpoint = to
	n.add(addrA, cfg, newFakeDP(), nil).start(n.now)
	return n.queue[0].msg
}

func TestStatus(t *testing.T) {
	p := newPair(t, nil)
	if st := p.a.Status()[0]; st.State != StateConnecting || st.Endpoint != addrB {
		t.Fatalf("before any answer: %+v", st)
	}
	if st := p.b.Status()[0]; st.State != StateDown {
		t.Fatalf("the responder before any request: %+v", st)
	}
	p.n.run(time.Second)
	ca, _ := p.established(t)
	st := p.a.Status()[0]
	if len(st.Children) != 1 || st.Children[0].InSPI != ca.InSPI || st.Children[0].OutSPI != ca.OutSPI ||
		st.Children[0].Transform != ca.Transform || st.Established.IsZero() || st.LastError != "" {
		t.Fatalf("status %+v", st)
	}
}

// chanSender delivers to the engine at the other end through Receive.
type chanSender struct {
	self netip.AddrPort
	to   func() *Engine
}

func (s chanSender) SendIKE(to netip.AddrPort, msg []byte) error {
	buf := bytes.Clone(msg)
	s.to().Receive(s.self, buf)
	clear(buf) // Receive must have copied it
	return nil
}

func TestRunOverRealTime(t *testing.T) {
	var a, b *Engine
	dpA, dpB := newFakeDP(), newFakeDP()
	logger := slog.New(slog.DiscardHandler)
	a, err := NewEngine(baseConfig(addrA), dpA, chanSender{self: addrA, to: func() *Engine { return b }}, logger)
	if err != nil {
		t.Fatal(err)
	}
	b, err = NewEngine(baseConfig(addrB), dpB, chanSender{self: addrB, to: func() *Engine { return a }}, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range []struct {
		e   *Engine
		ctx context.Context
	}{{a, ctxA}, {b, ctxB}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.e.Run(r.ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	defer func() {
		stopA()
		stopB()
		wg.Wait()
	}()
	waitUntil(t, "both sides established", func() bool {
		return a.Status()[0].State == StateEstablished && b.Status()[0].State == StateEstablished &&
			len(dpA.current()) == 1 && len(dpB.current()) == 1
	})
	mirrored(t, dpA.current()[0], dpB.current()[0])
	stopA()
	waitUntil(t, "the peer to hear of the shutdown", func() bool {
		return len(dpA.current()) == 0 && len(dpB.current()) == 0 && b.Status()[0].State == StateDown
	})
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(settle); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// lossySender drops the first n messages its side sends.
type lossySender struct {
	chanSender
	sent *atomic.Int32
	n    int32
}

func (s lossySender) SendIKE(to netip.AddrPort, msg []byte) error {
	if s.sent.Add(1) <= s.n {
		return nil
	}
	return s.chanSender.SendIKE(to, msg)
}

// TestRunRetransmitsARestartedSetup: after a first attempt goes unanswered,
// the engine sets the IKE SA up again after a backoff, and when that
// attempt's first IKE_SA_INIT is lost too it must still be retransmitted by
// Run's own timer, not left until some message wakes the engine.
func TestRunRetransmitsARestartedSetup(t *testing.T) {
	var a, b *Engine
	dpA, dpB := newFakeDP(), newFakeDP()
	logger := slog.New(slog.DiscardHandler)
	cfgA := baseConfig(addrA)
	cfgA.RetransmitTimeout, cfgA.RetransmitTries = 20*time.Millisecond, 2
	// The first attempt's two transmissions and the restart's first.
	var sent atomic.Int32
	a, err := NewEngine(cfgA, dpA, lossySender{chanSender{self: addrA, to: func() *Engine { return b }}, &sent, 3}, logger)
	if err != nil {
		t.Fatal(err)
	}
	b, err = NewEngine(baseConfig(addrB), dpB, chanSender{self: addrB, to: func() *Engine { return a }}, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, e := range []*Engine{a, b} {
		wg.Go(func() { e.Run(ctx) })
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	waitUntil(t, "the IKE SA after a lost restart", func() bool {
		return a.Status()[0].State == StateEstablished && len(dpA.current()) == 1
	})
	if n := sent.Load(); n < 4 {
		t.Fatalf("A sent %d messages; want the restart's IKE_SA_INIT retransmitted", n)
	}
}
