package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/lab/topo"
)

// underlayMTU is the lab's underlay and pod veth MTU: pods offer an MSS of
// underlayMTU-40.
const underlayMTU = 1500

// transports are the gateway transports every scenario runs over, with the
// per-packet overhead that sets their path MTU: outer IPv4 and UDP plus
// WireGuard's 32-byte data header and tag, or VXLAN's header and inner
// Ethernet header (RFC 7348 §4.3).
var transports = []struct {
	name     string
	overhead int
}{
	{"wireguard", 20 + 8 + 32},
	{"vxlan", 20 + 8 + 8 + 14},
	// Until IKE has chosen, the costliest suite: AES-CBC with HMAC-SHA-256-128
	// (8 ESP + 16 IV + up to 15 padding + 2 + 16 ICV).
	{"esp", 20 + 8 + 57},
}

// TestGateway brings up one lab per transport and checks, through the real
// gateways, what a pod in c1 and a pod in c2 see of each other.
func TestGateway(t *testing.T) {
	needRoot(t)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			e := upLab(t, tr.name, tr.name[:1])
			pathMTU := underlayMTU - tr.overhead
			t.Run("status_reports_path_mtu", func(t *testing.T) {
				for name, gw := range map[string]*topo.NS{"c1": e.c1, "c2": e.c2} {
					if st := e.status(t, gw); st.MTU != pathMTU {
						t.Errorf("%s gateway reports MTU %d; with a %d-byte underlay and %d bytes of %s overhead it is %d", name, st.MTU, underlayMTU, tr.overhead, tr.name, pathMTU)
					}
				}
			})
			t.Run("ping_both_ways", e.testPing)
			t.Run("tcp_100MiB_arrives_intact_both_ways", e.testTCPBulk)
			t.Run("udp_datagrams_up_to_path_mtu_echo_intact", e.testUDPEcho)
			t.Run("syn_and_synack_mss_clamped_to_path_mtu", e.testMSSClamp)
			t.Run("foreign_source_dropped_and_counted", e.testAntiSpoofing)
			t.Run("oversize_df_answered_with_frag_needed", e.testFragNeeded)
		})
	}
}

// pathMTU is the tunnel's path MTU as the c1 gateway reports it.
func (e *env) pathMTU(t *testing.T) int {
	t.Helper()
	mtu := e.status(t, e.c1).MTU
	if mtu < 576 || mtu > underlayMTU {
		t.Fatalf("c1 gateway reports an implausible MTU %d", mtu)
	}
	return mtu
}

func (e *env) testPing(t *testing.T) {
	for _, tc := range []struct {
		from     *topo.NS
		fromName string
		to       netip.Addr
	}{
		{e.c1Pod, c1PodName, e.c2IP},
		{e.c2Pod, c2PodName, e.c1IP},
	} {
		if unanswered, out := pingEach(t.Context(), tc.from, tc.to, 3); len(unanswered) > 0 {
			t.Errorf("ping %s → %s: echo requests %v of 3 unanswered:\n%s", tc.fromName, tc.to, unanswered, out)
		}
	}
}

func (e *env) testTCPBulk(t *testing.T) {
	const size = 100 << 20
	for i, tc := range []struct {
		name     string
		from, to *topo.NS
		dst      netip.Addr
	}{
		{c1PodName + "→" + c2PodName, e.c1Pod, e.c2Pod, e.c2IP},
		{c2PodName + "→" + c1PodName, e.c2Pod, e.c1Pod, e.c1IP},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		start := time.Now()
		err := transferTCP(ctx, tc.from, tc.to, netip.AddrPortFrom(tc.dst, 5001), size, uint64(i+1))
		cancel()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		d := time.Since(start)
		t.Logf("%s: %d MiB intact in %v (%.0f Mbit/s)", tc.name, size>>20, d.Round(time.Millisecond), float64(size)*8/d.Seconds()/1e6)
	}
}

