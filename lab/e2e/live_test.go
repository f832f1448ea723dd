package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/controller"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/transport"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// Pods of the live-changes scenario, one per cluster.
const (
	l1PodName = "c1-pod"
	l2PodName = "c2-pod"
	l3PodName = "c3-pod"
)

// c2Extra is the pod CIDR c2 gains while the streams run, and c2Extra's
// address the pod that moves into it takes. It overlaps no cluster's
// CIDRs, with or without Globalnet.
var (
	c2Extra     = netip.MustParsePrefix("10.19.0.0/16")
	c2ExtraAddr = netip.MustParseAddr("10.19.0.11")
)

// Ports the test's servers listen on in the pods.
const (
	liveStreamPort = 7001 // and one more per stream
	liveEchoPort   = 7010
)

// liveScenario is three clusters with a pod each. With Globalnet, as in
// lab.Globalnet, they share their pod and service CIDRs and are told apart
// by their global CIDRs only; each pod is exported as a headless service so
// that it has a global IP of its own to be reached at.
func liveScenario(globalnet bool) lab.Scenario {
	sc := lab.Scenario{
		Name:        "live",
		Description: "three clusters with a pod each, for changes applied while traffic runs",
	}
	for i, pod := range []string{l1PodName, l2PodName, l3PodName} {
		c := lab.ClusterSpec{
			ID:          fmt.Sprintf("c%d", i+1),
			PodCIDR:     netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(8 + i), 0, 0}), 16),
			ServiceCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(88 + 11*i), 0, 0}), 16),
			Pods:        []string{pod},
		}
		if globalnet {
			c.PodCIDR = netip.MustParsePrefix("10.7.0.0/16")
			c.ServiceCIDR = netip.MustParsePrefix("10.77.0.0/16")
			c.GlobalCIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{242, byte(1 + i), 0, 0}), 16)
			c.Services = []lab.ServiceSpec{{Name: "live", Headless: true, TargetPort: lab.WhereamiPort, Backends: []string{pod}}}
		}
		sc.Clusters = append(sc.Clusters, c)
	}
	return sc
}

// TestLiveChanges is the proof that a gateway applies changes of its
// remotes and of its own cluster's CIDRs in place: long-lived TCP streams
// run between c1 and c2 while c3 joins, c3's key is rotated, c2's CIDRs are
// extended and c3 leaves, each by rewriting the gateways' config files and
// sending SIGHUP. No stream may see a reset or lose a byte, c1's and c2's
// gateways must keep their TUN devices and their counters for each other,
// and with ESP c1 must keep its IKE SA with c2. The longest time each stream
// went without data is logged per step, not asserted: it measures the
// machine as much as the gateways.
func TestLiveChanges(t *testing.T) {
	needRoot(t)
	var summary []string
	for _, tr := range transports {
		for _, gn := range []bool{false, true} {
			name, tag := tr.name, "l"+tr.name[:1]
			if gn {
				name, tag = name+"_globalnet", "n"+tr.name[:1]
			}
			t.Run(name, func(t *testing.T) {
				e := upLive(t, tr.name, gn, tag)
				e.run()
				summary = append(summary, name+": "+strings.Join(e.stalls, ", "))
			})
		}
	}
	t.Logf("longest stall of the c1↔c2 streams per step:\n  %s", strings.Join(summary, "\n  "))
}

// liveEnv is a running live-changes lab and what the test has seen of it.
type liveEnv struct {
	t         *testing.T
	lab       *lab.Lab
	transport string
	globalnet bool
	gw        map[string]*topo.NS // gateway nodes by cluster
	pod       map[string]*topo.NS // the pods by cluster
	podPlan   map[string]lab.PodPlan
	// cfg is each gateway's config as its file now holds it; c3Entry is
	// the remote entry for c3 that the lab wrote into c1's and c2's.
	cfg     map[string]*gateway.Config
	c3Entry map[string]gateway.Remote
	// tunIndex is c1's and c2's TUN ifindex at the start: a gateway that
	// restarts makes its TUN device anew, under a new index.
	tunIndex map[string]string
	// last is the latest sample of c1's and c2's counters for each other,
	// and ikeSPIs c1's IKE SA with c2 at the start (esp only).
	last    counterSample
	ikeSPIs string
	streams []*liveStream
	// stalls are the per-step lines of the summary.
	stalls []string
}

