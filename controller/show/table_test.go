package show

import (
	"bytes"
	"strings"
	"testing"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/internal/statusline"
)

func TestTableAlignsCutsAndSpellsValues(t *testing.T) {
	tb := &table{columns: []column{{"NAME", 5}, {"ON", 0}, {"LIST", 0}, {"LAST", 0}}}
	tb.add("abcdefgh", true, []string{"a", "b"}, "")
	tb.add("x", false, []string(nil), "two\nlines")
	var out bytes.Buffer
	if err := tb.write(&out); err != nil {
		t.Fatal(err)
	}
	want := "NAME    ON    LIST   LAST\n" +
		"abcde   yes   a, b\n" +
		"x       no           two; lines\n"
	if out.String() != want {
		t.Errorf("got:\n%q\nwant:\n%q", out.String(), want)
	}
	var none bytes.Buffer
	if err := (&table{columns: tb.columns}).write(&none); err != nil || none.Len() != 0 {
		t.Errorf("an empty table printed %q, %v", none.String(), err)
	}
}

func TestParseImage(t *testing.T) {
	for _, tc := range []struct{ image, repo, version string }{
		{"ghcr.io/snorkel-net/snorkel:v0.9.0", "ghcr.io/snorkel-net", "v0.9.0"},
		{"quay.io/submariner/submariner-gateway:0.18.0", "quay.io/submariner", "0.18.0"},
		{"localhost:5000/snorkel:dev", "localhost:5000", "dev"},
		{"localhost:5000/snorkel", "localhost:5000", "latest"},
		{"snorkel", "", "latest"},
		{"snorkel:v1", "", "v1"},
		{"ghcr.io/snorkel-net/snorkel@sha256:abcd", "ghcr.io/snorkel-net", "sha256:abcd"},
	} {
		repo, version := parseImage(tc.image)
		if repo != tc.repo || version != tc.version {
			t.Errorf("parseImage(%q) = %q, %q; want %q, %q", tc.image, repo, version, tc.repo, tc.version)
		}
	}
}

func TestGatewaySummary(t *testing.T) {
	conn := func(s submv1.ConnectionStatus) submv1.Connection { return submv1.Connection{Status: s} }
	for _, tc := range []struct {
		name string
		st   submv1.GatewayStatus
		want string
	}{
		{"no connections", submv1.GatewayStatus{}, "There are no connections"},
		{"all connected", submv1.GatewayStatus{Connections: []submv1.Connection{conn(submv1.Connected), conn(submv1.Connected)}}, "All connections (2) are established"},
		{"some connected", submv1.GatewayStatus{Connections: []submv1.Connection{conn(submv1.Connected), conn(submv1.ConnectionError)}}, "1 connections out of 2 are established"},
		{"a failure wins", submv1.GatewayStatus{StatusFailure: "broken", Connections: []submv1.Connection{conn(submv1.Connected)}}, "broken"},
	} {
		if got := gatewaySummary(&tc.st); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRemoteAddress(t *testing.T) {
	ep := submv1.EndpointSpec{PrivateIP: "10.0.0.1", PublicIP: "203.0.113.1"}
	nat := ep
	nat.NATEnabled = true
	for _, tc := range []struct {
		name    string
		c       submv1.Connection
		ip      string
		wantNAT bool
	}{
		{"what the gateway uses wins", submv1.Connection{Endpoint: nat, UsingIP: "10.0.0.1"}, "10.0.0.1", false},
		{"the gateway's NAT flag comes with its address", submv1.Connection{Endpoint: ep, UsingIP: "203.0.113.1", UsingNAT: true}, "203.0.113.1", true},
		{"behind NAT: the public address", submv1.Connection{Endpoint: nat}, "203.0.113.1", true},
		{"else the private address", submv1.Connection{Endpoint: ep}, "10.0.0.1", false},
	} {
		ip, n := remoteAddress(&tc.c)
		if ip != tc.ip || n != tc.wantNAT {
			t.Errorf("%s: %s %v, want %s %v", tc.name, ip, n, tc.ip, tc.wantNAT)
		}
	}
}

func TestNetworkDetailsShowTheGlobalCIDRUnderGlobalnet(t *testing.T) {
	got := networkDetails(&api.AgentConfig{
		ClusterID: "g1", ClusterCIDRs: []string{"10.7.0.0/16"}, ServiceCIDRs: []string{"10.77.0.0/16", "fd00::/108"}, GlobalCIDR: "242.1.0.0/16",
	})
	want := `    Discovered network details via Snorkel:
        Cluster ID:      g1
        Service CIDRs:   [10.77.0.0/16 fd00::/108]
        Cluster CIDRs:   [10.7.0.0/16]
        Global CIDR:     242.1.0.0/16
`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestResultMarksTheTitleWithTheWorstNote(t *testing.T) {
	r := &result{}
	r.Success("fine")
	r.Warn("odd")
	if r.Worst() != statusline.Warn || r.Failed() {
		t.Errorf("mark %s failed %v after a warning", r.Worst(), r.Failed())
	}
	r.none("nothing here")
	if r.Worst() != statusline.Fail || r.Failed() {
		t.Errorf("mark %s failed %v after none", r.Worst(), r.Failed())
	}
	r.Fail("cannot read")
	if !r.Failed() {
		t.Error("fail did not mark the result failed")
	}
	var out bytes.Buffer
	if err := r.print("Showing Things", &out, &out); err != nil {
		t.Fatal(err)
	}
	want := " ✗ Showing Things\n ✓ Fine\n ⚠ Odd\n ✗ Nothing here\n ✗ Cannot read\n"
	if out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
	if !strings.HasPrefix(contextList([]string{"a", "b"}), `contexts "a", "b"`) || contextList([]string{"a"}) != `context "a"` {
		t.Error("contextList")
	}
}

func TestNetworkDetailsShowTheClustersetIPCIDRAsSubctlDoes(t *testing.T) {
	got := networkDetails(&api.AgentConfig{
		ClusterID: "c1", ClusterCIDRs: []string{"10.7.0.0/16"}, ServiceCIDRs: []string{"10.77.0.0/16"},
		ClustersetIPCIDR: "243.0.0.0/20", ClustersetIPCIDRRange: "243.0.0.0/8",
	})
	want := `    Discovered network details via Snorkel:
        Cluster ID:      c1
        Service CIDRs:   [10.77.0.0/16]
        Cluster CIDRs:   [10.7.0.0/16]
        ClustersetIP CIDR:     243.0.0.0/20
`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}