func (e *env) testUDPEcho(t *testing.T) {
	// The largest UDP payload that fits the tunnel unfragmented.
	max := e.pathMTU(t) - 20 - 8
	sizes := []int{4, max, 5, max - 1, 64, 512, 1000, 1024, 1200, 1280 - 28}
	for s := 7; len(sizes) < 100; s += 97 {
		sizes = append(sizes, 4+s%(max-3))
	}
	const count = 300
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	res, err := echoDatagrams(ctx, e.c1Pod, e.c2Pod, netip.AddrPortFrom(e.c2IP, 5002), sizes, count, 7)
	if err != nil {
		t.Fatal(err)
	}
	// Loopback-speed veths lose nothing in practice; a datagram or two may
	// still go missing to a full socket buffer, which UDP allows.
	if lost := res.sent - res.echoed; lost > count/100 {
		t.Errorf("%d of %d datagrams (up to %d bytes) came back; more than 1%% lost", res.echoed, res.sent, max)
	}
	t.Logf("%d of %d datagrams of 4 to %d bytes echoed intact", res.echoed, res.sent, max)
}

var mssOption = regexp.MustCompile(`Flags \[(S|S\.)\].*\bmss (\d+)\b`)

// synMSS returns the MSS option of every SYN (flag "S") and SYN-ACK
// ("S.") among tcpdump lines.
func synMSS(lines []string) (syn, synack []int) {
	for _, l := range lines {
		m := mssOption.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[2])
		if m[1] == "S" {
			syn = append(syn, v)
		} else {
			synack = append(synack, v)
		}
	}
	return syn, synack
}

func (e *env) testMSSClamp(t *testing.T) {
	want := e.pathMTU(t) - 40
	const port = 5003
	filter := fmt.Sprintf("tcp port %d and tcp[tcpflags] & tcp-syn != 0", port)
	// Each pod sees its own handshake packet leave with the MSS its veth
	// allows, and the other's arrive clamped by the gateways.
	at1 := startCapture(t, e.c1Pod, "eth0", filter, 2)
	at2 := startCapture(t, e.c2Pod, "eth0", filter, 2)

	ln, err := e.c2Pod.Listen("tcp", netip.AddrPortFrom(e.c2IP, port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := e.c1Pod.DialContext(t.Context(), "tcp", netip.AddrPortFrom(e.c2IP, port).String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()

	lines1, lines2 := at1.wait(settle), at2.wait(settle)
	syn1, synack1 := synMSS(lines1)
	syn2, synack2 := synMSS(lines2)
	offered := underlayMTU - 40
	check := func(what string, got []int, want int) {
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s: MSS %v, want [%d]", what, got, want)
		}
	}
	check("SYN leaving "+c1PodName, syn1, offered)
	check("SYN arriving at "+c2PodName, syn2, want)
	check("SYN-ACK leaving "+c2PodName, synack2, offered)
	check("SYN-ACK arriving at "+c1PodName, synack1, want)
	if t.Failed() {
		t.Logf("capture in %s:\n%s\ncapture in %s:\n%s", c1PodName, strings.Join(lines1, "\n"), c2PodName, strings.Join(lines2, "\n"))
	}
}

// spoofedSource is an address no cluster of the lab owns.
var spoofedSource = netip.MustParsePrefix("10.200.0.1/32")

func (e *env) testAntiSpoofing(t *testing.T) {
	// WireGuard's cryptokey routing refuses a foreign inner source before
	// the gateway sees the packet, and counts it as a transport drop.
	counter := "snorkel_gateway_drops_total"
	if e.transport == "wireguard" {
		counter = "snorkel_transport_drops_total"
	}
	labels := map[string]string{"remote_cluster": "c2", "reason": "spoofed_source"}
	before := metricValue(t, e.c1, counter, labels)

	if err := e.c2.AddAddr("lo", spoofedSource); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := e.c2.Run(context.Background(), "ip", "addr", "del", spoofedSource.String(), "dev", "lo"); err != nil {
			t.Error(err)
		}
	})
	at := startCapture(t, e.c1Pod, "eth0", "icmp[icmptype] == icmp-echo", 0)

	// The control: the node's own address is c2's, so its echoes cross,
	// and the capture sees them.
	if unanswered, out := pingEach(t.Context(), e.c2, e.c1IP, 2); len(unanswered) > 0 {
		t.Errorf("ping from c2's node → %s: echo requests %v of 2 unanswered:\n%s", e.c1IP, unanswered, out)
	}
	// ping waits a second after its last request for replies that must
	// not come.
	const spoofed = 5
	sent, got, out := ping(t.Context(), e.c2, "-c", fmt.Sprint(spoofed), "-i", "0.2", "-W", "1", "-I", spoofedSource.Addr().String(), e.c1IP.String())
	if sent != spoofed || got != 0 {
		t.Errorf("ping from %s on c2's node → %s: %d of %d answered, want %d sent and none answered:\n%s", spoofedSource.Addr(), e.c1IP, got, sent, spoofed, out)
	}
	// Once c1's gateway has counted every spoofed packet, none of them can
	// still reach the pod.
	if after := metricAtLeast(t, e.c1, counter, labels, before+spoofed); after-before < spoofed {
		t.Errorf("c1 gateway %s went from %v to %v; want it to count the %d spoofed packets", series(counter, labels), before, after, spoofed)
	}
	echoes := func(lines []string) (legit, foreign int) {
		for _, l := range lines {
			switch {
			case strings.Contains(l, " "+spoofedSource.Addr().String()+" > "):
				foreign++
			case strings.Contains(l, " IP "):
				legit++
			}
		}
		return legit, foreign
	}
	lines := at.linesWhen(settle, func(lines []string) bool { legit, _ := echoes(lines); return legit >= 2 })
	if legit, foreign := echoes(lines); legit < 2 || foreign != 0 {
		t.Errorf("%s received %d echo requests from c2's node and %d from %s; want 2 and 0:\n%s", c1PodName, legit, foreign, spoofedSource.Addr(), strings.Join(lines, "\n"))
	}
}

