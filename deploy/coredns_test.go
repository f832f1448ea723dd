package deploy_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/deploy"
	"github.com/snorkel-net/snorkel/dnsd"
	"github.com/snorkel-net/snorkel/transport/udp/udptest"
)

// settle bounds a wait for CoreDNS to start and for a query through it,
// which take milliseconds on an idle machine: go test runs packages in
// parallel, and on a loaded 2-core machine such waits stretch by orders of
// magnitude. Running out fails the test, so it is far beyond the normal
// time.
const settle = 60 * time.Second

func TestCoreDNSStanzaIsTheOperatorsSection(t *testing.T) {
	got, err := deploy.CoreDNSStanza("100.3.185.93")
	if err != nil {
		t.Fatal(err)
	}
	want := "#lighthouse-start AUTO-GENERATED SECTION. DO NOT EDIT\n" +
		"clusterset.local:53 {\n    forward . 100.3.185.93\n}\n" +
		"#lighthouse-end\n"
	if got != want {
		t.Errorf("stanza:\n%s\nwant:\n%s", got, want)
	}
	for _, bad := range []string{"", "dnsd.svc", "10.0.0.1:", "10.0.0.1:99999"} {
		if _, err := deploy.CoreDNSStanza(bad); err == nil {
			t.Errorf("CoreDNSStanza(%q) accepted", bad)
		}
	}
}

func TestAddCoreDNSStanza(t *testing.T) {
	const base = ".:5353 {\n    errors\n    forward . /etc/resolv.conf\n}\n"
	got, err := deploy.AddCoreDNSStanza(base, "10.96.0.53")
	if err != nil {
		t.Fatal(err)
	}
	want := "#lighthouse-start AUTO-GENERATED SECTION. DO NOT EDIT\n" +
		"clusterset.local:5353 {\n    forward . 10.96.0.53\n}\n" +
		"#lighthouse-end\n" + base
	if got != want {
		t.Errorf("on a Corefile listening on 5353:\n%s\nwant:\n%s", got, want)
	}
	same, err := deploy.AddCoreDNSStanza(got, "10.96.0.53")
	if err != nil || same != got {
		t.Errorf("adding the same section again changed the Corefile (%v):\n%s", err, same)
	}
	again, err := deploy.AddCoreDNSStanza(got, "10.96.0.54")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(again, "#lighthouse-start") != 1 || !strings.Contains(again, "forward . 10.96.0.54") || strings.Contains(again, "10.96.0.53") {
		t.Errorf("adding it again does not replace the section:\n%s", again)
	}
	noPort, err := deploy.AddCoreDNSStanza(".{\n    whoami\n}\n", "10.96.0.53")
	if err != nil || !strings.Contains(noPort, "clusterset.local:53 {") {
		t.Errorf("a Corefile without a port: %v\n%s", err, noPort)
	}
}

func TestRemoveCoreDNSStanzaUndoesAdd(t *testing.T) {
	const base = ".:53 {\n    errors\n    forward . /etc/resolv.conf\n}\n"
	added, err := deploy.AddCoreDNSStanza(base, "10.96.0.53")
	if err != nil {
		t.Fatal(err)
	}
	if got := deploy.RemoveCoreDNSStanza(added); got != base {
		t.Errorf("removing the section left:\n%s\nwant:\n%s", got, base)
	}
	if got := deploy.RemoveCoreDNSStanza(base); got != base {
		t.Errorf("a Corefile without the section changed:\n%s", got)
	}
	// The operator's section in the middle of a Corefile goes as well.
	operator := "#lighthouse-start AUTO-GENERATED SECTION. DO NOT EDIT\nclusterset.local:53 {\n    forward . 10.1.2.3\n}\n#lighthouse-end\n"
	if got := deploy.RemoveCoreDNSStanza("a {\n}\n" + operator + base); got != "a {\n}\n"+base {
		t.Errorf("the operator's section between two blocks:\n%s", got)
	}
}

func TestCoreDNSStanzaForwardsTheCustomDomainsToo(t *testing.T) {
	const base = ".:5353 {\n    errors\n}\n"
	got, err := deploy.AddCoreDNSStanza(base, "10.96.0.53", "supercluster.local", "example.org")
	if err != nil {
		t.Fatal(err)
	}
	want := "#lighthouse-start AUTO-GENERATED SECTION. DO NOT EDIT\n" +
		"clusterset.local:5353 {\n    forward . 10.96.0.53\n}\n" +
		"supercluster.local:5353 {\n    forward . 10.96.0.53\n}\n" +
		"example.org:5353 {\n    forward . 10.96.0.53\n}\n" +
		"#lighthouse-end\n" + base
	if got != want {
		t.Errorf("with custom domains:\n%s\nwant:\n%s", got, want)
	}
	fewer, err := deploy.AddCoreDNSStanza(got, "10.96.0.53")
	if err != nil || strings.Contains(fewer, "supercluster.local") || strings.Count(fewer, "#lighthouse-start") != 1 {
		t.Errorf("joining again without them keeps them (%v):\n%s", err, fewer)
	}
}

