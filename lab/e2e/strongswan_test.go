package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/transport"
)

// strongSwan as the far end: charon with its userspace ESP data plane, the
// kernel-libipsec plugin (a TUN device, ipsec0, with routes to the remote
// traffic selectors in table 220), driven by swanctl.
const (
	charonBin      = "/usr/lib/ipsec/charon"
	libipsecPlugin = "/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so"
	// swanConn and swanChild name charon's connection to c1's gateway and
	// its CHILD_SA.
	swanConn  = "snorkel"
	swanChild = "clusters"
)

// snorkelRekey is the CHILD_SA and IKE SA lifetime c1's gateway gets for
// the rekey case; the engine rekeys up to a tenth of it early. The other
// cases run with the default lifetimes of hours, so that no rekey lands in
// the middle of a check however slowly the host runs it.
const snorkelRekey = 15 * time.Second

// streamRate paces each of the rekey case's TCP streams: enough packets
// that every rekey happens under traffic, few enough to leave the host's
// CPU to the IKE exchanges.
const streamRate = 4 << 20 // bytes a second

// TestStrongSwanInterop replaces c2's Snorkel gateway with strongSwan's
// charon, which speaks IKEv2 and ESP in UDP on port 4500 with c1's Snorkel
// gateway, and checks that pods on both sides reach each other through the
// two whichever side initiates, that rekeys by either side do not break a
// running TCP stream, and that nothing but ESP in UDP crosses the underlay.
// The cases run in order on one lab and build on each other; c1's gateway
// is restarted with the config each case needs.
func TestStrongSwanInterop(t *testing.T) {
	needRoot(t)
	needStrongSwan(t)
	e := upLab(t, transport.ESP, "s")
	sw := e.replaceC2WithCharon(t)

	t.Run("snorkel_initiates_aes128gcm16_and_pods_reach_each_other", func(t *testing.T) {
		// c1 < c2, so c1's gateway initiates, offering every ESP suite it
		// has; charon accepts AES-GCM-128 alone. A fresh gateway initiates
		// now, whatever became of the running one's retries since c2's
		// gateway deleted their IKE SA.
		sw.loadConn(t, "aes128gcm16")
		mark := sw.logSize()
		e.restartC1(t, "gateway-c1-initiator", func(*gateway.Config) {})
		tun := e.waitTunnel(t, sw, "aes128gcm16")
		if tun.charonInitiated {
			t.Errorf("charon initiated IKE SA %s; c1's gateway should have", tun.ikeSPIs)
		}
		t.Logf("charon as responder:\n%s", grep(sw.logSince(mark), "selected proposal"))
		e.crossBothWays(t, 5301)
	})

	t.Run("underlay_carries_only_esp_in_udp_on_port_4500", func(t *testing.T) {
		tun, err := e.tunnel(t.Context(), sw)
		if err != nil {
			t.Fatal(err)
		}
		e.checkUnderlay(t, tun)
	})

	t.Run("rekeys_by_either_side_keep_tcp_streams_intact", func(t *testing.T) {
		// The lifetimes are short enough for the test to wait out, and
		// start now: the rekeys come a known time after the tunnel below,
		// not at whatever point of the earlier checks a slow host reached.
		e.restartC1(t, "gateway-c1-rekey", func(cfg *gateway.Config) {
			cfg.Transport.ESP.RekeyTime = snorkelRekey.String()
			cfg.Transport.ESP.IKERekeyTime = snorkelRekey.String()
		})
		e.testRekeys(t, sw, e.waitTunnel(t, sw, "aes128gcm16"), 5321)
	})

	t.Run("strongswan_initiates_aes256gcm16_and_pods_reach_each_other", func(t *testing.T) {
		// charon offers AES-GCM-128 first; c1's gateway takes only
		// AES-GCM-256.
		sw.loadConn(t, "aes128gcm16,aes256gcm16")
		mark := sw.logSize()
		e.restartC1(t, "gateway-c1-responder", func(cfg *gateway.Config) {
			initiate := false
			cfg.Remotes[0].ESP = &gateway.ESPRemoteConfig{Initiate: &initiate}
			cfg.Transport.ESP.Proposals = []string{"aes256gcm16"}
		})
		// The stopped gateway deleted its IKE SA on the way out; one left
		// at charon would carry the new CHILD_SA to a peer that forgot it.
		waitUntil(t, settle, "charon to drop the IKE SA of c1's stopped gateway", func() error {
			sas, err := sw.listSAs(t.Context())
			if err != nil {
				return err
			}
			if len(sas.ike) > 0 {
				return fmt.Errorf("charon still has an IKE SA:\n%s", sas.text)
			}
			return nil
		})
		if out, err := sw.swanctl(t.Context(), "--initiate", "--child", swanChild, "--timeout", fmt.Sprint(int(settle/time.Second))); err != nil {
			t.Fatalf("charon could not set up the CHILD_SA with c1's gateway: %v", err)
		} else if !strings.Contains(out, "initiate completed successfully") {
			t.Fatalf("swanctl --initiate:\n%s", out)
		}
		tun := e.waitTunnel(t, sw, "aes256gcm16")
		if !tun.charonInitiated {
			t.Errorf("c1's gateway initiated IKE SA %s although configured not to", tun.ikeSPIs)
		}
		t.Logf("charon as initiator:\n%s", grep(sw.logSince(mark), "selected proposal"))
		e.crossBothWays(t, 5311)
	})
}