var fragNeeded = regexp.MustCompile(`From (\S+) icmp_seq=\d+ Frag needed and DF set \(mtu = (\d+)\)`)

func (e *env) testFragNeeded(t *testing.T) {
	mtu := e.pathMTU(t)
	tun := e.tun("c1")
	labels := map[string]string{"remote_cluster": "c2", "reason": "too_big"}
	before := metricValue(t, e.c1, "snorkel_gateway_drops_total", labels)

	// With the TUN device's MTU above the path MTU, the kernel routes the
	// oversize packet into the device instead of answering it itself: the
	// answer must then come from the gateway.
	if err := e.c1.SetMTU(tun, underlayMTU); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.c1.SetMTU(tun, mtu); err != nil {
			t.Error(err)
		}
		// The pod learned the path MTU; forget it so that later checks
		// start from a clean route cache.
		if _, err := e.c1Pod2.Run(context.Background(), "ip", "route", "flush", "cache"); err != nil {
			t.Error(err)
		}
	})
	// ping exits once both requests have their error, the first from the
	// gateway and the second from the pod's own stack once it learned the
	// path MTU; -W only bounds the wait when they do not come.
	size := underlayMTU - 20 - 8
	_, got, out := ping(t.Context(), e.c1Pod2, "-M", "do", "-s", fmt.Sprint(size), "-c", "2", "-i", "0.2", "-W", fmt.Sprint(int(settle/time.Second)), e.c2IP.String())
	if got != 0 {
		t.Errorf("a %d-byte packet with DF crossed a tunnel with path MTU %d:\n%s", underlayMTU, mtu, out)
	}
	counted := metricAtLeast(t, e.c1, "snorkel_gateway_drops_total", labels, before+1) - before
	if counted < 1 {
		t.Errorf("c1 gateway %s went from %v to %v; want the oversize packet counted", series("snorkel_gateway_drops_total", labels), before, before+counted)
	}
	m := fragNeeded.FindStringSubmatch(out)
	node := e.lab.Plan.Cluster("c1").Gateway.NodeIP.String()
	switch {
	case m == nil && counted >= 1:
		// The gateway refused the packet, so its ICMP error was lost
		// between the TUN device and the pod: coming from the node's own
		// address, it is a martian to the node's kernel unless the device
		// has accept_local set.
		t.Errorf("c1 gateway counted the oversize packet but %s got no \"Frag needed\" (is the ICMP error from %s dropped by c1's node as a martian?):\n%s", c1Pod2Name, node, out)
	case m == nil:
		t.Errorf("%s got no \"Frag needed\" for a %d-byte packet with DF:\n%s", c1Pod2Name, underlayMTU, out)
	case m[2] != strconv.Itoa(mtu) || m[1] != node:
		t.Errorf("%s got \"Frag needed\" from %s with mtu %s; want it from %s (the gateway's TUN address) with mtu %d:\n%s", c1Pod2Name, m[1], m[2], node, mtu, out)
	}
}
