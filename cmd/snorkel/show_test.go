package main

import (
	"bytes"
	"errors"
	"flag"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/snorkel-net/snorkel/gateway"
)

func TestShowFlowsPrintsBothTuples(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/flows" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`[{"original":{"src":"10.7.0.11:40000","dst":"242.2.0.10:80"},
			"reply":{"src":"242.2.0.10:80","dst":"242.1.0.3:40000"},"inbound":false,
			"protocol":"tcp","state":"established","ageSeconds":12,"idleSeconds":1,"rule":"cluster-egress"},
			{"original":{"src":"242.2.0.10:5000","dst":"242.1.0.9:80"},"reply":{"src":"10.77.0.10:80","dst":"242.2.0.10:5000"},
			"inbound":true,"protocol":"udp","state":"replied","ageSeconds":3,"idleSeconds":3,"rule":"hello"}]`))
	}))
	defer srv.Close()
	flows, err := fetchFlows(t.Context(), srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(flows) != 2 || flows[0].Reply.Dst != netip.MustParseAddrPort("242.1.0.3:40000") || !flows[1].Inbound {
		t.Fatalf("decoded %+v", flows)
	}
	var out bytes.Buffer
	if err := printFlows(&out, flows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header, two flows and a count:\n%s", out.String())
	}
	for i, want := range [][]string{
		{"PROTO", "ORIGINAL", "REPLY", "STATE", "AGE"},
		{"tcp", "out", "10.7.0.11:40000 → 242.2.0.10:80", "242.2.0.10:80 → 242.1.0.3:40000", "established", "12s", "cluster-egress"},
		{"udp", "in", "242.2.0.10:5000 → 242.1.0.9:80", "10.77.0.10:80 → 242.2.0.10:5000", "replied", "3s", "hello"},
		{"2 flows"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
}

func TestShowFlowsSaysWhyWhenGlobalnetIsOff(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Globalnet is off on this gateway", http.StatusNotFound)
	}))
	defer srv.Close()
	_, err := fetchFlows(t.Context(), srv.URL)
	if err == nil || !strings.Contains(err.Error(), "Globalnet is off") {
		t.Fatalf("err = %v, want the gateway's reason", err)
	}
	var out bytes.Buffer
	if err := printFlows(&out, []gateway.FlowStatus{}); err != nil || out.String() != "no flows\n" {
		t.Errorf("empty table printed %q, %v", out.String(), err)
	}
}

func TestShowKubeViewsTakeTheirOwnFlagsAndNameAnUnreachableContext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + l.Addr().String()
	l.Close()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["far"] = &clientcmdapi.Cluster{Server: url}
	cfg.AuthInfos["far"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["far"] = &clientcmdapi.Context{Cluster: "far", AuthInfo: "far"}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	var out, status bytes.Buffer
	err = showKube("gateways", []string{"--kubeconfig", path, "--namespace", "snorkel"}, &out, &status)
	if err == nil || err.Error() != `could not show context "far" (see above)` {
		t.Errorf("err = %v", err)
	}
	if want := "Cluster \"far\"\n\n"; out.String() != want {
		t.Errorf("stdout %q, want %q", out.String(), want)
	}
	if want := ` ✗ Cannot reach context "far" at ` + url + ": "; !strings.HasPrefix(status.String(), want) {
		t.Errorf("stderr %q, want %q…", status.String(), want)
	}
	if err := showKube("gateways", []string{"-h"}, &out, &status); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	if err := showKube("gateways", []string{"--context", "far", "extra"}, &out, &status); err == nil || !strings.Contains(err.Error(), `unexpected argument "extra"`) {
		t.Errorf("a stray argument: %v", err)
	}
	if !strings.Contains(commands["show"].usage, "connections|endpoints|gateways|networks|brokers|versions|all") {
		t.Errorf("the show command's usage does not list the views: %q", commands["show"].usage)
	}
}
