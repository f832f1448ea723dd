package gateway

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/packet"
	"github.com/snorkel-net/snorkel/transport"
)

var (
	c1Health = netip.MustParseAddr("10.8.255.254")
	c2Health = netip.MustParseAddr("10.9.255.254")
	hcIP     = c2Health
	t0       = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
)

func TestProberFollowsRepliesAndLosses(t *testing.T) {
	p := newProber(hcIP, 3)
	wantState := func(step, status, message string) {
		t.Helper()
		st, msg, _, _ := p.snapshot()
		if st != status || msg != message {
			t.Fatalf("%s: status %q message %q, want %q %q", step, st, msg, status, message)
		}
	}
	wantState("before any probe", "connecting", "")

	seq := p.next(t0)
	if !p.reply(seq, t0.Add(3*time.Millisecond)) {
		t.Fatal("the reply to the probe awaiting it was refused")
	}
	wantState("after a reply", "connected", "")
	if p.reply(seq, t0.Add(4*time.Millisecond)) {
		t.Fatal("a duplicate reply was taken")
	}

	// Two losses in a row stay below the limit of three.
	now := t0.Add(time.Second)
	p.next(now)
	p.next(now.Add(time.Second))
	late := p.next(now.Add(2 * time.Second))
	wantState("after two losses", "connected", "")
	// The third loss is counted when the fourth probe goes out.
	cur := p.next(now.Add(3 * time.Second))
	wantState("after three losses", "error", "no reply to the last 3 health probes to 10.9.255.254")
	if p.reply(late, now.Add(3*time.Second+time.Millisecond)) {
		t.Fatal("a reply to a probe already counted lost was taken")
	}
	wantState("after a late reply", "error", "no reply to the last 3 health probes to 10.9.255.254")

	if !p.reply(cur, now.Add(3*time.Second+5*time.Millisecond)) {
		t.Fatal("the reply to the current probe was refused")
	}
	wantState("after recovering", "connected", "")
	_, _, hs, established := p.snapshot()
	// The connection was established twice: at the first reply, and again
	// when a reply ended the error.
	if want := now.Add(3*time.Second + 5*time.Millisecond); !established.Equal(want) {
		t.Errorf("established at %v, want the reply that ended the error, %v", established, want)
	}
	want := HealthStatus{HealthCheckIP: hcIP, Sent: 5, Received: 2, Lost: 3}
	got := *hs
	got.RTT = nil
	if got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
	if r := hs.RTT; r == nil || r.Last != 5*time.Millisecond || r.Min != 3*time.Millisecond || r.Max != 5*time.Millisecond || r.Average != 4*time.Millisecond || r.StdDev != time.Millisecond {
		t.Errorf("RTT %+v, want last 5ms, min 3ms, max 5ms, average 4ms, stddev 1ms", hs.RTT)
	}
}

func TestProberErrsBeforeAnyReply(t *testing.T) {
	p := newProber(hcIP, 2)
	for i := range 3 {
		p.next(t0.Add(time.Duration(i) * time.Second))
	}
	st, msg, hs, _ := p.snapshot()
	if st != "error" || !strings.Contains(msg, "no reply to the last 2 health probes to 10.9.255.254") || hs.RTT != nil {
		t.Fatalf("status %q %q RTT %v; a remote that never answered is in error with no RTT", st, msg, hs.RTT)
	}
}

func TestProberIgnoresAReplyBeforeAnyProbe(t *testing.T) {
	p := newProber(hcIP, 5)
	if p.reply(0, t0) || p.reply(1, t0) {
		t.Fatal("a reply was taken before any probe went out")
	}
}

// refStats is the textbook computation the ring is checked against: the
// last rttWindow samples, their mean and population standard deviation.
func refStats(all []time.Duration) RTTStats {
	w := all[max(0, len(all)-rttWindow):]
	var sum, sq float64
	for _, d := range w {
		sum += float64(d)
	}
	mean := sum / float64(len(w))
	for _, d := range w {
		sq += math.Pow(float64(d)-mean, 2)
	}
	return RTTStats{
		Last: all[len(all)-1], Min: slices.Min(w), Max: slices.Max(w),
		Average: time.Duration(math.Round(mean)), StdDev: time.Duration(math.Round(math.Sqrt(sq / float64(len(w))))),
	}
}