func upLive(t *testing.T, transport string, globalnet bool, tag string) *liveEnv {
	t.Helper()
	l := upScenario(t, liveScenario(globalnet), transport, tag)
	e := &liveEnv{
		t: t, lab: l, transport: transport, globalnet: globalnet,
		gw: map[string]*topo.NS{}, pod: map[string]*topo.NS{}, podPlan: map[string]lab.PodPlan{},
		cfg: map[string]*gateway.Config{}, c3Entry: map[string]gateway.Remote{}, tunIndex: map[string]string{},
	}
	for i, c := range []string{"c1", "c2", "c3"} {
		e.gw[c] = mustGateway(t, l, c)
		name := []string{l1PodName, l2PodName, l3PodName}[i]
		ns, p, err := l.Pod(name)
		if err != nil {
			t.Fatal(err)
		}
		e.pod[c], e.podPlan[c] = ns, p
		cfg, err := controller.LoadGatewayConfig(lab.ConfigFile(l.StateDir, c))
		if err != nil {
			t.Fatal(err)
		}
		e.cfg[c] = &cfg
	}
	for _, c := range []string{"c1", "c2"} {
		e.tunIndex[c] = e.tunIfindex(c)
		i := slices.IndexFunc(e.cfg[c].Remotes, func(r gateway.Remote) bool { return r.ID == "c3" })
		e.c3Entry[c] = e.cfg[c].Remotes[i]
	}
	return e
}

// run takes c3 out, starts the streams, makes the four changes under them,
// and checks what the streams and the gateways saw.
func (e *liveEnv) run() {
	t := e.t
	st := e.status("c1")
	e.last = e.sampleFrom(st, e.status("c2"), "the start")
	if e.transport == transport.ESP {
		e.ikeSPIs = ipsecWith(st, "c2").IKESPIs
		if e.ikeSPIs == "" {
			t.Fatalf("c1 shows no IKE SA with c2: %+v", st.Remotes)
		}
	}
	// The lab connects every cluster to every other; c3 starts out of the
	// clusterset instead: in nobody's remotes, its gateway not running.
	e.dropC3()
	if err := e.lab.GatewayProcess("c3").Stop(settle); err != nil {
		t.Fatal(err)
	}
	e.sample("c3 taken out")

	serveEcho(t, e.pod["c1"], liveEchoPort)
	serveEcho(t, e.pod["c3"], liveEchoPort)
	for i := range 4 {
		// Two streams each way, so that both gateways send and receive.
		from, to := "c1", "c2"
		if i%2 == 1 {
			from, to = "c2", "c1"
		}
		e.streams = append(e.streams, startStream(t, fmt.Sprintf("%s→%s #%d", from, to, i/2+1),
			e.pod[from], e.pod[to], netip.AddrPortFrom(e.addrOf(to), uint16(liveStreamPort+i)), uint64(100+i)))
	}
	e.waitFlowing()
	e.sample("the streams started")

	for _, step := range []struct {
		name string
		do   func()
	}{
		{"c3 joins", e.join},
		{"c3's key is rotated", e.rotate},
		{"c2's CIDRs are extended", e.extend},
		{"c3 leaves", e.leave},
	} {
		for _, s := range e.streams {
			s.stall()
		}
		before := e.last
		step.do()
		e.waitFlowing()
		after := e.sample("after " + step.name)
		if !after.grewFrom(before) {
			t.Errorf("%s: c1's and c2's counters for each other did not all grow while the streams ran: %+v, then %+v", step.name, before, after)
		}
		var parts []string
		longest := time.Duration(0)
		for _, s := range e.streams {
			d := s.stall()
			longest = max(longest, d)
			parts = append(parts, fmt.Sprintf("%s %v", s.name, d.Round(time.Millisecond)))
		}
		t.Logf("%s: longest stall per stream: %s", step.name, strings.Join(parts, ", "))
		e.stalls = append(e.stalls, fmt.Sprintf("%s %v", step.name, longest.Round(time.Millisecond)))
		for _, s := range e.streams {
			if err := s.failed(); err != nil {
				t.Fatalf("%s: stream %s: %v", step.name, s.name, err)
			}
		}
	}

	for _, s := range e.streams {
		s.finish()
	}
	for _, s := range e.streams {
		if err := s.result(); err != nil {
			t.Errorf("stream %s: %v", s.name, err)
		}
	}
	e.sample("the streams ended")
}