func needStrongSwan(t *testing.T) {
	t.Helper()
	for _, f := range []string{charonBin, libipsecPlugin} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("needs strongSwan's charon with kernel-libipsec: %v (apt-get install strongswan-charon strongswan-swanctl libcharon-extra-plugins libstrongswan-extra-plugins)", err)
		}
	}
	if _, err := exec.LookPath("swanctl"); err != nil {
		t.Skipf("needs swanctl: %v (apt-get install strongswan-swanctl)", err)
	}
}

// crossBothWays checks ping both ways, 16 MiB over TCP each way on ports
// port and port+1, and UDP echoes up to the path MTU between the c1 and c2
// pods.
func (e *env) crossBothWays(t *testing.T, port uint16) {
	t.Helper()
	e.pingOK(t, e.c1Pod, c1PodName, e.c2IP)
	e.pingOK(t, e.c2Pod, c2PodName, e.c1IP)
	e.bulkBothWays(t, port)
	e.testUDPEcho(t)
}

// charon is strongSwan's IKE daemon in c2's gateway node namespace.
type charon struct {
	dir  string // strongswan.conf, swanctl.conf, charon.log, the vici socket
	e    *env
	psk  []byte
	proc *topo.Process
}

// replaceC2WithCharon stops c2's gateway and starts charon in its place,
// with routes to c1's CIDRs through ipsec0 once a CHILD_SA is up. On
// failure the test's log gets charon's log and SAs.
func (e *env) replaceC2WithCharon(t *testing.T) *charon {
	t.Helper()
	psk, err := os.ReadFile(lab.PSKFile(e.lab.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.gatewayProcess(t, e.c2).Stop(settle); err != nil {
		t.Fatal(err)
	}
	// The gateway removes its TUN device on the way out; its routes for
	// c1's CIDRs go with it and leave the way to c1 to ipsec0's.
	waitUntil(t, settle, "c2's TUN device to go", func() error {
		if e.c2.HasLink(e.tun("c2")) {
			return fmt.Errorf("%s still exists", e.tun("c2"))
		}
		return nil
	})
	// kernel-libipsec routes each outbound policy from a local address
	// inside its local selector, and fails the CHILD_SA without one. The
	// node's pod-facing address serves the pod CIDR; the service CIDR
	// needs one of its own.
	c2 := e.lab.Plan.Cluster("c2")
	if err := e.c2.AddAddr("lo", netip.PrefixFrom(c2.Spec.ServiceCIDR.Addr().Next(), 32)); err != nil {
		t.Fatal(err)
	}

	// With /run replaced by a directory of its own, charon's pid file
	// and the one of a charon elsewhere on the host never meet.
	sw := &charon{dir: t.TempDir(), e: e, psk: bytes.TrimSpace(psk)}
	run := filepath.Join(sw.dir, "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sw.conf(), []byte(sw.strongswanConf()), 0o600); err != nil {
		t.Fatal(err)
	}
	// env, unshare and sh each exec the next, so that the process is
	// charon itself and the lab stops it by its PID.
	sw.proc, err = e.c2.Start("charon", "env", "STRONGSWAN_CONF="+sw.conf(),
		"unshare", "--mount", "--propagation", "private",
		"sh", "-c", `mount --bind "$1" /run && exec "$2"`, "sh", run, charonBin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if sas, err := sw.listSAs(context.Background()); err == nil {
				t.Logf("charon's SAs:\n%s", sas.text)
			}
			t.Logf("charon's log (tail):\n%s", sw.logTail(150))
		}
		// Stopped before its directory goes.
		if err := sw.proc.Stop(settle); err != nil {
			t.Error(err)
		}
	})
	waitUntil(t, settle, "charon's vici socket", func() error {
		if !sw.proc.Alive() {
			out, _ := os.ReadFile(sw.proc.Log)
			t.Fatalf("charon exited: %v\n%s\n%s", sw.proc.ExitError(), out, sw.logTail(50))
		}
		_, err := os.Stat(sw.vici())
		return err
	})
	return sw
}

