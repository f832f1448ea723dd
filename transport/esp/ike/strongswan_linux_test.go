//go:build linux

package ike

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/transport/internal/netnstest"
)

// strongSwan interop topology, in two namespaces of the test's own:
//
//	ikt-<pid>-g: veth 192.168.83.1/24, this package's Engine on UDP 4500
//	ikt-<pid>-s: veth 192.168.83.2/24, 10.203.2.1/32 on lo,
//	             charon (kernel-libipsec for ESP),
//	             in its own mount namespace with a private /run
const (
	charonPath   = "/usr/lib/ipsec/charon"
	libipsecPath = "/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so"
	swanPSK      = "ikt-interop-psk-not-secret-0123456789"
)

// swanctlTimeout is how long, in seconds, swanctl --initiate waits for the
// exchanges to finish.
var swanctlTimeout = strconv.Itoa(int(settle / time.Second))

var (
	swanGoAddr   = netip.MustParseAddrPort("192.168.83.1:4500")
	swanAddr     = netip.MustParseAddrPort("192.168.83.2:4500")
	swanGoNets   = []netip.Prefix{netip.MustParsePrefix("10.203.1.0/24")}
	swanSideNets = []netip.Prefix{netip.MustParsePrefix("10.203.2.0/24")}
)

// swanLab is the topology with charon running in it.
type swanLab struct {
	root     *testing.T // the test that owns the lab
	t        *testing.T // the subtest running
	dir      string
	nsGo     string
	nsSwan   string
	charon   *exec.Cmd
	exited   chan struct{}
	logStart int
}

func newSwanLab(t *testing.T) *swanLab {
	if os.Geteuid() != 0 {
		t.Skip("skipping strongSwan interop: needs root for network namespaces")
	}
	for _, f := range []string{charonPath, libipsecPath} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("skipping strongSwan interop: %s missing (apt-get install strongswan-charon strongswan-swanctl libcharon-extra-plugins libstrongswan-standard-plugins libstrongswan-extra-plugins)", f)
		}
	}
	for _, tool := range []string{"ip", "swanctl", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping strongSwan interop: %s not found", tool)
		}
	}
	l := &swanLab{
		root:   t,
		t:      t,
		dir:    t.TempDir(),
		nsGo:   fmt.Sprintf("ikt-%d-g", os.Getpid()),
		nsSwan: fmt.Sprintf("ikt-%d-s", os.Getpid()),
	}
	t.Cleanup(l.teardown)
	vethGo, vethSwan := fmt.Sprintf("ikt%dg", os.Getpid()), fmt.Sprintf("ikt%ds", os.Getpid())
	for _, args := range [][]string{
		{"ip", "netns", "add", l.nsGo},
		{"ip", "netns", "add", l.nsSwan},
		{"ip", "-n", l.nsGo, "link", "set", "lo", "up"},
		{"ip", "-n", l.nsSwan, "link", "set", "lo", "up"},
		{"ip", "-n", l.nsGo, "link", "add", vethGo, "type", "veth", "peer", "name", vethSwan, "netns", l.nsSwan},
		{"ip", "-n", l.nsGo, "addr", "add", swanGoAddr.Addr().String() + "/24", "dev", vethGo},
		{"ip", "-n", l.nsSwan, "addr", "add", swanAddr.Addr().String() + "/24", "dev", vethSwan},
		{"ip", "-n", l.nsGo, "link", "set", vethGo, "up"},
		{"ip", "-n", l.nsSwan, "link", "set", vethSwan, "up"},
		// charon routes the remote selector from an address of its own.
		{"ip", "-n", l.nsSwan, "addr", "add", "10.203.2.1/32", "dev", "lo"},
	} {
		run(t, args...)
	}
	l.startCharon()
	return l
}