// dropC3 takes c3 out of c1's and c2's remotes.
func (e *liveEnv) dropC3() {
	for _, c := range []string{"c1", "c2"} {
		e.cfg[c].Remotes = slices.DeleteFunc(e.cfg[c].Remotes, func(r gateway.Remote) bool { return r.ID == "c3" })
		e.reload(c)
	}
}

// join gives c1 and c2 c3 as a remote, and starts c3's gateway, whose file
// names c1 and c2 as the lab wrote it.
func (e *liveEnv) join() {
	for _, c := range []string{"c1", "c2"} {
		e.cfg[c].Remotes = append(e.cfg[c].Remotes, e.c3Entry[c])
		e.reload(c)
	}
	if _, err := e.lab.RestartGateway("c3"); err != nil {
		e.t.Fatal(err)
	}
	e.waitConnected("c1", "c3")
	e.waitConnected("c2", "c3")
	e.waitConnected("c3", "c1", "c2")
	e.reach("c1's pod → c3's pod", "c1", netip.Addr{}, "c3")
}

// rotate rotates c3's key. What that means depends on the transport:
//   - wireguard: c3 gets a new static key, which it reads when its gateway
//     restarts (a change of its own keys is a local change); c1 and c2 get
//     its new public key by SIGHUP, which touches their peer for c3 alone.
//   - esp: the PSK is the clusterset's and stays; c3's gateway restarts and
//     sets up new IKE SAs, and with them new keys, with c1 and c2, whose
//     configs do not change.
//   - vxlan carries no keys; c3's gateway restarts all the same, so that
//     c1 and c2 see a remote's session begin anew.
//
// Either way c3 must be reachable from c1 again afterwards.
func (e *liveEnv) rotate() {
	if e.transport == transport.WireGuard {
		k, err := wireguard.GenerateKey()
		if err != nil {
			e.t.Fatal(err)
		}
		path := lab.KeyFile(e.lab.StateDir, "c3")
		if err := os.WriteFile(path, []byte(k.String()+"\n"), 0o600); err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(path+".pub", []byte(k.Public().String()+"\n"), 0o644); err != nil {
			e.t.Fatal(err)
		}
		for _, c := range []string{"c1", "c2"} {
			i := slices.IndexFunc(e.cfg[c].Remotes, func(r gateway.Remote) bool { return r.ID == "c3" })
			e.cfg[c].Remotes[i].WireGuard = &gateway.WireGuardRemoteConfig{PublicKey: k.Public().String()}
			e.reload(c)
		}
	}
	before := ipsecWith(e.status("c1"), "c3").IKESPIs
	if _, err := e.lab.RestartGateway("c3"); err != nil {
		e.t.Fatal(err)
	}
	e.waitConnected("c3", "c1", "c2")
	e.reach("c1's pod → c3's pod", "c1", netip.Addr{}, "c3")
	// Traffic flows again, so c1 and the new c3 share an IKE SA: not the
	// old one, whose keys went with c3's old process.
	if after := ipsecWith(e.status("c1"), "c3").IKESPIs; e.transport == transport.ESP && after == before {
		e.t.Errorf("c1's IKE SA with c3 is still %q after c3's gateway restarted", before)
	}
}