func (sw *charon) conf() string { return filepath.Join(sw.dir, "strongswan.conf") }
func (sw *charon) vici() string { return filepath.Join(sw.dir, "charon.vici") }
func (sw *charon) log() string  { return filepath.Join(sw.dir, "charon.log") }

// strongswanConf loads only what PSK authentication, AES-GCM, X25519 and
// the userspace data plane need. IKE goes to port 4500 alone; port 500 is
// left to the kernel's choice, unused.
func (sw *charon) strongswanConf() string {
	return fmt.Sprintf(`charon {
	load_modular = no
	load = random nonce openssl aes sha1 sha2 hmac gcm kdf curve25519 pem pkcs1 x509 pubkey kernel-libipsec kernel-netlink socket-default vici
	port = 0
	port_nat_t = 4500
	install_virtual_ip = no
	syslog {
		daemon {
			default = -1
		}
		auth {
			default = -1
		}
	}
	filelog {
		log {
			path = %s
			time_format = %%T
			flush_line = yes
			default = 1
			ike = 2
		}
	}
	plugins {
		vici {
			socket = unix://%s
		}
	}
}
swanctl {
	load = pem pkcs1 x509 pubkey openssl random
}
`, sw.log(), sw.vici())
}

// loadConn (re)loads the connection to c1's gateway with the given ESP
// proposals, in swanctl's notation. The IKE proposals are strongSwan's
// defaults; charon only answers until told to initiate. The PSK is the
// lab's key file as the gateway reads it (the text, trimmed), written in
// hex so that no character of it is taken for syntax.
func (sw *charon) loadConn(t *testing.T, espProposals string) {
	t.Helper()
	c1, c2 := sw.e.lab.Plan.Cluster("c1"), sw.e.lab.Plan.Cluster("c2")
	conf := fmt.Sprintf(`connections {
	%[1]s {
		version = 2
		local_addrs = %[3]s
		remote_addrs = %[4]s
		local_port = 4500
		remote_port = 4500
		encap = yes
		proposals = default
		local {
			auth = psk
			id = @c2
		}
		remote {
			auth = psk
			id = @c1
		}
		children {
			%[2]s {
				local_ts = %[5]s,%[6]s
				remote_ts = %[7]s,%[8]s
				mode = tunnel
				esp_proposals = %[9]s
				start_action = none
			}
		}
	}
}
secrets {
	ike-%[1]s {
		id-c1 = @c1
		id-c2 = @c2
		secret = 0x%[10]s
	}
}
`, swanConn, swanChild, c2.Gateway.UnderlayIP.Addr(), c1.Gateway.UnderlayIP.Addr(),
		c2.Spec.PodCIDR, c2.Spec.ServiceCIDR, c1.Spec.PodCIDR, c1.Spec.ServiceCIDR,
		espProposals, hex.EncodeToString(sw.psk))
	path := filepath.Join(sw.dir, "swanctl.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.swanctl(t.Context(), "--load-all", "--noprompt", "--file", path); err != nil {
		t.Fatal(err)
	}
}

