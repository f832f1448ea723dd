package dnsd

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// The example of the file format's documentation.
const example = `{
  "localCluster": "c1",
  "connected": ["c2"],
  "services": [{
    "namespace": "sample", "name": "whereami-cs", "type": "ClusterSetIP",
    "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
    "clusters": [{"cluster": "c2", "ips": ["10.99.0.10"], "ready": true}]
  }, {
    "namespace": "sample", "name": "whereami-ss", "type": "Headless",
    "clusters": [{"cluster": "c2", "endpoints": [
      {"hostname": "whereami-0", "addresses": ["10.9.0.12"], "ready": true}]}]
  }]
}`

func TestParseStateServesTheTutorialNames(t *testing.T) {
	st, err := ParseState([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Config{}, st)
	for name, want := range map[string]string{
		"whereami-cs.sample.svc.clusterset.local.":               "10.99.0.10",
		"c2.whereami-cs.sample.svc.clusterset.local.":            "10.99.0.10",
		"whereami-0.c2.whereami-ss.sample.svc.clusterset.local.": "10.9.0.12",
	} {
		if m := ask(t, s, name, dns.TypeA, qopt{}); !equal(addrs(m.Answer), []string{want}) {
			t.Errorf("%s: %v, want %s", name, m.Answer, want)
		}
	}
}

func TestParseStateDefaults(t *testing.T) {
	st, err := ParseState([]byte(`{"localCluster": "c1", "services": [
		{"namespace": "ns", "name": "a", "ports": [{"name": "http", "port": 80}], "clusters": [{"cluster": "c3", "ips": ["10.0.0.1"]}]},
		{"namespace": "ns", "name": "b", "type": "Headless", "clusters": [{"cluster": "c2", "endpoints": [{"addresses": ["10.1.0.1"]}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Connected, []string{"c2", "c3"}) {
		t.Errorf("connected %v: left out, every cluster of the file is connected", st.Connected)
	}
	a, b := st.Services[0], st.Services[1]
	if a.Headless || !a.Exports[0].Ready || a.Ports[0].Protocol != "TCP" {
		t.Errorf("service a %+v: want ClusterSetIP, ready, TCP by default", a)
	}
	if !b.Headless || !b.Exports[0].Endpoints[0].Ready {
		t.Errorf("service b %+v: endpoints are ready by default", b)
	}
}

func TestParseStateNamesEveryProblem(t *testing.T) {
	_, err := ParseState([]byte(`{"localCluster": "C1", "connected": ["bad_id"], "services": [
		{"namespace": "ns", "name": "Web", "type": "LoadBalancer", "clusters": []},
		{"namespace": "ns", "name": "a", "ports": [{"name": "http", "protocol": "ICMP", "port": 70000}],
		 "clusters": [{"cluster": "c2"}, {"cluster": "c2", "ips": ["10.0.0.1", "10.0.0.2"], "endpoints": [{"addresses": ["10.1.0.1"]}]}]},
		{"namespace": "ns", "name": "h", "type": "Headless", "ips": ["10.0.0.9"],
		 "clusters": [{"cluster": "c2", "ips": ["10.0.0.3"], "endpoints": [{"hostname": "Pod_0", "addresses": ["not-an-ip"]}, {"addresses": []}]}]},
		{"namespace": "ns", "name": "a", "clusters": [{"cluster": "c3", "ips": ["10.0.0.4"]}]}]}`))
	if err == nil {
		t.Fatal("a file full of mistakes was accepted")
	}
	for _, want := range []string{
		`localCluster: "C1"`,
		`connected[0]: "bad_id"`,
		`services[0].name: "Web"`,
		`services[0].type: "LoadBalancer": use ClusterSetIP or Headless`,
		`services[0].clusters: no cluster exports ns/Web`,
		`services[1].ports[0].protocol: "ICMP"`,
		`services[1].ports[0].port: 70000`,
		`services[1].clusters[0].ips: give the cluster's service address`,
		`services[1].clusters[1].cluster: cluster c2 is listed twice`,
		`services[1].clusters[1].endpoints: a ClusterSetIP service's cluster has one service address`,
		`services[1].clusters[1].ips: at most one address per IP family`,
		`services[2].ips: a headless service has no clusterset IP`,
		`services[2].clusters[0].ips: a headless service's cluster has endpoints`,
		`services[2].clusters[0].endpoints[0].hostname: "Pod_0"`,
		`services[2].clusters[0].endpoints[0].addresses[0]: "not-an-ip" is not an IP address`,
		`services[2].clusters[0].endpoints[1].addresses: a pod needs at least one address`,
		`services[3]: service ns/a is also services[1]`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
	for _, bad := range []string{`{"localCluster": "c1", "servics": []}`, `{"localCluster": "c1"} {}`, `[`} {
		if _, err := ParseState([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestEncodeStateRoundTrips(t *testing.T) {
	want := tutorial()
	b, err := EncodeState(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseState(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	// Ready means nothing for a headless service's cluster, and the file
	// has no place for it.
	for i := range want.Services {
		for j := range want.Services[i].Exports {
			if want.Services[i].Headless {
				want.Services[i].Exports[j].Ready = true
			}
		}
	}
	// Printed, nil and empty lists look alike, as they mean the same.
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("round trip through the file changed the state:\n got %+v\nwant %+v", got, want)
	}
}