// extend gives c2 the pod CIDR c2Extra: first to the remote entries for c2
// (without Globalnet, where they list c2's CIDRs), so that c2's peers route
// it and accept its packets by the time c2 sends from it, then to c2's own
// cluster. A pod of c2 then takes an address in it, as a pod scheduled
// into the new range would, and must reach c1's pod from there.
func (e *liveEnv) extend() {
	if !e.globalnet {
		for _, c := range []string{"c1", "c3"} {
			i := slices.IndexFunc(e.cfg[c].Remotes, func(r gateway.Remote) bool { return r.ID == "c2" })
			e.cfg[c].Remotes[i].PodCIDRs = append(e.cfg[c].Remotes[i].PodCIDRs, c2Extra.String())
			e.reload(c)
		}
	}
	e.cfg["c2"].Cluster.PodCIDRs = append(e.cfg["c2"].Cluster.PodCIDRs, c2Extra.String())
	e.reload("c2")
	host := netip.PrefixFrom(c2ExtraAddr, 32)
	if err := e.pod["c2"].AddAddr(lab.PodLink, host); err != nil {
		e.t.Fatal(err)
	}
	if err := e.gw["c2"].AddRoute(topo.Route{Dst: host, Dev: e.podPlan["c2"].NodeLink}); err != nil {
		e.t.Fatal(err)
	}
	e.reach(fmt.Sprintf("c2's pod from %s → c1's pod", c2ExtraAddr), "c2", c2ExtraAddr, "c1")
}

// leave takes c3 out of c1's and c2's remotes, and stops its gateway.
func (e *liveEnv) leave() {
	e.dropC3()
	for _, c := range []string{"c1", "c2"} {
		for _, r := range e.status(c).Remotes {
			if r.Cluster == "c3" {
				e.t.Errorf("%s still shows c3 as a remote after it left", c)
			}
		}
	}
	if err := e.lab.GatewayProcess("c3").Stop(settle); err != nil {
		e.t.Fatal(err)
	}
}

// addrOf is the address another cluster's pod reaches cluster c's pod at.
func (e *liveEnv) addrOf(c string) netip.Addr {
	if e.globalnet {
		return e.podPlan[c].GlobalIP
	}
	return e.podPlan[c].IP
}

// reload writes cluster c's config file from e.cfg, sends its gateway
// SIGHUP, and waits until the gateway's log says it applied the file. The
// gateway logs every SIGHUP's outcome; nothing else tells from outside
// that a change which shows nowhere else (c2's own CIDRs) was taken.
func (e *liveEnv) reload(c string) {
	t := e.t
	t.Helper()
	b, err := lab.MarshalConfig(*e.cfg[c])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lab.ConfigFile(e.lab.StateDir, c), b, 0o644); err != nil {
		t.Fatal(err)
	}
	p := e.lab.GatewayProcess(c)
	before, _ := reloads(p.Log)
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(settle)
	for {
		n, refused := reloads(p.Log)
		if n > before {
			if refused != "" {
				t.Fatalf("%s's gateway refused its new config: %s", c, refused)
			}
			break
		}
		if !p.Alive() {
			t.Fatalf("%s's gateway exited on SIGHUP: %v", c, p.ExitError())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's gateway did not log the outcome of SIGHUP within %v", c, settle)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c == "c1" || c == "c2" {
		e.sample(c + "'s reload")
	}
}

// reloads counts the reloads a gateway's log records, and returns the line
// of the last if it was refused.
func reloads(log string) (n int, refused string) {
	b, _ := os.ReadFile(log)
	for line := range strings.Lines(string(b)) {
		switch {
		case strings.Contains(line, `msg="configuration reloaded"`):
			n, refused = n+1, ""
		case strings.Contains(line, `msg="reload refused`):
			n, refused = n+1, strings.TrimSpace(line)
		}
	}
	return n, refused
}