// swanctl runs swanctl against this charon and returns its output; the
// error carries the output too. The bound leaves room for an --initiate
// that waits up to settle itself.
func (sw *charon) swanctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*settle)
	defer cancel()
	cmd := exec.CommandContext(ctx, "swanctl", append(args, "--uri", "unix://"+sw.vici())...)
	cmd.Env = append(os.Environ(), "STRONGSWAN_CONF="+sw.conf())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("swanctl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// logTail returns the last n lines of charon's log.
func (sw *charon) logTail(n int) string {
	b, err := os.ReadFile(sw.log())
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// logSize and logSince let a check read what charon logged after a point.
func (sw *charon) logSize() int {
	fi, err := os.Stat(sw.log())
	if err != nil {
		return 0
	}
	return int(fi.Size())
}

func (sw *charon) logSince(off int) string {
	b, _ := os.ReadFile(sw.log())
	return string(b[min(off, len(b)):])
}

// swanSAs is what swanctl --list-sas shows: IKE SAs with their CHILD_SAs.
type swanSAs struct {
	ike  []swanIKE
	text string
}

type swanIKE struct {
	state      string // ESTABLISHED, REKEYING, DELETING, …
	spiI, spiR string
	initiator  bool // charon initiated it
	children   []swanChildSA
}

type swanChildSA struct {
	state   string // INSTALLED, REKEYED, DELETING, …
	alg     string // AES_GCM_16-128, …
	in, out string
}

var (
	swanIKELine   = regexp.MustCompile(`^` + swanConn + `: #\d+, (\w+), IKEv2, ([0-9a-f]{16})_i(\*?) ([0-9a-f]{16})_r`)
	swanChildLine = regexp.MustCompile(`^\s+` + swanChild + `: #\d+, reqid \d+, (\w+), TUNNEL-in-UDP, ESP:(\S+)`)
	swanSPILine   = regexp.MustCompile(`^\s+(in|out)\s+([0-9a-f]{8})`)
)

func (sw *charon) listSAs(ctx context.Context) (swanSAs, error) {
	out, err := sw.swanctl(ctx, "--list-sas")
	if err != nil {
		return swanSAs{}, err
	}
	s := swanSAs{text: out}
	for _, line := range strings.Split(out, "\n") {
		if m := swanIKELine.FindStringSubmatch(line); m != nil {
			s.ike = append(s.ike, swanIKE{state: m[1], spiI: m[2], initiator: m[3] == "*", spiR: m[4]})
			continue
		}
		if len(s.ike) == 0 {
			continue
		}
		ike := &s.ike[len(s.ike)-1]
		if m := swanChildLine.FindStringSubmatch(line); m != nil {
			ike.children = append(ike.children, swanChildSA{state: m[1], alg: m[2]})
			continue
		}
		if m := swanSPILine.FindStringSubmatch(line); m != nil && len(ike.children) > 0 {
			c := &ike.children[len(ike.children)-1]
			if m[1] == "in" {
				c.in = m[2]
			} else {
				c.out = m[2]
			}
		}
	}
	return s, nil
}

// swanAlgs names Snorkel's ESP suites as swanctl --list-sas shows them.
var swanAlgs = map[string]string{
	"aes128gcm16": "AES_GCM_16-128",
	"aes256gcm16": "AES_GCM_16-256",
}

// tunnel is the IKE SA and CHILD_SA that c1's gateway and charon agree on.
type tunnel struct {
	ikeSPIs         string // as /status shows them: "<initiator's>_i <responder's>_r"
	charonInitiated bool
	established     time.Time // the IKE SA, by c1's gateway
	// in and out are the CHILD_SA's SPIs as c1's gateway uses them.
	in, out   string
	alg       string
	installed time.Time // by c1's gateway
}

// tunnel returns the SAs c1's gateway and charon agree on, or an error
// saying how they differ: each must have one established IKE SA, with the
// same SPIs, holding one installed CHILD_SA with the same algorithm whose
// inbound SPI is the other's outbound one.
func (e *env) tunnel(ctx context.Context, sw *charon) (tunnel, error) {
	var st gateway.Stats
	if err := getJSON(ctx, e.c1, "/status", &st); err != nil {
		return tunnel{}, err
	}
	if len(st.Remotes) != 1 || st.Remotes[0].IPsec == nil {
		return tunnel{}, fmt.Errorf("c1's gateway shows no IPsec state with c2: %+v", st.Remotes)
	}
	sn := st.Remotes[0].IPsec
	if sn.State != "established" || sn.Established == nil || len(sn.Children) != 1 {
		return tunnel{}, fmt.Errorf("c1's gateway: IKE SA %s %q with %d CHILD_SAs, want established with 1 (last error %q)", sn.State, sn.IKESPIs, len(sn.Children), sn.LastError)
	}
	sas, err := sw.listSAs(ctx)
	if err != nil {
		return tunnel{}, err
	}
	if len(sas.ike) != 1 || sas.ike[0].state != "ESTABLISHED" || len(sas.ike[0].children) != 1 || sas.ike[0].children[0].state != "INSTALLED" {
		return tunnel{}, fmt.Errorf("charon: want one established IKE SA with one installed CHILD_SA:\n%s", sas.text)
	}
	ike, c, sc := sas.ike[0], sn.Children[0], sas.ike[0].children[0]
	tun := tunnel{
		ikeSPIs: sn.IKESPIs, charonInitiated: ike.initiator, established: *sn.Established,
		in: c.InSPI, out: c.OutSPI, alg: c.Algorithm, installed: c.Installed,
	}
	switch {
	case sn.IKESPIs != ike.spiI+"_i "+ike.spiR+"_r":
		return tun, fmt.Errorf("IKE SA %s at c1's gateway, %s_i %s_r at charon", sn.IKESPIs, ike.spiI, ike.spiR)
	case c.InSPI != sc.out || c.OutSPI != sc.in:
		return tun, fmt.Errorf("CHILD_SA in %s out %s at c1's gateway, in %s out %s at charon", c.InSPI, c.OutSPI, sc.in, sc.out)
	case swanAlgs[c.Algorithm] != sc.alg:
		return tun, fmt.Errorf("CHILD_SA of %s at c1's gateway, %s at charon", c.Algorithm, sc.alg)
	}
	return tun, nil
}

// waitTunnel waits until c1's gateway and charon agree on a tunnel with the
// ESP suite alg, and returns it.
func (e *env) waitTunnel(t *testing.T, sw *charon, alg string) tunnel {
	t.Helper()
	return e.waitTunnelWhere(t, sw, settle, "a tunnel of "+alg+" between c1's gateway and charon", func(tun tunnel) error {
		if tun.alg != alg {
			return fmt.Errorf("the CHILD_SA has %s", tun.alg)
		}
		return nil
	})
}

// waitTunnelWhere waits up to timeout until c1's gateway and charon agree
// on a tunnel that ok accepts, and returns it.
func (e *env) waitTunnelWhere(t *testing.T, sw *charon, timeout time.Duration, what string, ok func(tunnel) error) tunnel {
	t.Helper()
	var tun tunnel
	waitUntil(t, timeout, what, func() error {
		var err error
		if tun, err = e.tunnel(t.Context(), sw); err != nil {
			return err
		}
		return ok(tun)
	})
	return tun
}

var (
	// espInUDP is how tcpdump shows ESP in UDP (RFC 3948) on port 4500.
	espInUDP = regexp.MustCompile(` IP ([\d.]+)\.4500 > ([\d.]+)\.4500: UDP-encap: ESP\(spi=0x([0-9a-f]{8}),`)
	// ikeOn4500 is IKE behind the non-ESP marker, or a NAT keepalive.
	ikeOn4500 = regexp.MustCompile(` IP [\d.]+\.4500 > [\d.]+\.4500: (NONESP-encap: isakmp|isakmp-nat-keep-alive)`)
)

// checkUnderlay captures c2's port of the underlay bridge while the pods
// ping each other and checks that every IP packet on it is ESP in UDP on
// port 4500 of the tunnel's CHILD_SA, or IKE on the same port: no inner
// packet crosses in clear, nothing uses port 500 or bare ESP.
func (e *env) checkUnderlay(t *testing.T, tun tunnel) {
	c1UL := e.lab.Plan.Cluster("c1").Gateway.UnderlayIP.Addr().String()
	c2 := e.lab.Plan.Cluster("c2")
	c2UL := c2.Gateway.UnderlayIP.Addr().String()
	at := startCapture(t, e.lab.Topo.NS(lab.UnderlayNS), c2.Gateway.BridgePort, "ip", 0)
	e.pingOK(t, e.c1Pod, c1PodName, e.c2IP)
	e.pingOK(t, e.c2Pod, c2PodName, e.c1IP)
	classify := func(lines []string) (toC2, toC1 int, other []string) {
		for _, l := range lines {
			m := espInUDP.FindStringSubmatch(l)
			switch {
			case m != nil && m[1] == c1UL && m[2] == c2UL && m[3] == tun.out:
				toC2++
			case m != nil && m[1] == c2UL && m[2] == c1UL && m[3] == tun.in:
				toC1++
			case ikeOn4500.MatchString(l):
			default:
				other = append(other, l)
			}
		}
		return toC2, toC1, other
	}
	// Each way: three echo requests and the answers to the other side's
	// three. They have crossed once the pings are answered, but tcpdump
	// may not have printed them yet.
	lines := at.linesWhen(settle, func(lines []string) bool {
		toC2, toC1, _ := classify(lines)
		return toC2 >= 6 && toC1 >= 6
	})
	toC2, toC1, other := classify(lines)
	if toC2 < 6 || toC1 < 6 {
		t.Errorf("ESP in UDP on the underlay: %d packets %s → %s with SPI %s and %d %s → %s with SPI %s; want at least 6 each", toC2, c1UL, c2UL, tun.out, toC1, c2UL, c1UL, tun.in)
	}
	if len(other) > 0 {
		t.Errorf("packets on the underlay other than ESP in UDP of the CHILD_SA or IKE, all on port 4500:\n%s", strings.Join(other, "\n"))
	}
	if t.Failed() {
		t.Logf("capture:\n%s", strings.Join(lines, "\n"))
	}
}

// testRekeys runs a TCP stream each way between the pods on ports port and
// port+1 while first c1's gateway, on its own timers, and then charon, on
// command, rekey the CHILD_SA and the IKE SA of first, a tunnel just set up
// with snorkelRekey lifetimes, and checks that both ends agree on the new
// SAs after each rekey, that the streams arrive intact, and that c1's
// gateway dropped no packet for want of an outbound SA and no ESP packet
// for an unknown SPI, a replay or a failed ICV meanwhile: each old SA
// stays until its successor carries the traffic.
func (e *env) testRekeys(t *testing.T, sw *charon, first tunnel, port uint16) {
	reasons := []string{"no_sa", "unknown_spi", "replay", "auth_failed"}
	dropsBefore := e.espDrops(t, reasons)
	logMark := sw.logSize()
	finish := e.streamBothWays(t, port)

	// Both were set up at once; c1's gateway rekeys each within the last
	// tenth of snorkelRekey, and the exchanges take up to settle.
	due := first.installed.Add(snorkelRekey)
	if first.established.After(first.installed) {
		due = first.established.Add(snorkelRekey)
	}
	t.Logf("waiting up to %v for c1's gateway to rekey", time.Until(due.Add(settle)).Round(time.Second))
	bySnorkel := e.waitTunnelWhere(t, sw, time.Until(due.Add(settle)), "c1's gateway to rekey the CHILD_SA and the IKE SA", func(tun tunnel) error {
		if tun.in == first.in || tun.ikeSPIs == first.ikeSPIs {
			return fmt.Errorf("CHILD_SA %s/%s, IKE SA %s", tun.in, tun.out, tun.ikeSPIs)
		}
		return nil
	})
	// charon's own rekey times are hours away: every request came from c1.
	log := sw.logSince(logMark)
	if n := strings.Count(log, "parsed CREATE_CHILD_SA request"); n < 2 || strings.Contains(log, "generating CREATE_CHILD_SA request") {
		t.Errorf("charon's log should show two CREATE_CHILD_SA requests from c1's gateway and none of its own; it shows:\n%s", grep(log, "CREATE_CHILD_SA"))
	}

	if _, err := sw.swanctl(t.Context(), "--rekey", "--child", swanChild); err != nil {
		t.Fatal(err)
	}
	childByCharon := e.waitTunnelWhere(t, sw, settle, "charon's CHILD_SA rekey", func(tun tunnel) error {
		if tun.in == bySnorkel.in {
			return fmt.Errorf("CHILD_SA still %s/%s", tun.in, tun.out)
		}
		return nil
	})
	if _, err := sw.swanctl(t.Context(), "--rekey", "--ike", swanConn); err != nil {
		t.Fatal(err)
	}
	// The CHILD_SA moves to the new IKE SA as it is (RFC 7296 §2.8).
	ikeByCharon := e.waitTunnelWhere(t, sw, settle, "charon's IKE SA rekey", func(tun tunnel) error {
		if tun.ikeSPIs == childByCharon.ikeSPIs {
			return fmt.Errorf("IKE SA still %s", tun.ikeSPIs)
		}
		if tun.in != childByCharon.in {
			return fmt.Errorf("the CHILD_SA changed from %s/%s to %s/%s with the IKE SA", childByCharon.in, childByCharon.out, tun.in, tun.out)
		}
		return nil
	})
	for _, s := range []struct {
		who string
		tun tunnel
	}{{"set up", first}, {"c1's gateway rekeyed", bySnorkel}, {"charon rekeyed the CHILD_SA", childByCharon}, {"charon rekeyed the IKE SA", ikeByCharon}} {
		t.Logf("%-30s IKE SA %s, CHILD_SA in %s out %s", s.who+":", s.tun.ikeSPIs, s.tun.in, s.tun.out)
	}

	finish()
	for i, after := range e.espDrops(t, reasons) {
		if d := after - dropsBefore[i]; d != 0 {
			t.Errorf("c1's gateway dropped %v packets (%s) during the rekeys", d, reasons[i])
		}
	}
}

// espDrops returns the packets c1's esp transport dropped for each reason,
// whether or not it could tell they were c2's.
func (e *env) espDrops(t *testing.T, reasons []string) []float64 {
	t.Helper()
	out := make([]float64, len(reasons))
	for i, r := range reasons {
		for _, remote := range []string{"c2", ""} {
			out[i] += metricValue(t, e.c1, "snorkel_transport_drops_total", map[string]string{"remote_cluster": remote, "reason": r})
		}
	}
	return out
}

// streamBothWays starts a TCP stream each way between the c1 and c2 pods,
// on ports port and port+1, paced to streamRate. The returned func ends
// the streams and checks that each arrived intact; they end with the test
// at the latest. The bound covers the rekeys' three waits of up to settle.
func (e *env) streamBothWays(t *testing.T, port uint16) (finish func()) {
	ctx, cancel := context.WithTimeout(t.Context(), snorkelRekey+4*settle)
	running, stop := context.WithCancel(ctx)
	t.Cleanup(cancel)
	type result struct {
		name string
		n    int64
		err  error
	}
	results := make(chan result, 2)
	start := time.Now()
	for i, s := range []struct {
		from, to *topo.NS
		dst      netip.Addr
		name     string
	}{
		{e.c1Pod, e.c2Pod, e.c2IP, c1PodName + " → " + c2PodName},
		{e.c2Pod, e.c1Pod, e.c1IP, c2PodName + " → " + c1PodName},
	} {
		go func() {
			src := &paced{ctx: running, r: stream(uint64(31 + i)), rate: streamRate}
			n, err := sendTCP(ctx, s.from, s.to, netip.AddrPortFrom(s.dst, port+uint16(i)), src)
			results <- result{s.name, n, err}
		}()
	}
	return func() {
		t.Helper()
		stop()
		for range 2 {
			r := <-results
			if r.err != nil {
				t.Errorf("stream %s: %v", r.name, r.err)
				continue
			}
			t.Logf("stream %s: %d MiB arrived intact over %v", r.name, r.n>>20, time.Since(start).Round(time.Second))
		}
	}
}

// paced reads r at about rate bytes a second until ctx is done, then ends
// with io.EOF: a stream that lasts until told, however long that is.
type paced struct {
	ctx   context.Context
	r     io.Reader
	rate  float64 // bytes a second
	start time.Time
	n     int64
}

func (p *paced) Read(b []byte) (int, error) {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	due := time.NewTimer(time.Until(p.start.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))))
	defer due.Stop()
	select {
	case <-p.ctx.Done():
		return 0, io.EOF
	case <-due.C:
	}
	if p.ctx.Err() != nil {
		return 0, io.EOF
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	return n, err
}

// grep returns the lines of text that contain s.
func grep(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