func run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (l *swanLab) teardown() {
	if l.charon != nil && l.charon.Process != nil {
		l.charon.Process.Kill()
		<-l.exited
	}
	for _, ns := range []string{l.nsGo, l.nsSwan} {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !bytes.Contains(out, []byte("No such file")) {
			l.root.Logf("ip netns del %s: %v %s", ns, err, out)
		}
	}
	if l.root.Failed() {
		if b, err := os.ReadFile(filepath.Join(l.dir, "charon.log")); err == nil {
			l.root.Logf("charon.log (tail):\n%s", tail(string(b), 60))
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (l *swanLab) startCharon() {
	t := l.t
	run := filepath.Join(l.dir, "run")
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`charon {
	load_modular = no
	load = random nonce openssl aes sha1 sha2 hmac gcm kdf curve25519 pem pkcs1 x509 pubkey kernel-libipsec kernel-netlink socket-default vici
	port = 500
	port_nat_t = 4500
	install_virtual_ip = no
	retransmit_tries = 2
	retransmit_timeout = 1
	syslog {
		daemon { default = -1 }
		auth { default = -1 }
	}
	filelog {
		log {
			path = %[1]s/charon.log
			time_format = %%T
			flush_line = yes
			default = 1
			ike = 2
			chd = 4
			knl = 1
		}
	}
	plugins {
		vici {
			socket = unix://%[1]s/charon.vici
		}
	}
}
swanctl {
	load = pem pkcs1 x509 pubkey openssl random
}
`, l.dir)
	if err := os.WriteFile(filepath.Join(l.dir, "strongswan.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, err := os.Create(filepath.Join(l.dir, "charon.stdout"))
	if err != nil {
		t.Fatal(err)
	}
	// ip netns exec, unshare and sh each exec the next, so the PID is
	// charon's.
	cmd := exec.Command("ip", "netns", "exec", l.nsSwan, "unshare", "-m", "--propagation", "private",
		"sh", "-c", `mount --bind "$1" /run && exec "$2"`, "sh", run, charonPath)
	cmd.Env = append(os.Environ(), "STRONGSWAN_CONF="+filepath.Join(l.dir, "strongswan.conf"))
	cmd.Stdout, cmd.Stderr = stdout, stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l.charon, l.exited = cmd, make(chan struct{})
	go func() {
		cmd.Wait()
		stdout.Close()
		close(l.exited)
	}()
	sock := filepath.Join(l.dir, "charon.vici")
	for end := time.Now().Add(settle); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return
		}
	}
	out, _ := os.ReadFile(filepath.Join(l.dir, "charon.stdout"))
	t.Fatalf("charon did not create its vici socket\n%s", out)
}

// swanctl runs swanctl against this lab's charon.
func (l *swanLab) swanctl(args ...string) string {
	l.t.Helper()
	out, err := l.swanctlErr(args...)
	if err != nil {
		l.t.Fatalf("swanctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (l *swanLab) swanctlErr(args ...string) (string, error) {
	// Beyond swanctlTimeout, which --initiate may wait out.
	ctx, cancel := context.WithTimeout(context.Background(), 2*settle)
	defer cancel()
	args = append(args, "--uri", "unix://"+filepath.Join(l.dir, "charon.vici"))
	cmd := exec.CommandContext(ctx, "swanctl", args...)
	cmd.Env = append(os.Environ(), "STRONGSWAN_CONF="+filepath.Join(l.dir, "strongswan.conf"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// configure loads connection "snk" to the engine with the given
// proposals and PSK, replacing what was loaded before.
func (l *swanLab) configure(ike, esp, secret string) {
	l.t.Helper()
	conf := fmt.Sprintf(`connections {
	snk {
		version = 2
		local_addrs = %s
		remote_addrs = %s
		local_port = 4500
		remote_port = 4500
		encap = yes
		proposals = %s
		rekey_time = 0
		local {
			auth = psk
			id = swan.ikt.test
		}
		remote {
			auth = psk
			id = go.ikt.test
		}
		children {
			net {
				local_ts = %s
				remote_ts = %s
				mode = tunnel
				esp_proposals = %s
				rekey_time = 0
				start_action = none
			}
		}
	}
}
secrets {
	ike-snk {
		id-a = swan.ikt.test
		id-b = go.ikt.test
		secret = "%s"
	}
}
`, swanAddr.Addr(), swanGoAddr.Addr(), ike, swanSideNets[0], swanGoNets[0], esp, secret)
	f := filepath.Join(l.dir, "swanctl.conf")
	if err := os.WriteFile(f, []byte(conf), 0o600); err != nil {
		l.t.Fatal(err)
	}
	l.swanctl("--load-all", "--noprompt", "--file", f)
	l.markLog()
}

// markLog makes later key lookups see only what charon logs from now on.
func (l *swanLab) markLog() {
	b, _ := os.ReadFile(filepath.Join(l.dir, "charon.log"))
	l.logStart = len(b)
}

// loggedChildKeys is one set of CHILD_SA keys that charon logged.
type loggedChildKeys struct{ encrI, encrR, integI, integR []byte }

var keyLine = regexp.MustCompile(`\[CHD\] (encryption|integrity) (initiator|responder) key => (\d+) bytes`)
var hexLine = regexp.MustCompile(`\[CHD\]\s+\d+: ((?:[0-9A-F]{2} )+)`)

// loggedKeys returns the CHILD_SA keys charon logged since markLog, in
// order (strongSwan's keymat_v2 logs them at level 4 of "chd").
func (l *swanLab) loggedKeys() []loggedChildKeys {
	b, err := os.ReadFile(filepath.Join(l.dir, "charon.log"))
	if err != nil {
		l.t.Fatal(err)
	}
	lines := strings.Split(string(b[l.logStart:]), "\n")
	var out []loggedChildKeys
	for i := 0; i < len(lines); i++ {
		m := keyLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		var key []byte
		for i+1 < len(lines) {
			h := hexLine.FindStringSubmatch(lines[i+1])
			if h == nil {
				break
			}
			v, err := hex.DecodeString(strings.ReplaceAll(h[1], " ", ""))
			if err != nil {
				l.t.Fatal(err)
			}
			key = append(key, v...)
			i++
		}
		if m[1] == "encryption" && m[2] == "initiator" {
			out = append(out, loggedChildKeys{})
		}
		if len(out) == 0 {
			continue
		}
		k := &out[len(out)-1]
		switch m[1] + " " + m[2] {
		case "encryption initiator":
			k.encrI = key
		case "encryption responder":
			k.encrR = key
		case "integrity initiator":
			k.integI = key
		case "integrity responder":
			k.integR = key
		}
	}
	return out
}

// swanSA is what swanctl --list-sas shows of the IKE SA and its installed
// CHILD_SAs.
type swanSA struct {
	spiI, spiR string
	children   [][2]string // in, out SPIs
	text       string
}

var (
	ikeSPIs  = regexp.MustCompile(`ESTABLISHED, IKEv2, ([0-9a-f]{16})_i\*? ([0-9a-f]{16})_r`)
	childHdr = regexp.MustCompile(`^\s+net: #\d+, reqid \d+, (\w+),`)
	inSPI    = regexp.MustCompile(`^\s+in\s+([0-9a-f]{8})`)
	outSPI   = regexp.MustCompile(`^\s+out\s+([0-9a-f]{8})`)
)

func (l *swanLab) listSAs() swanSA {
	out := l.swanctl("--list-sas")
	s := swanSA{text: out}
	if m := ikeSPIs.FindStringSubmatch(out); m != nil {
		s.spiI, s.spiR = m[1], m[2]
	}
	installed := false
	var cur [2]string
	for _, line := range strings.Split(out, "\n") {
		if m := childHdr.FindStringSubmatch(line); m != nil {
			installed = m[1] == "INSTALLED"
			continue
		}
		if m := inSPI.FindStringSubmatch(line); m != nil && installed {
			cur[0] = m[1]
		}
		if m := outSPI.FindStringSubmatch(line); m != nil && installed {
			cur[1] = m[1]
			s.children = append(s.children, cur)
		}
	}
	return s
}

// goSide is an Engine on a real UDP socket in the lab's other namespace,
// with the non-ESP marker stripped and added as the data plane's socket
// owner does.
type goSide struct {
	t    *testing.T
	e    *Engine
	dp   *fakeDP
	conn *net.UDPConn
	do   chan func()
	// driven and read close when the engine's and the socket's goroutines
	// end.
	driven, read chan struct{}
	stop         context.CancelFunc
	logs         *syncBuffer
	once         sync.Once
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (g *goSide) SendIKE(to netip.AddrPort, msg []byte) error {
	_, err := g.conn.WriteToUDPAddrPort(append([]byte{0, 0, 0, 0}, msg...), to)
	return err
}

func (l *swanLab) startGo(edit func(*Config)) *goSide {
	t := l.t
	cfg := Config{
		LocalID: "go.ikt.test",
		PSK:     []byte(swanPSK),
		Peers: []PeerConfig{{
			Endpoint: swanAddr, RemoteID: "swan.ikt.test",
			LocalTS: swanGoNets, RemoteTS: swanSideNets,
		}},
	}
	if edit != nil {
		edit(&cfg)
	}
	g := &goSide{t: t, dp: newFakeDP(), do: make(chan func()), logs: &syncBuffer{}}
	netnstest.In(t, l.nsGo, func() {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(swanGoAddr))
		if err != nil {
			t.Fatal(err)
		}
		g.conn = c
	})
	e, err := NewEngine(cfg, g.dp, g, slog.New(slog.NewTextHandler(g.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	g.e = e
	ctx, cancel := context.WithCancel(context.Background())
	g.stop = cancel
	g.driven, g.read = make(chan struct{}), make(chan struct{})
	go g.readLoop()
	go g.drive(ctx)
	t.Cleanup(g.close)
	return g
}

// read passes IKE messages, which start with the 4-byte non-ESP marker, to
// the engine; ESP and NAT-T keepalives are not for it.
func (g *goSide) readLoop() {
	defer close(g.read)
	buf := make([]byte, 65536)
	for {
		n, from, err := g.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if n > 4 && bytes.Equal(buf[:4], []byte{0, 0, 0, 0}) {
			g.e.Receive(from, buf[4:n])
		}
	}
}

// drive is Run with a way in for the test: functions sent on do run in the
// engine's goroutine, between messages and timers.
func (g *goSide) drive(ctx context.Context) {
	defer close(g.driven)
	e := g.e
	e.start(time.Now())
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		t.Reset(time.Until(e.tick(time.Now())))
		select {
		case <-ctx.Done():
			e.shutdown(time.Now())
			return
		case in := <-e.inbox:
			e.handle(in.from, in.msg, time.Now())
		case f := <-g.do:
			e.now = time.Now()
			f()
			e.publish()
		case <-t.C:
		}
	}
}

func (g *goSide) close() {
	g.once.Do(func() {
		g.stop()
		<-g.driven // the engine has sent its Deletes
		g.conn.Close()
		<-g.read
		if g.t.Failed() {
			g.t.Logf("engine log:\n%s", tail(g.logs.String(), 60))
		}
	})
}

// waitFor polls cond until it holds or settle passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(settle); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// checkChild compares the engine's newest CHILD_SA with charon's: SPIs
// from swanctl --list-sas, keys from charon's log, where goInitiated says
// which side initiated the exchange that made it.
func (l *swanLab) checkChild(g *goSide, goInitiated bool) ChildSA {
	t := l.t
	t.Helper()
	var cur []ChildSA
	waitFor(t, "one CHILD_SA installed", func() bool { cur = g.dp.current(); return len(cur) == 1 })
	c := cur[0]
	var sas swanSA
	waitFor(t, "strongSwan to show the CHILD_SA", func() bool {
		sas = l.listSAs()
		return len(sas.children) == 1 && sas.children[0] == [2]string{fmt.Sprintf("%08x", c.OutSPI), fmt.Sprintf("%08x", c.InSPI)}
	})
	keys := l.loggedKeys()
	if len(keys) == 0 {
		t.Fatal("charon logged no CHILD_SA keys")
	}
	k := keys[len(keys)-1]
	out, in := c.Out, c.In
	if !goInitiated {
		out, in = in, out
	}
	if !bytes.Equal(out.Encr, k.encrI) || !bytes.Equal(in.Encr, k.encrR) || !bytes.Equal(out.Integ, k.integI) || !bytes.Equal(in.Integ, k.integR) {
		t.Fatalf("CHILD_SA keys differ from charon's (go initiated: %v, transform %v)", goInitiated, c.Transform)
	}
	t.Logf("strongSwan agrees on CHILD_SA in %08x out %08x (%v), keys equal byte for byte:\n%s", c.InSPI, c.OutSPI, c.Transform, sas.text)
	return c
}

func (g *goSide) status() PeerStatus { return g.e.Status()[0] }

func TestStrongSwanInterop(t *testing.T) {
	l := newSwanLab(t)
	cases := []struct {
		name        string
		goInitiates bool
		ike, esp    string
		want        Transform
	}{
		{"snorkel initiates x25519 aes128gcm16", true, "aes128gcm16-prfsha256-x25519", "aes128gcm16", Transform{Encr: EncrAESGCM16, KeyBits: 128}},
		{"snorkel initiates ecp256 aes256gcm16", true, "aes256gcm16-prfsha256-ecp256", "aes256gcm16", Transform{Encr: EncrAESGCM16, KeyBits: 256}},
		{"snorkel initiates modp2048 aes128gcm16", true, "aes256-sha256-modp2048", "aes128gcm16", Transform{Encr: EncrAESGCM16, KeyBits: 128}},
		{"strongswan initiates x25519 aes256gcm16", false, "aes256gcm16-prfsha256-x25519", "aes256gcm16", Transform{Encr: EncrAESGCM16, KeyBits: 256}},
		{"strongswan initiates ecp256 aes128gcm16", false, "aes128-sha256-ecp256", "aes128gcm16", Transform{Encr: EncrAESGCM16, KeyBits: 128}},
		{"strongswan initiates modp2048 aes256gcm16", false, "aes128gcm16-prfsha256-modp2048", "aes256gcm16", Transform{Encr: EncrAESGCM16, KeyBits: 256}},
		{"snorkel initiates aes128-sha256 child", true, "aes128gcm16-prfsha256-x25519", "aes128-sha256", Transform{Encr: EncrAESCBC, KeyBits: 128, Integ: IntegHMACSHA256_128}},
		// kernel-libipsec has no ESN ("IPsec SA: ESN not supported"), so
		// ESN is covered by the in-process tests only.
		{"strongswan initiates aes256-sha256 child", false, "aes256-sha256-x25519", "aes256-sha256", Transform{Encr: EncrAESCBC, KeyBits: 256, Integ: IntegHMACSHA256_128}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l.t = t
			l.configure(tc.ike, tc.esp, swanPSK)
			g := l.startGo(func(c *Config) {
				c.IKEProposals, c.ESPProposals = []string{tc.ike}, []string{tc.esp}
				c.Peers[0].Initiate = tc.goInitiates
			})
			if !tc.goInitiates {
				l.swanctl("--initiate", "--child", "net", "--timeout", swanctlTimeout)
			}
			waitFor(t, "the IKE SA", func() bool { return g.status().State == StateEstablished })
			c := l.checkChild(g, tc.goInitiates)
			if c.Transform != tc.want {
				t.Fatalf("transform %+v, want %+v", c.Transform, tc.want)
			}
			st, sas := g.status(), l.listSAs()
			if fmt.Sprintf("%016x", st.IKESPIi) != sas.spiI || fmt.Sprintf("%016x", st.IKESPIr) != sas.spiR {
				t.Fatalf("IKE SPIs %016x/%016x, strongSwan shows %s/%s", st.IKESPIi, st.IKESPIr, sas.spiI, sas.spiR)
			}
			g.close()
			waitFor(t, "strongSwan to delete the SAs", func() bool { return l.listSAs().spiI == "" })
		})
	}
	t.Run("strongswan initiates while snorkel asks for cookies", func(t *testing.T) {
		l.t = t
		l.configure("aes256gcm16-prfsha256-x25519", "aes256gcm16", swanPSK)
		g := l.startGo(nil)
		// A threshold of zero half-open SAs: every IKE_SA_INIT must return
		// a cookie first, as under a flood (RFC 7296 §2.6).
		g.do <- func() { g.e.cfg.cookieThreshold = 0 }
		l.swanctl("--initiate", "--child", "net", "--timeout", swanctlTimeout)
		waitFor(t, "the IKE SA", func() bool { return g.status().State == StateEstablished })
		l.checkChild(g, false)
		if d, _ := g.dp.dropped(); d[DropCookieRequired] != 1 {
			t.Fatalf("drops %v; want one IKE_SA_INIT without a cookie, then charon's retry with it", d)
		}
		g.close()
		waitFor(t, "strongSwan to delete the SAs", func() bool { return l.listSAs().spiI == "" })
	})
	t.Run("rekeys", func(t *testing.T) {
		l.t = t
		l.configure("aes256gcm16-prfsha256-x25519", "aes256gcm16", swanPSK)
		g := l.startGo(func(c *Config) { c.Peers[0].Initiate = true })
		waitFor(t, "the IKE SA", func() bool { return g.status().State == StateEstablished })
		first := l.checkChild(g, true)

		l.markLog()
		l.swanctl("--rekey", "--child", "net")
		waitFor(t, "strongSwan's CHILD_SA rekey", func() bool {
			cur := g.dp.current()
			return len(cur) == 1 && cur[0].InSPI != first.InSPI
		})
		second := l.checkChild(g, false)

		old := g.status()
		l.swanctl("--rekey", "--ike", "snk")
		waitFor(t, "strongSwan's IKE SA rekey", func() bool {
			st := g.status()
			return st.IKESPIi != old.IKESPIi && l.listSAs().spiI == fmt.Sprintf("%016x", st.IKESPIi)
		})
		l.checkSPIs(g)

		l.markLog()
		g.do <- func() {
			sa := g.e.peers[0].ike
			g.e.enqueue(sa, g.e.rekeyChild(sa.children[0]))
		}
		waitFor(t, "our CHILD_SA rekey", func() bool {
			cur := g.dp.current()
			return len(cur) == 1 && cur[0].InSPI != second.InSPI
		})
		third := l.checkChild(g, true)

		old = g.status()
		g.do <- func() { g.e.enqueue(g.e.peers[0].ike, g.e.rekeyIKE(0)) }
		waitFor(t, "our IKE SA rekey", func() bool {
			st := g.status()
			return st.IKESPIi != old.IKESPIi && l.listSAs().spiI == fmt.Sprintf("%016x", st.IKESPIi)
		})
		l.checkSPIs(g)

		// A CHILD_SA rekey on the IKE SA we made proves its SK_d.
		l.markLog()
		l.swanctl("--rekey", "--child", "net")
		waitFor(t, "strongSwan's CHILD_SA rekey on the new IKE SA", func() bool {
			cur := g.dp.current()
			return len(cur) == 1 && cur[0].InSPI != third.InSPI
		})
		l.checkChild(g, false)
		g.close()
	})
	t.Run("wrong PSK, snorkel initiates", func(t *testing.T) {
		l.t = t
		l.configure("aes256gcm16-prfsha256-x25519", "aes256gcm16", "a-different-psk-0123456789abcdef")
		g := l.startGo(func(c *Config) { c.Peers[0].Initiate = true })
		want := "peer 192.168.83.2:4500: authentication failed: AUTHENTICATION_FAILED (check the PSK on both sides)"
		waitFor(t, "the authentication failure", func() bool { return g.status().LastError == want })
		g.checkFailed(want)
	})
	t.Run("wrong PSK, strongswan initiates", func(t *testing.T) {
		l.t = t
		l.configure("aes256gcm16-prfsha256-x25519", "aes256gcm16", "a-different-psk-0123456789abcdef")
		g := l.startGo(nil)
		out, err := l.swanctlErr("--initiate", "--child", "net", "--timeout", swanctlTimeout)
		if err == nil || !strings.Contains(out, "AUTHENTICATION_FAILED") {
			t.Fatalf("swanctl --initiate: %v, want a failure naming AUTHENTICATION_FAILED:\n%s", err, out)
		}
		want := "peer 192.168.83.2:4500: authentication failed: the peer's AUTH does not match the PSK, AUTHENTICATION_FAILED sent (check the PSK on both sides)"
		waitFor(t, "the authentication failure", func() bool { return g.status().LastError == want })
		g.checkFailed(want)
	})
}

// checkFailed checks that a failed authentication left the data plane
// alone and logged the error but not the PSK.
func (g *goSide) checkFailed(want string) {
	g.t.Helper()
	if n := len(g.dp.eventLog()); n != 0 {
		g.t.Fatalf("%d data plane changes after a failed authentication", n)
	}
	if logs := g.logs.String(); strings.Contains(logs, swanPSK) || !strings.Contains(logs, want) {
		g.t.Fatalf("the engine log should hold the error and not the PSK:\n%s", logs)
	}
	g.close()
}

// checkSPIs compares the IKE SA in use with strongSwan's.
func (l *swanLab) checkSPIs(g *goSide) {
	l.t.Helper()
	st, sas := g.status(), l.listSAs()
	if fmt.Sprintf("%016x", st.IKESPIi) != sas.spiI || fmt.Sprintf("%016x", st.IKESPIr) != sas.spiR {
		l.t.Fatalf("IKE SPIs %016x/%016x, strongSwan shows %s/%s", st.IKESPIi, st.IKESPIr, sas.spiI, sas.spiR)
	}
}