// status fetches cluster c's gateway's /status.
func (e *liveEnv) status(c string) gateway.Stats {
	e.t.Helper()
	var st gateway.Stats
	if err := getJSON(e.t.Context(), e.gw[c], "/status", &st); err != nil {
		e.t.Fatalf("status of %s's gateway: %v", c, err)
	}
	return st
}

// waitConnected waits until cluster c's gateway reports each of remotes
// connected on its health probes.
func (e *liveEnv) waitConnected(c string, remotes ...string) {
	e.t.Helper()
	deadline := time.Now().Add(settle)
	for {
		var st gateway.Stats
		err := getJSON(e.t.Context(), e.gw[c], "/status", &st)
		up := err == nil
		for _, id := range remotes {
			i := slices.IndexFunc(st.Remotes, func(r gateway.RemoteStats) bool { return r.Cluster == id })
			up = up && i >= 0 && st.Remotes[i].Status == "connected"
		}
		if up {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s's gateway has not connected %v within %v: %+v (%v)", c, remotes, settle, st.Remotes, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reach waits until a TCP connection from cluster from's pod (from address
// src, if valid) to cluster to's pod echoes a message.
func (e *liveEnv) reach(what, from string, src netip.Addr, to string) {
	e.t.Helper()
	dst := netip.AddrPortFrom(e.addrOf(to), liveEchoPort)
	deadline := time.Now().Add(settle)
	for {
		// A SYN lost while the tunnel is still being set up is sent again
		// after 1 s and 3 s: the attempt outlasts both.
		ctx, cancel := context.WithTimeout(e.t.Context(), 10*time.Second)
		err := echoOnce(ctx, e.pod[from], src, dst)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s (%s): %v", what, dst, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// echoOnce sends a message over a new TCP connection from ns (from src, if
// valid) to dst, served by serveEcho, and checks that it comes back.
func echoOnce(ctx context.Context, ns *topo.NS, src netip.Addr, dst netip.AddrPort) error {
	var c net.Conn
	err := ns.Do(func() error {
		var d net.Dialer
		if src.IsValid() {
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
		}
		var err error
		c, err = d.DialContext(ctx, "tcp", dst.String())
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	msg := []byte("live changes " + dst.String())
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("sent %q, got back %q", msg, got)
	}
	return nil
}

// serveEcho echoes every TCP connection to port in ns until the test ends.
func serveEcho(t *testing.T, ns *topo.NS, port uint16) {
	t.Helper()
	ln, err := ns.Listen("tcp", anyAddr(port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(settle))
				io.Copy(c, c)
			}()
		}
	}()
}

// tunIfindex returns the ifindex of cluster c's TUN device, as its node's
// /sys shows it.
func (e *liveEnv) tunIfindex(c string) string {
	e.t.Helper()
	tun := e.lab.Plan.Cluster(c).Gateway.TUN
	out, err := e.gw[c].Run(e.t.Context(), "cat", "/sys/class/net/"+tun+"/ifindex")
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// counterSample is c1's and c2's packet counters for each other.
type counterSample struct {
	c1Tx, c1Rx, c2Tx, c2Rx uint64
}

func (s counterSample) grewFrom(prev counterSample) bool {
	return s.c1Tx > prev.c1Tx && s.c1Rx > prev.c1Rx && s.c2Tx > prev.c2Tx && s.c2Rx > prev.c2Rx
}

func (s counterSample) decreasedFrom(prev counterSample) bool {
	return s.c1Tx < prev.c1Tx || s.c1Rx < prev.c1Rx || s.c2Tx < prev.c2Tx || s.c2Rx < prev.c2Rx
}

// sample reads c1's and c2's counters for each other and their TUN
// devices, and checks that neither gateway restarted since the last
// sample: a new gateway has a new TUN device and counts from zero.
func (e *liveEnv) sample(when string) counterSample {
	e.t.Helper()
	s := e.sampleFrom(e.status("c1"), e.status("c2"), when)
	if s.decreasedFrom(e.last) {
		e.t.Errorf("at %s, c1's and c2's counters for each other went down from %+v to %+v: a gateway restarted", when, e.last, s)
	}
	e.last = s
	for _, c := range []string{"c1", "c2"} {
		if got := e.tunIfindex(c); got != e.tunIndex[c] {
			e.t.Errorf("at %s, %s's TUN device has ifindex %s, not %s: the gateway made it anew", when, c, got, e.tunIndex[c])
			e.tunIndex[c] = got
		}
	}
	return s
}

// sampleFrom takes the counters out of c1's and c2's /status, and checks
// that c1's IKE SA with c2 is the one it was (esp only).
func (e *liveEnv) sampleFrom(c1, c2 gateway.Stats, when string) counterSample {
	e.t.Helper()
	r12, r21 := remoteStats(c1, "c2"), remoteStats(c2, "c1")
	if r12 == nil || r21 == nil {
		e.t.Fatalf("at %s, c1 and c2 do not both show each other as remotes: %+v; %+v", when, c1.Remotes, c2.Remotes)
	}
	if e.ikeSPIs != "" {
		if got := ipsecWith(c1, "c2").IKESPIs; got != e.ikeSPIs {
			e.t.Errorf("at %s, c1's IKE SA with c2 is %q, not %q: it was set up anew", when, got, e.ikeSPIs)
			e.ikeSPIs = got
		}
	}
	return counterSample{c1Tx: r12.TxPackets, c1Rx: r12.RxPackets, c2Tx: r21.TxPackets, c2Rx: r21.RxPackets}
}

func remoteStats(st gateway.Stats, cluster string) *gateway.RemoteStats {
	for i := range st.Remotes {
		if st.Remotes[i].Cluster == cluster {
			return &st.Remotes[i]
		}
	}
	return nil
}

func ipsecWith(st gateway.Stats, cluster string) gateway.IPsecStatus {
	if r := remoteStats(st, cluster); r != nil && r.IPsec != nil {
		return *r.IPsec
	}
	return gateway.IPsecStatus{}
}

// waitFlowing waits until every stream has delivered data since the last
// call, so that each step starts and ends with the streams moving.
func (e *liveEnv) waitFlowing() {
	e.t.Helper()
	deadline := time.Now().Add(settle)
	for _, s := range e.streams {
		for !s.moved() {
			if err := s.failed(); err != nil {
				e.t.Fatalf("stream %s: %v", s.name, err)
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("stream %s delivered nothing for %v", s.name, settle)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Streams send streamChunk bytes every streamPace: continuous traffic
// (about 800 kB/s a stream) that leaves the lab's two cores to the
// gateways' control work, which a stream at full speed would starve.
const (
	streamChunk = 8 << 10
	streamPace  = 10 * time.Millisecond
)

// liveStream is one TCP connection carrying stream(seed) from a pod of one
// cluster to a pod of another until finish, the receiver checking every
// byte against its own copy of the stream.
type liveStream struct {
	name string
	stop chan struct{}

	mu       sync.Mutex
	last     time.Time     // when data last arrived
	maxGap   time.Duration // longest time without data since stall
	arrived  int64
	seen     int64 // arrived at the last moved
	sent     int64
	sendErr  error
	recvErr  error
	sendDone bool
	recvDone bool
	done     chan struct{} // closed when both ends are done
	ends     sync.WaitGroup
}

func startStream(t *testing.T, name string, from, to *topo.NS, dst netip.AddrPort, seed uint64) *liveStream {
	t.Helper()
	ln, err := to.Listen("tcp", anyAddr(dst.Port()))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(t.Context(), settle)
	defer cancel()
	c, err := from.DialContext(ctx, "tcp", dst.String())
	if err != nil {
		t.Fatalf("stream %s: dial %s: %v", name, dst, err)
	}
	var srv net.Conn
	select {
	case srv = <-accepted:
	case <-ctx.Done():
	}
	if srv == nil {
		c.Close()
		t.Fatalf("stream %s: %s accepted no connection", name, dst)
	}
	s := &liveStream{name: name, stop: make(chan struct{}), last: time.Now(), done: make(chan struct{})}
	s.ends.Add(2)
	go s.send(c.(*net.TCPConn), seed)
	go s.receive(srv, seed)
	go func() {
		s.ends.Wait()
		close(s.done)
	}()
	// Whatever ends the test, the connections go before the lab does.
	t.Cleanup(func() {
		s.finish()
		c.Close()
		srv.Close()
		<-s.done
	})
	return s
}

func (s *liveStream) send(c *net.TCPConn, seed uint64) {
	defer s.ends.Done()
	src := stream(seed)
	buf := make([]byte, streamChunk)
	tick := time.NewTicker(streamPace)
	defer tick.Stop()
	var err error
	for err == nil {
		select {
		case <-s.stop:
			err = c.CloseWrite()
			s.mu.Lock()
			s.sendDone, s.sendErr = true, err
			s.mu.Unlock()
			return
		case <-tick.C:
		}
		io.ReadFull(src, buf)
		c.SetWriteDeadline(time.Now().Add(settle))
		var n int
		n, err = c.Write(buf)
		s.mu.Lock()
		s.sent += int64(n)
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.sendDone, s.sendErr = true, fmt.Errorf("write after %d bytes: %w", s.sent, err)
	s.mu.Unlock()
}

func (s *liveStream) receive(c net.Conn, seed uint64) {
	defer s.ends.Done()
	ref := stream(seed)
	buf := make([]byte, 64<<10)
	want := make([]byte, len(buf))
	var n int64
	fail := func(err error) {
		s.mu.Lock()
		s.recvDone, s.recvErr = true, err
		s.mu.Unlock()
	}
	for {
		c.SetReadDeadline(time.Now().Add(settle))
		m, err := c.Read(buf)
		if m > 0 {
			now := time.Now()
			io.ReadFull(ref, want[:m])
			if i := firstDiff(buf[:m], want[:m]); i >= 0 {
				fail(fmt.Errorf("byte %d differs from what was sent", n+int64(i)))
				return
			}
			n += int64(m)
			s.mu.Lock()
			s.maxGap = max(s.maxGap, now.Sub(s.last))
			s.last, s.arrived = now, n
			s.mu.Unlock()
		}
		switch {
		case errors.Is(err, io.EOF):
			select {
			case <-s.stop:
				fail(nil)
			default:
				fail(fmt.Errorf("the connection ended after %d bytes before the test closed it", n))
			}
			return
		case err != nil:
			fail(fmt.Errorf("read after %d bytes: %w", n, err))
			return
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// stall returns the longest time the stream went without data since the
// last call, counting a gap still open now.
func (s *liveStream) stall() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := max(s.maxGap, time.Since(s.last))
	s.maxGap = 0
	return d
}

// moved reports whether data arrived since the last call that said so.
func (s *liveStream) moved() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.arrived > s.seen {
		s.seen = s.arrived
		return true
	}
	return false
}

// failed returns the error of an end that stopped before finish.
func (s *liveStream) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.sendDone && s.sendErr != nil:
		return s.sendErr
	case s.recvDone && s.recvErr != nil:
		return s.recvErr
	case s.recvDone:
		return errors.New("the receiver stopped")
	}
	return nil
}

// finish tells the sender to close its end, once.
func (s *liveStream) finish() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
}

// result waits for both ends after finish and says whether every byte sent
// arrived, with no error on either end.
func (s *liveStream) result() error {
	select {
	case <-s.done:
	case <-time.After(settle):
		return fmt.Errorf("the receiver did not see the end of the stream within %v", settle)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.sendErr != nil:
		return s.sendErr
	case s.recvErr != nil:
		return s.recvErr
	case s.arrived != s.sent:
		return fmt.Errorf("%d bytes arrived of %d sent", s.arrived, s.sent)
	}
	return nil
}