// A cluster's CoreDNS with the stanza answers the clusterset names from
// dnsd: real CoreDNS (SNORKEL_COREDNS, built by `make tools`), queried
// with dig, forwarding to dnsd on loopback.
func TestCoreDNSForwardsTheClustersetZoneToDnsd(t *testing.T) {
	coredns := os.Getenv("SNORKEL_COREDNS")
	if coredns == "" {
		t.Skip("SNORKEL_COREDNS is not set: build CoreDNS with `make tools` and export SNORKEL_COREDNS=.cache/bin/coredns-v1.15.0 to run this test")
	}
	if _, err := os.Stat(coredns); err != nil {
		t.Skipf("SNORKEL_COREDNS=%s: %v; build it with `make tools`", coredns, err)
	}
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Skip("dig is not installed (Debian: bind9-dnsutils)")
	}

	// dnsd, serving the tutorial's names.
	srv, err := dnsd.New(dnsd.Config{})
	if err != nil {
		t.Fatal(err)
	}
	http := []dnsd.Port{{Name: "http", Protocol: "TCP", Port: 80}}
	err = srv.Store().Set(dnsd.State{LocalCluster: "c1", Connected: []string{"c2"}, Services: []dnsd.Service{
		{Namespace: "sample", Name: "whereami-cs", Ports: http, Exports: []dnsd.Export{
			{Cluster: "c2", IPs: []netip.Addr{netip.MustParseAddr("10.99.0.10")}, Ready: true},
		}},
		{Namespace: "sample", Name: "whereami-ss", Headless: true, Ports: http, Exports: []dnsd.Export{
			{Cluster: "c2", Endpoints: []dnsd.Endpoint{
				{Hostname: "whereami-0", Addresses: []netip.Addr{netip.MustParseAddr("10.9.0.12")}, Ready: true},
				{Hostname: "whereami-1", Addresses: []netip.Addr{netip.MustParseAddr("10.9.0.13")}, Ready: true},
			}},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	dnsdPort := int(udptest.FreePort(t))
	pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", dnsdPort))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", dnsdPort))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, pc, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})

	// The cluster's Corefile, with the stanza added as the operator adds
	// it. The test binds every block to loopback only.
	corePort := int(udptest.FreePort(t))
	corefile, err := deploy.AddCoreDNSStanza(fmt.Sprintf(".:%d {\n    errors\n    whoami\n}\n", corePort), fmt.Sprintf("127.0.0.1:%d", dnsdPort))
	if err != nil {
		t.Fatal(err)
	}
	corefile = strings.ReplaceAll(corefile, " {\n", " {\n    bind 127.0.0.1\n")
	dir := t.TempDir()
	conf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(coredns, "-conf", conf)
	logFile, err := os.Create(filepath.Join(dir, "coredns.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("Corefile:\n%s\nCoreDNS log:\n%s", corefile, b)
		}
	})

	ask := func(timeout time.Duration, args ...string) string {
		t.Helper()
		args = append([]string{"@127.0.0.1", "-p", fmt.Sprint(corePort), "+tries=1", fmt.Sprintf("+time=%d", timeout/time.Second)}, args...)
		out, err := exec.Command(dig, args...).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("dig %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	query := func(args ...string) string { return ask(settle, args...) }
	short := func(args ...string) string {
		return strings.TrimSpace(query(append(args, "+short")...))
	}
	// Until CoreDNS is up, ask again every few seconds.
	deadline := time.Now().Add(settle)
	for strings.TrimSpace(ask(2*time.Second, "whereami-cs.sample.svc.clusterset.local", "+short")) != "10.99.0.10" {
		if time.Now().After(deadline) {
			t.Fatalf("CoreDNS does not answer through dnsd after %v: %s", settle, query("whereami-cs.sample.svc.clusterset.local"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, tc := range []struct{ args, want string }{
		{"c2.whereami-cs.sample.svc.clusterset.local", "10.99.0.10"},
		{"whereami-0.c2.whereami-ss.sample.svc.clusterset.local", "10.9.0.12"},
		{"whereami-ss.sample.svc.clusterset.local +tcp", "10.9.0.12\n10.9.0.13"},
		{"_http._tcp.whereami-cs.sample.svc.clusterset.local SRV", "0 50 80 whereami-cs.sample.svc.clusterset.local."},
		{"dns-version.clusterset.local TXT", `"1.0.0"`},
	} {
		// dnsd rotates a headless answer: compare in order.
		lines := strings.Split(short(strings.Fields(tc.args)...), "\n")
		slices.Sort(lines)
		if got := strings.Join(lines, "\n"); got != tc.want {
			t.Errorf("dig %s: %q, want %q", tc.args, got, tc.want)
		}
	}
	if out := query("nope.sample.svc.clusterset.local"); !strings.Contains(out, "status: NXDOMAIN") {
		t.Errorf("an unknown name through CoreDNS:\n%s", out)
	}
	if out := query("whereami-cs.sample.svc.clusterset.local"); !strings.Contains(out, " aa") {
		t.Errorf("dnsd's answer through CoreDNS is not authoritative:\n%s", out)
	}
}
