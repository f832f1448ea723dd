package verify

import (
	"bytes"
	"encoding/xml"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func servers(pods ...ServerPod) Servers {
	return Servers{Namespace: "snorkel-verify-abcde", Service: serviceName, Headless: headlessName,
		ClusterIP: netip.MustParseAddr("10.96.0.10"), Pods: pods}
}

var (
	gwPod    = ServerPod{Name: "whereami-0", IP: netip.MustParseAddr("10.2.0.5"), Node: Node{Name: "b-gw", Gateway: true}}
	otherPod = ServerPod{Name: "whereami-1", IP: netip.MustParseAddr("10.2.1.5"), Node: Node{Name: "b-worker"}}
)

// row is a check as the test states it: its name, client node, and
// lab-pod arguments or skip reason.
func rows(checks []Check) []string {
	var out []string
	for _, c := range checks {
		s := string(c.Kind) + ": " + c.Name + " | " + c.Node.Name + " | "
		if c.Skip != "" {
			s += "skipped: " + c.Skip
		} else {
			s += strings.Join(c.Args[1:], " ")
		}
		out = append(out, s)
	}
	return out
}

func TestPlan(t *testing.T) {
	a := Cluster{Context: "ctx-a", ID: "a", ServiceDiscovery: true, Gateway: "a-gw", Other: "a-worker"}
	b := Cluster{Context: "ctx-b", ID: "b", ServiceDiscovery: true, Gateway: "b-gw", Other: "b-worker"}
	ga, gb := a, b
	ga.GlobalCIDR, gb.GlobalCIDR = netip.MustParsePrefix("120.1.0.0/16"), netip.MustParsePrefix("120.2.0.0/16")
	aGatewayOnly := a
	aGatewayOnly.Other = ""
	aNoSD := a
	aNoSD.ServiceDiscovery = false
	const svc = "whereami-cs.snorkel-verify-abcde.svc.clusterset.local"
	const pod0 = "whereami-0.b.whereami-ss.snorkel-verify-abcde.svc.clusterset.local"
	const pod1 = "whereami-1.b.whereami-ss.snorkel-verify-abcde.svc.clusterset.local"
	const r = "--retry-until=3m0s"
	for _, tc := range []struct {
		name     string
		from, to Cluster
		s        Servers
		kinds    []Kind
		tries    Tries
		want     []string
	}{
		{
			name: "without Globalnet, connectivity reaches each pod IP and the ClusterIP from both nodes, and the pods see the client's own IP",
			from: a, to: b, s: servers(gwPod, otherPod), kinds: []Kind{Connectivity},
			want: []string{
				"connectivity: HTTP to the server pod's IP | a-gw | fetch http://10.2.0.5:8080/ " + r + " --expect-cluster=b --expect-pod=whereami-0 --expect-client-in=$(POD_IP)",
				"connectivity: HTTP to the server pod's IP | a-gw | fetch http://10.2.1.5:8080/ " + r + " --expect-cluster=b --expect-pod=whereami-1 --expect-client-in=$(POD_IP)",
				"connectivity: HTTP to the ClusterIP | a-gw | fetch http://10.96.0.10:80/ " + r + " --expect-cluster=b",
				"connectivity: HTTP to the server pod's IP | a-worker | fetch http://10.2.0.5:8080/ " + r + " --expect-cluster=b --expect-pod=whereami-0 --expect-client-in=$(POD_IP)",
				"connectivity: HTTP to the server pod's IP | a-worker | fetch http://10.2.1.5:8080/ " + r + " --expect-cluster=b --expect-pod=whereami-1 --expect-client-in=$(POD_IP)",
				"connectivity: HTTP to the ClusterIP | a-worker | fetch http://10.96.0.10:80/ " + r + " --expect-cluster=b",
			},
		},
		{
			name: "without a non-gateway node, the checks run from the gateway node only",
			from: aGatewayOnly, to: b, s: servers(gwPod), kinds: Kinds,
			want: []string{
				"connectivity: HTTP to the server pod's IP | a-gw | fetch http://10.2.0.5:8080/ " + r + " --expect-cluster=b --expect-pod=whereami-0 --expect-client-in=$(POD_IP)",
				"connectivity: HTTP to the ClusterIP | a-gw | fetch http://10.96.0.10:80/ " + r + " --expect-cluster=b",
				"service-discovery: DNS of the service | a-gw | resolve " + svc + " " + r + " --expect=10.96.0.10",
				"service-discovery: HTTP to the service's name | a-gw | fetch http://" + svc + ":80/ " + r + " --expect-cluster=b",
				"service-discovery: DNS of the pod's headless name | a-gw | resolve " + pod0 + " " + r + " --expect=10.2.0.5",
				"service-discovery: HTTP to the pod's headless name | a-gw | fetch http://" + pod0 + ":8080/ " + r + " --expect-cluster=b --expect-pod=whereami-0 --expect-client-in=$(POD_IP)",
			},
		},
		{
			name: "under Globalnet, the checks by address are skipped and the names resolve in the target's global CIDR, the pods seeing the source's",
			from: ga, to: gb, s: servers(gwPod, otherPod), kinds: Kinds,
			want: []string{
				"connectivity: HTTP to each server pod's IP |  | skipped: Globalnet, pod IPs overlap",
				"connectivity: HTTP to the ClusterIP |  | skipped: Globalnet, Service IPs overlap",
				"service-discovery: DNS of the service | a-gw | resolve " + svc + " " + r + " --expect-in=120.2.0.0/16",
				"service-discovery: HTTP to the service's name | a-gw | fetch http://" + svc + ":80/ " + r + " --expect-cluster=b",
				"service-discovery: DNS of the pod's headless name | a-gw | resolve " + pod0 + " " + r + " --expect-in=120.2.0.0/16",
				"service-discovery: HTTP to the pod's headless name | a-gw | fetch http://" + pod0 + ":8080/ " + r + " --expect-cluster=b --expect-pod=whereami-0 --expect-client-in=120.1.0.0/16",
				"service-discovery: DNS of the pod's headless name | a-gw | resolve " + pod1 + " " + r + " --expect-in=120.2.0.0/16",
				"service-discovery: HTTP to the pod's headless name | a-gw | fetch http://" + pod1 + ":8080/ " + r + " --expect-cluster=b --expect-pod=whereami-1 --expect-client-in=120.1.0.0/16",
				"service-discovery: DNS of the service | a-worker | resolve " + svc + " " + r + " --expect-in=120.2.0.0/16",
				"service-discovery: HTTP to the service's name | a-worker | fetch http://" + svc + ":80/ " + r + " --expect-cluster=b",
				"service-discovery: DNS of the pod's headless name | a-worker | resolve " + pod0 + " " + r + " --expect-in=120.2.0.0/16",
				"service-discovery: HTTP to the pod's headless name | a-worker | fetch http://" + pod0 + ":8080/ " + r + " --expect-cluster=b --expect-pod=whereami-0 --expect-client-in=120.1.0.0/16",
				"service-discovery: DNS of the pod's headless name | a-worker | resolve " + pod1 + " " + r + " --expect-in=120.2.0.0/16",
				"service-discovery: HTTP to the pod's headless name | a-worker | fetch http://" + pod1 + ":8080/ " + r + " --expect-cluster=b --expect-pod=whereami-1 --expect-client-in=120.1.0.0/16",
			},
		},
		{
			name: "a packet size makes each check by address also fetch that many bytes; the names are checked as before",
			from: aGatewayOnly, to: b, s: servers(gwPod), kinds: Kinds, tries: Tries{PacketSize: 3000},
			want: []string{
				"connectivity: HTTP to the server pod's IP | a-gw | fetch http://10.2.0.5:8080/ " + r + " --expect-cluster=b --expect-pod=whereami-0 --expect-client-in=$(POD_IP) --bytes=3000",
				"connectivity: HTTP to the ClusterIP | a-gw | fetch http://10.96.0.10:80/ " + r + " --expect-cluster=b --bytes=3000",
				"service-discovery: DNS of the service | a-gw | resolve " + svc + " " + r + " --expect=10.96.0.10",
				"service-discovery: HTTP to the service's name | a-gw | fetch http://" + svc + ":80/ " + r + " --expect-cluster=b",
				"service-discovery: DNS of the pod's headless name | a-gw | resolve " + pod0 + " " + r + " --expect=10.2.0.5",
				"service-discovery: HTTP to the pod's headless name | a-gw | fetch http://" + pod0 + ":8080/ " + r + " --expect-cluster=b --expect-pod=whereami-0 --expect-client-in=$(POD_IP)",
			},
		},
		{
			name: "connection tries bound each attempt and all of them, for every check",
			from: aGatewayOnly, to: b, s: servers(gwPod), kinds: Kinds, tries: Tries{Retry: 2 * time.Minute, Attempt: time.Minute},
			want: []string{
				"connectivity: HTTP to the server pod's IP | a-gw | fetch http://10.2.0.5:8080/ --retry-until=2m0s --timeout=1m0s --expect-cluster=b --expect-pod=whereami-0 --expect-client-in=$(POD_IP)",
				"connectivity: HTTP to the ClusterIP | a-gw | fetch http://10.96.0.10:80/ --retry-until=2m0s --timeout=1m0s --expect-cluster=b",
				"service-discovery: DNS of the service | a-gw | resolve " + svc + " --retry-until=2m0s --timeout=1m0s --expect=10.96.0.10",
				"service-discovery: HTTP to the service's name | a-gw | fetch http://" + svc + ":80/ --retry-until=2m0s --timeout=1m0s --expect-cluster=b",
				"service-discovery: DNS of the pod's headless name | a-gw | resolve " + pod0 + " --retry-until=2m0s --timeout=1m0s --expect=10.2.0.5",
				"service-discovery: HTTP to the pod's headless name | a-gw | fetch http://" + pod0 + ":8080/ --retry-until=2m0s --timeout=1m0s --expect-cluster=b --expect-pod=whereami-0 --expect-client-in=$(POD_IP)",
			},
		},
		{
			name: "without service discovery in the source, its checks are skipped",
			from: aNoSD, to: b, s: servers(gwPod, otherPod), kinds: []Kind{ServiceDiscovery},
			want: []string{"service-discovery: service discovery |  | skipped: service discovery is not deployed in context ctx-a"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.tries.Retry == 0 {
				tc.tries.Retry = 3 * time.Minute
			}
			got := rows(Plan(tc.from, tc.to, tc.s, tc.kinds, tc.tries))
			if !slices.Equal(got, tc.want) {
				t.Errorf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestParseKinds(t *testing.T) {
	for _, tc := range []struct {
		only, want, wantErr string
	}{
		{only: "connectivity,service-discovery", want: "connectivity,service-discovery"},
		{only: " Service-Discovery , basic-connectivity,connectivity", want: "connectivity,service-discovery"},
		{only: "gateway-failover", wantErr: "--only gateway-failover: Snorkel verifies no gateway failover"},
		{only: "compliance", wantErr: "--only compliance: subctl's compliance"},
		{only: "dns", wantErr: `--only: unknown verification "dns"; give connectivity and/or service-discovery`},
		{only: ",", wantErr: "--only names no verification"},
	} {
		kinds, err := ParseKinds(tc.only)
		var got []string
		for _, k := range kinds {
			got = append(got, string(k))
		}
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("--only %q: %v, want an error with %q", tc.only, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || strings.Join(got, ",") != tc.want):
			t.Errorf("--only %q: %v, %v; want %s", tc.only, got, err, tc.want)
		}
	}
}

func TestWriteTable(t *testing.T) {
	results := []Result{
		{Check: Check{Kind: Connectivity, Name: "HTTP to the ClusterIP", From: "a a-gw (gateway)", To: "b service whereami-cs 10.96.0.10"}, Pod: "check-00", Passed: true, Log: "ok\n"},
		{Check: Check{Kind: ServiceDiscovery, Name: "DNS of the service", From: "a a-worker (non-gateway)", To: "b whereami-cs.ns.svc.clusterset.local"}, Pod: "check-01",
			Detail: "resolve: lookup whereami-cs.ns.svc.clusterset.local.: no such host", Log: "snorkel lab-pod: resolve: lookup whereami-cs.ns.svc.clusterset.local.: no such host\n"},
		{Check: Check{Kind: Connectivity, Name: "HTTP to each server pod's IP", From: "a", To: "b", Skip: "Globalnet, pod IPs overlap"}},
	}
	var out bytes.Buffer
	if err := WriteTable(&out, "a", "b", results); err != nil {
		t.Fatal(err)
	}
	want := `CHECK                                       FROM                      TO                                     RESULT
connectivity: HTTP to the ClusterIP         a a-gw (gateway)          b service whereami-cs 10.96.0.10       ✓
service-discovery: DNS of the service       a a-worker (non-gateway)  b whereami-cs.ns.svc.clusterset.local  ✗ resolve: lookup whereami-cs.ns.svc.clusterset.local.: no such host
connectivity: HTTP to each server pod's IP  a                         b                                      skipped: Globalnet, pod IPs overlap
✗ a → b: 1 passed, 1 failed, 1 skipped
`
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if err := WriteLogs(&out, results); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "--- check-01 (service-discovery: DNS of the service, from a a-worker (non-gateway) to b whereami-cs.ns.svc.clusterset.local)\nsnorkel lab-pod: resolve") ||
		strings.Contains(got, "skipped") {
		t.Errorf("logs:\n%s", got)
	}
}

func TestWriteJUnit(t *testing.T) {
	results := []Result{
		{Check: Check{Kind: Connectivity, Name: "HTTP to the ClusterIP", From: "a a-gw (gateway)", To: "b service whereami-cs 10.96.0.10"}, Pod: "check-00", Passed: true, Log: "ok\n"},
		{Check: Check{Kind: ServiceDiscovery, Name: "DNS of the service", From: "a a-worker (non-gateway)", To: "b whereami-cs.ns.svc.clusterset.local"}, Pod: "check-01",
			Detail: "resolve: no such host", Log: "snorkel lab-pod: resolve: <no such host>\n"},
		{Check: Check{Kind: Connectivity, Name: "HTTP to each server pod's IP", From: "a", To: "b", Skip: "Globalnet, pod IPs overlap"}},
	}
	var out bytes.Buffer
	if err := WriteJUnit(&out, "a", "b", results); err != nil {
		t.Fatal(err)
	}
	want := `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="3" failures="1" skipped="1">
  <testsuite name="snorkel verify a → b" tests="3" failures="1" skipped="1">
    <testcase name="connectivity: HTTP to the ClusterIP, from a a-gw (gateway) to b service whereami-cs 10.96.0.10" classname="connectivity">
      <system-out>ok&#xA;</system-out>
    </testcase>
    <testcase name="service-discovery: DNS of the service, from a a-worker (non-gateway) to b whereami-cs.ns.svc.clusterset.local" classname="service-discovery">
      <failure message="resolve: no such host"></failure>
      <system-out>snorkel lab-pod: resolve: &lt;no such host&gt;&#xA;</system-out>
    </testcase>
    <testcase name="connectivity: HTTP to each server pod&#39;s IP, from a to b" classname="connectivity">
      <skipped message="Globalnet, pod IPs overlap"></skipped>
    </testcase>
  </testsuite>
</testsuites>
`
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
	// What CI reads back: the counts and each case's outcome.
	var back junitSuites
	if err := xml.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatalf("the report does not parse: %v", err)
	}
	if s := back.Suites[0]; len(s.Cases) != 3 || s.Cases[0].Failure != nil || s.Cases[1].Failure == nil || s.Cases[2].Skipped == nil {
		t.Errorf("read back: %+v", back)
	}
}