func TestRTTStatsCoverTheLast64Samples(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var r rttRing
	if r.stats() != nil {
		t.Fatal("stats of an empty window are not nil")
	}
	var all []time.Duration
	for i := range 300 {
		d := time.Duration(rng.IntN(50_000_000)) // up to 50 ms
		if i == 10 {
			d = time.Hour // leaves the window after 64 more samples
		}
		r.add(d)
		all = append(all, d)
		if got, want := *r.stats(), refStats(all); got != want {
			t.Fatalf("after %d samples: %+v, want %+v", i+1, got, want)
		}
	}
	if r.stats().Max == time.Hour {
		t.Fatal("a sample older than the window still counts")
	}
}

func TestRTTStatsJSONUsesGoDurations(t *testing.T) {
	in := RTTStats{Last: 1500 * time.Microsecond, Min: time.Millisecond, Average: 1200 * time.Microsecond, Max: 2 * time.Millisecond, StdDev: 300 * time.Microsecond}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"last":"1.5ms","min":"1ms","average":"1.2ms","max":"2ms","stdDev":"300µs"}`; string(b) != want {
		t.Fatalf("JSON %s, want %s", b, want)
	}
	var out RTTStats
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Fatalf("round trip %+v (%v), want %+v", out, err, in)
	}
	if err := json.Unmarshal([]byte(`{"last":"soon"}`), &out); err == nil || !strings.Contains(err.Error(), "rtt.last") {
		t.Fatalf("a bad duration gave %v, want an error naming rtt.last", err)
	}
}

// healthConfig is validConfig with a health address on both sides.
func healthConfig() Config {
	c := validConfig()
	c.TUN.Address = c1Health.String()
	c.Remotes[0].HealthCheckIP = c2Health.String()
	return c
}

func TestHealthConfigDefaults(t *testing.T) {
	c := healthConfig()
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	h := s.health
	if !h.probe || h.interval != time.Second || h.maxLoss != 5 || h.local != c1Health || h.remotes[0] != c2Health {
		t.Fatalf("health spec %+v, want probing every 1s, 5 losses, from %s to %s", h, c1Health, c2Health)
	}
	if c.HealthCheck != nil {
		t.Error("Validate wrote a healthCheck section into the config")
	}

	off := false
	c.HealthCheck = &HealthCheck{Enabled: &off, Interval: "250ms", MaxPacketLossCount: 2}
	if s, err = c.build(); err != nil {
		t.Fatal(err)
	}
	if s.health.probe || s.health.interval != 250*time.Millisecond || s.health.maxLoss != 2 {
		t.Fatalf("health spec %+v, want probing off, 250ms, 2 losses", s.health)
	}
	g := newGateway(s, Options{})
	if h := g.set.Load().health; h == nil || slices.ContainsFunc(h.probers, func(p *prober) bool { return p != nil }) {
		t.Fatal("with probing off the gateway must still answer probes, and send none")
	}

	c = validConfig()
	c.Remotes[0].HealthCheckIP = c2Health.String()
	if s, err = c.build(); err != nil {
		t.Fatal(err)
	}
	if s.health.probe || newGateway(s, Options{}).set.Load().health != nil {
		t.Fatal("without tun.address the gateway must neither probe nor answer")
	}
}

func TestHealthConfigNamesFieldAndFix(t *testing.T) {
	on := true
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   []string
	}{
		{"interval too short", func(c *Config) { c.HealthCheck = &HealthCheck{Interval: "10ms"} }, []string{"healthCheck.interval", `"10ms"`, "100ms", "1m0s"}},
		{"interval not a duration", func(c *Config) { c.HealthCheck = &HealthCheck{Interval: "often"} }, []string{"healthCheck.interval", "1s"}},
		{"negative loss count", func(c *Config) { c.HealthCheck = &HealthCheck{MaxPacketLossCount: -1} }, []string{"healthCheck.maxPacketLossCount", "1 to 1000"}},
		{"enabled without tun.address", func(c *Config) { c.TUN.Address = ""; c.HealthCheck = &HealthCheck{Enabled: &on} }, []string{"healthCheck.enabled", "tun.address is empty"}},
		{"not an address", func(c *Config) { c.Remotes[0].HealthCheckIP = "gw-c2" }, []string{"remotes[0].healthCheckIP", `"gw-c2"`, "10.9.255.254"}},
		{"a prefix", func(c *Config) { c.Remotes[0].HealthCheckIP = "10.9.255.254/32" }, []string{"remotes[0].healthCheckIP", "not an IP address"}},
		{"multicast", func(c *Config) { c.Remotes[0].HealthCheckIP = "224.0.0.1" }, []string{"remotes[0].healthCheckIP", "not a unicast address"}},
		{"unspecified", func(c *Config) { c.Remotes[0].HealthCheckIP = "0.0.0.0" }, []string{"remotes[0].healthCheckIP", "not a unicast address"}},
		{"other IP version", func(c *Config) { c.Remotes[0].HealthCheckIP = "fd00::9" }, []string{"remotes[0].healthCheckIP", "tun.address 10.8.255.254", "different IP versions"}},
		{"own address", func(c *Config) { c.Remotes[0].HealthCheckIP = c1Health.String() }, []string{"remotes[0].healthCheckIP", "own tun.address"}},
		{"in this cluster", func(c *Config) { c.Remotes[0].HealthCheckIP = "10.88.0.1" }, []string{"remotes[0].healthCheckIP", "this cluster's CIDR 10.88.0.0/16"}},
		{"in another remote", func(c *Config) {
			c.Remotes = append(c.Remotes, Remote{ID: "c3", PodCIDRs: []string{"10.10.0.0/16"}, Endpoint: "198.18.0.3",
				WireGuard: &WireGuardRemoteConfig{PublicKey: "Rk5kWjB0dnpKd2hGbU9XYk1hVnJHdXV4SlN6UlZ0Qzg="}})
			c.Remotes[0].HealthCheckIP = "10.10.0.1"
		}, []string{"remotes[0].healthCheckIP", `remotes[1] (cluster "c3")`, "10.10.0.0/16"}},
		{"twice", func(c *Config) {
			c.Remotes[0].HealthCheckIP = "192.0.2.9"
			c.Remotes = append(c.Remotes, Remote{ID: "c3", PodCIDRs: []string{"10.10.0.0/16"}, Endpoint: "198.18.0.3", HealthCheckIP: "192.0.2.9",
				WireGuard: &WireGuardRemoteConfig{PublicKey: "Rk5kWjB0dnpKd2hGbU9XYk1hVnJHdXV4SlN6UlZ0Qzg="}})
		}, []string{"remotes[1].healthCheckIP", "already remotes[0].healthCheckIP"}},
		{"in this cluster's global CIDR", func(c *Config) {
			*c = globalnetConfig()
			c.Remotes[0].HealthCheckIP = "242.1.0.50"
		}, []string{"remotes[0].healthCheckIP", "globalnet.globalCIDR 242.1.0.0/16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := healthConfig()
			tc.mutate(&c)
			wantInvalid(t, c, tc.want)
		})
	}
}

func TestHealthConfigWithGlobalnetAllowsTheSameAddressOnBothSides(t *testing.T) {
	c := globalnetConfig() // tun.address 10.8.0.1, both clusters 10.8.0.0/16
	c.Remotes[0].HealthCheckIP = c.TUN.Address
	s, err := c.build()
	if err != nil {
		t.Fatalf("Globalnet lets overlapping clusters' gateways have the same address: %v", err)
	}
	if got := s.allowedIPs(0); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("242.2.0.0/16"), netip.MustParsePrefix("10.8.0.1/32")}) {
		t.Errorf("WireGuard allowed IPs %v, want the global CIDR and the health address", got)
	}
}

func TestWireGuardAllowsTheHealthAddress(t *testing.T) {
	c := healthConfig()
	c.Remotes[0].HealthCheckIP = "192.0.2.9" // outside the remote's CIDRs
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.allowedIPs(0); !slices.Contains(got, netip.MustParsePrefix("192.0.2.9/32")) {
		t.Errorf("allowed IPs %v lack the health address outside the remote's CIDRs", got)
	}
	if len(s.remotes[0].cidrs) != 2 {
		t.Errorf("allowedIPs changed the remote's routed CIDRs: %v", s.remotes[0].cidrs)
	}
	c.Remotes[0].HealthCheckIP = c2Health.String()
	if s, err = c.build(); err != nil {
		t.Fatal(err)
	}
	if got := s.allowedIPs(0); len(got) != 2 {
		t.Errorf("allowed IPs %v, want only the CIDRs that already cover the health address", got)
	}
}

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// pipe is a transport that hands each packet to another gateway's Deliver at
// once, as peer `as` (transport.PeerAny stands for WireGuard), after moving
// the shared clock on by delay. A pipe that is down delivers nothing.
type pipe struct {
	mu    sync.Mutex
	to    *Gateway
	as    int
	down  bool
	clk   *fakeClock
	delay time.Duration
	sent  int
}

func (p *pipe) Send(peer int, bufs [][]byte, offset int) error {
	p.mu.Lock()
	to, as, down := p.to, p.as, p.down
	p.sent += len(bufs)
	p.mu.Unlock()
	if down {
		return nil
	}
	p.clk.advance(p.delay)
	out := make([][]byte, len(bufs))
	for i, b := range bufs {
		out[i] = deliverBuf(b[offset:])
	}
	to.Deliver(as, out, transport.Headroom)
	return nil
}

func (p *pipe) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

func (p *pipe) Overhead() int  { return 60 }
func (p *pipe) BatchSize() int { return 128 }
func (p *pipe) Close() error   { return nil }

func (p *pipe) setPeer(*spec, int, int, keys) error { return nil }
func (p *pipe) removePeer(int) error                { return nil }

// healthPeer is one gateway of a pipe-connected pair.
type healthPeer struct {
	g   *Gateway
	out *pipe
	dev *replayDevice
}

// healthPair connects c1 (10.8/16, 10.88/16, health address 10.8.255.254)
// and c2 (10.9/16, 10.99/16, 10.9.255.254) with pipes, each hop taking
// 1.5 ms of the shared fake clock. mod may change the configurations.
func healthPair(t *testing.T, mod func(c1, c2 *Config)) (a, b *healthPeer, clk *fakeClock) {
	t.Helper()
	mk := func(id, pod, svc, tun, rid, rpod, rsvc, rtun string) Config {
		return Config{
			Cluster:   Cluster{ID: id, PodCIDRs: []string{pod}, ServiceCIDRs: []string{svc}},
			TUN:       TUN{Address: tun},
			Transport: TransportConfig{Type: transport.VXLAN},
			Remotes:   []Remote{{ID: rid, PodCIDRs: []string{rpod}, ServiceCIDRs: []string{rsvc}, Endpoint: "198.18.0.9", HealthCheckIP: rtun}},
		}
	}
	c1 := mk("c1", "10.8.0.0/16", "10.88.0.0/16", c1Health.String(), "c2", "10.9.0.0/16", "10.99.0.0/16", c2Health.String())
	c2 := mk("c2", "10.9.0.0/16", "10.99.0.0/16", c2Health.String(), "c1", "10.8.0.0/16", "10.88.0.0/16", c1Health.String())
	if mod != nil {
		mod(&c1, &c2)
	}
	clk = &fakeClock{now: t0}
	peer := func(c Config) *healthPeer {
		s, err := c.build()
		if err != nil {
			t.Fatal(err)
		}
		g := newGateway(s, Options{})
		if s.globalnet != nil {
			if err := g.startNAT(); err != nil {
				t.Fatal(err)
			}
		}
		p := &healthPeer{g: g, out: &pipe{clk: clk, delay: 1500 * time.Microsecond}, dev: &replayDevice{keep: true}}
		g.attach(p.out, "")
		attachDevice(g, p.dev)
		g.set.Load().health.now = clk.Now
		return p
	}
	a, b = peer(c1), peer(c2)
	a.out.to, b.out.to = b.g, a.g
	return a, b, clk
}

func TestHealthProbesAreAnsweredThroughTheTransport(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(c1, c2 *Config)
		as   int
	}{
		{"IPv4", nil, 0},
		{"IPv4 as WireGuard delivers, by address", nil, transport.PeerAny},
		{"IPv6", func(c1, c2 *Config) {
			c1.TUN.Address, c2.Remotes[0].HealthCheckIP = "fd00:8::1", "fd00:8::1"
			c2.TUN.Address, c1.Remotes[0].HealthCheckIP = "fd00:9::1", "fd00:9::1"
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, _ := healthPair(t, tc.mod)
			a.out.as, b.out.as = tc.as, tc.as
			a.g.sendProbes()
			st := a.g.Stats().Remotes[0]
			if st.Status != "connected" || st.Health == nil || st.Health.Sent != 1 || st.Health.Received != 1 {
				t.Fatalf("c1 sees c2 as %q with %+v, want connected after one probe and its reply", st.Status, st.Health)
			}
			if r := st.Health.RTT; r == nil || r.Last != 3*time.Millisecond || r.Min != r.Last || r.Max != r.Last || r.Average != r.Last || r.StdDev != 0 {
				t.Fatalf("RTT %+v, want 3ms: two hops of 1.5ms", st.Health.RTT)
			}
			if st.RxPackets != 0 || st.TxPackets != 0 || len(a.dev.wrote)+len(b.dev.wrote) != 0 {
				t.Errorf("probes reached a device or the traffic counters: rx %d tx %d, device writes %d and %d",
					st.RxPackets, st.TxPackets, len(a.dev.wrote), len(b.dev.wrote))
			}
			if bs := b.g.Stats().Remotes[0]; bs.Status != "connecting" || bs.Health == nil || bs.Health.Sent != 0 {
				t.Errorf("c2, which has answered but not probed yet, reports %q %+v; want connecting", bs.Status, bs.Health)
			}
			if bs := b.g.Stats().Remotes[0]; len(bs.Drops) != 0 {
				t.Errorf("c2 dropped %v", bs.Drops)
			}
		})
	}
}

func TestHealthStatusGoesToErrorWhenTheRemoteStopsAnswering(t *testing.T) {
	a, b, clk := healthPair(t, func(c1, _ *Config) { c1.HealthCheck = &HealthCheck{MaxPacketLossCount: 3} })
	a.g.sendProbes()
	b.out.setDown(true) // c2 receives but its answers are lost
	for i := range 3 {
		clk.advance(time.Second)
		a.g.sendProbes()
		if st := a.g.Stats().Remotes[0]; st.Status != "connected" {
			t.Fatalf("after %d lost probes c1 sees %q, want still connected", i, st.Status)
		}
	}
	clk.advance(time.Second)
	a.g.sendProbes()
	st := a.g.Stats().Remotes[0]
	if st.Status != "error" || st.StatusMessage != "no reply to the last 3 health probes to 10.9.255.254" {
		t.Fatalf("after 3 lost probes: %q %q, want error naming the probes and the address", st.Status, st.StatusMessage)
	}
	if st.Health.Lost != 3 || st.Health.Sent != 5 || st.Health.Received != 1 || st.Health.RTT == nil {
		t.Errorf("counters %+v, want 5 sent, 1 received, 3 lost, the old RTT kept", st.Health)
	}
	b.out.setDown(false)
	clk.advance(time.Second)
	a.g.sendProbes()
	if st := a.g.Stats().Remotes[0]; st.Status != "connected" || st.StatusMessage != "" || st.Health.Lost != 4 {
		t.Fatalf("after c2 answers again: %q %q %+v, want connected with the 4th loss counted", st.Status, st.StatusMessage, st.Health)
	}
}

func TestHealthProbesBypassGlobalnet(t *testing.T) {
	// Both clusters use 10.7.0.0/16 and their gateways the same address:
	// only the tunnel tells the probes apart.
	same := "10.7.255.254"
	a, b, _ := healthPair(t, func(c1, c2 *Config) {
		for i, c := range []*Config{c1, c2} {
			c.Cluster.PodCIDRs, c.Cluster.ServiceCIDRs = []string{"10.7.0.0/16"}, []string{"10.77.0.0/16"}
			c.TUN.Address = same
			c.Globalnet = &Globalnet{GlobalCIDR: []string{"242.1.0.0/16", "242.2.0.0/16"}[i]}
			c.Remotes[0].PodCIDRs, c.Remotes[0].ServiceCIDRs = nil, nil
			c.Remotes[0].GlobalCIDR = []string{"242.2.0.0/16", "242.1.0.0/16"}[i]
			c.Remotes[0].HealthCheckIP = same
		}
	})
	a.g.sendProbes()
	b.g.sendProbes()
	for _, p := range []*healthPeer{a, b} {
		st := p.g.Stats()
		r := st.Remotes[0]
		if r.Status != "connected" || r.Health.RTT == nil || r.Health.RTT.Last != 3*time.Millisecond {
			t.Errorf("%s sees its remote %q %+v, want connected with a 3ms RTT", st.Cluster, r.Status, r.Health)
		}
		if n := st.Globalnet.NAT; n.Created != 0 || len(n.Drops) != 0 || len(r.Drops) != 0 {
			t.Errorf("%s: the NAT engine saw the probes (flows created %d, drops %v, gateway drops %v)", st.Cluster, n.Created, n.Drops, r.Drops)
		}
		if len(p.dev.wrote) != 0 {
			t.Errorf("%s wrote %d probes to its device", st.Cluster, len(p.dev.wrote))
		}
	}
}

// echo builds an IPv4 ICMP echo of type typ from src to dst with identifier
// id, sequence number seq and payload data.
func echo(typ uint8, src, dst netip.Addr, id, seq uint16, data []byte) []byte {
	body := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, id), seq)
	body = append(body, data...)
	b := make([]byte, 64+len(body))
	return b[:writeEcho(b, typ, src, dst, body)]
}

// healthGateway is c1 with health addresses, remotes c2 (health address
// 10.9.255.254) and c3 (10.10.255.254), a recording transport and device.
func healthGateway(t testing.TB) (*Gateway, *nullTransport, *replayDevice) {
	t.Helper()
	c := healthConfig()
	c.Transport = TransportConfig{Type: transport.VXLAN}
	c.Remotes[0].WireGuard = nil
	c.Remotes = append(c.Remotes, Remote{ID: "c3", PodCIDRs: []string{"10.10.0.0/16"}, Endpoint: "198.18.0.3", HealthCheckIP: "10.10.255.254"})
	s, err := c.build()
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(s, Options{})
	tr := &nullTransport{keep: true}
	g.attach(tr, "")
	dev := &replayDevice{keep: true}
	attachDevice(g, dev)
	return g, tr, dev
}

func TestHealthAnswersOnlyTheRemoteThatOwnsTheAddress(t *testing.T) {
	g, tr, dev := healthGateway(t)
	req := echo(packet.ICMPv4EchoRequest, c2Health, c1Health, 77, 1, []byte("probe"))

	g.Deliver(1, [][]byte{deliverBuf(req)}, transport.Headroom) // c3 sends c2's probe
	if len(tr.sent) != 0 || g.Stats().Remotes[1].Drops["spoofed_source"] != 1 {
		t.Fatalf("c2's probe arriving from c3: %d replies, c3's drops %v; want none and one spoofed_source", len(tr.sent), g.Stats().Remotes[1].Drops)
	}

	g.Deliver(0, [][]byte{deliverBuf(req)}, transport.Headroom)
	if len(tr.sent) != 1 || tr.peers[0] != 0 {
		t.Fatalf("c2's probe from c2: %d replies to peers %v, want one to c2 (0)", len(tr.sent), tr.peers)
	}
	var p packet.Parsed
	rep := tr.sent[0]
	if p.Decode(rep) != packet.DropNone || p.ICMPType != packet.ICMPv4EchoReply || p.SrcAddr() != c1Health || p.DstAddr() != c2Health || p.SrcPort != 77 ||
		packet.Checksum(rep[p.IPHeaderLen:p.Length], 0) != 0xffff || string(rep[p.IPHeaderLen+8:p.Length]) != "probe" {
		t.Fatalf("reply %x, want an echo reply %s → %s, id 77, the probe's data, a valid checksum", rep, c1Health, c2Health)
	}

	// A ping from a c2 pod to the gateway's address is not a probe: it
	// takes the normal path to the device, where the kernel answers.
	g.Deliver(0, [][]byte{deliverBuf(echo(packet.ICMPv4EchoRequest, c2Pod, c1Health, 5, 1, nil))}, transport.Headroom)
	if len(dev.wrote) != 1 || len(tr.sent) != 1 {
		t.Fatalf("a c2 pod's ping: %d device writes and %d replies, want it on the device and no reply of the gateway's", len(dev.wrote), len(tr.sent)-1)
	}
	if len(dev.wrote) != 1 || g.Stats().Remotes[0].RxPackets != 1 {
		t.Errorf("the pod's ping was not counted as traffic")
	}
}

func TestHealthDropsAndCountsWhatItCannotUse(t *testing.T) {
	g, tr, dev := healthGateway(t)
	badSum := echo(packet.ICMPv4EchoRequest, c2Health, c1Health, 1, 1, nil)
	badSum[len(badSum)-1] ^= 0xff
	frag := echo(packet.ICMPv4EchoRequest, c2Health, c1Health, 1, 1, make([]byte, 16))
	binary.BigEndian.PutUint16(frag[6:], 0x2000) // more fragments
	packet.IPv4(frag).SetChecksum(packet.IPv4(frag).ComputeChecksum())
	huge := echo(packet.ICMPv4EchoRequest, c2Health, c1Health, 1, 1, make([]byte, 1400))
	stray := echo(packet.ICMPv4EchoReply, c2Health, c1Health, g.set.Load().health.id, 9, g.set.Load().health.token[:])
	for _, b := range [][]byte{badSum, frag, huge, stray} {
		g.Deliver(0, [][]byte{deliverBuf(b)}, transport.Headroom)
	}
	d := g.Stats().Remotes[0].Drops
	if d["health_malformed"] != 3 || d["health_unmatched"] != 1 || len(tr.sent) != 0 || len(dev.wrote) != 0 {
		t.Fatalf("drops %v, %d replies, %d device writes; want 3 health_malformed, 1 health_unmatched, nothing sent or written", d, len(tr.sent), len(dev.wrote))
	}
}

func TestHealthRepliesAreRateLimited(t *testing.T) {
	g, tr, _ := healthGateway(t)
	g.set.Load().health.budget.Store(2)
	req := echo(packet.ICMPv4EchoRequest, c2Health, c1Health, 1, 1, nil)
	for range 5 {
		g.Deliver(0, [][]byte{deliverBuf(req)}, transport.Headroom)
	}
	if len(tr.sent) != 2 || g.Stats().Remotes[0].Drops["health_rate_limited"] != 3 {
		t.Fatalf("%d replies, drops %v; want 2 replies and 3 health_rate_limited", len(tr.sent), g.Stats().Remotes[0].Drops)
	}
}

func TestIngressWithHealthAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	g, _, _ := healthGateway(t)
	g.tr = &nullTransport{}
	attachDevice(g, &replayDevice{})
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, transport.Headroom+1400, transport.BufSize)
		copy(bufs[i][transport.Headroom:], ipv4TCP(c2Pod, c1Pod, 1400, false))
	}
	g.Deliver(0, bufs, transport.Headroom)
	if n := testing.AllocsPerRun(100, func() { g.Deliver(0, bufs, transport.Headroom) }); n != 0 {
		t.Fatalf("Deliver with health checks on allocates %v times per batch", n)
	}
}

// FuzzHealthReceive sends arbitrary ICMP messages to the health address
// from a remote's healthCheckIP. Each must end exactly one way: answered,
// matched, written to the device, or dropped and counted.
func FuzzHealthReceive(f *testing.F) {
	f.Add(uint8(packet.ICMPv4EchoRequest), []byte{0, 1, 0, 1, 'h', 'i'})
	f.Add(uint8(packet.ICMPv4EchoReply), []byte{0, 1, 0, 1})
	f.Add(uint8(packet.ICMPv4EchoRequest), []byte{})
	f.Add(uint8(3), []byte{0, 0, 0, 0, 0x45})
	f.Fuzz(func(t *testing.T, typ uint8, rest []byte) {
		g, tr, dev := healthGateway(t)
		// An ICMP message of type typ whose bytes after the checksum are
		// rest: correct checksum when rest is even-length, else broken.
		b := echo(typ, c2Health, c1Health, 0, 0, nil)[:packet.IPv4MinHeaderLen]
		b = append(b, typ, 0, 0, 0)
		b = append(b, rest...)
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		packet.IPv4(b).SetChecksum(packet.IPv4(b).ComputeChecksum())
		m := packet.ICMPv4(b[packet.IPv4MinHeaderLen:])
		if len(rest)%2 == 0 {
			m.SetChecksum(m.ComputeChecksum())
		}
		g.Deliver(0, [][]byte{deliverBuf(b)}, transport.Headroom)

		var drops uint64
		for _, r := range g.Stats().Remotes {
			for _, n := range r.Drops {
				drops += n
			}
		}
		for _, n := range g.Stats().Unattributed {
			drops += n
		}
		if got := uint64(len(tr.sent)+len(dev.wrote)) + drops; got != 1 {
			t.Fatalf("type %d, %x: %d replies, %d device writes, %d drops; want one outcome", typ, rest, len(tr.sent), len(dev.wrote), drops)
		}
		for _, r := range tr.sent {
			var p packet.Parsed
			if p.Decode(r) != packet.DropNone || p.ICMPType != packet.ICMPv4EchoReply || p.DstAddr() != c2Health || packet.Checksum(r[p.IPHeaderLen:p.Length], 0) != 0xffff {
				t.Fatalf("reply %x is not a valid echo reply to %s", r, c2Health)
			}
		}
	})
}

// BenchmarkIngressWithHealth is BenchmarkIngress on a gateway that answers
// probes, and on the same gateway without health checks: ordinary traffic
// pays one comparison for them.
func BenchmarkIngressWithHealth(b *testing.B) {
	for _, on := range []bool{true, false} {
		b.Run(map[bool]string{true: "on", false: "off"}[on], func(b *testing.B) {
			g, _, _ := healthGateway(b)
			if !on {
				rs := *g.set.Load()
				rs.health = nil
				g.set.Store(&rs)
			}
			g.tr = &nullTransport{}
			attachDevice(g, &replayDevice{})
			bufs := make([][]byte, 64)
			for i := range bufs {
				bufs[i] = make([]byte, transport.Headroom+1400, transport.BufSize)
				copy(bufs[i][transport.Headroom:], ipv4TCP(c2Pod, c1Pod, 1400, false))
			}
			b.SetBytes(int64(len(bufs) * 1400))
			b.ReportAllocs()
			for b.Loop() {
				g.Deliver(0, bufs, transport.Headroom)
			}
			b.ReportMetric(float64(b.N*len(bufs))/b.Elapsed().Seconds(), "pkt/s")
		})
	}
}
