package dnsfeed

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/servicesync"
	"github.com/snorkel-net/snorkel/dnsd"
)

func serviceImport(typ mcsv1a1.ServiceImportType, ips ...string) *mcsv1a1.ServiceImport {
	return &mcsv1a1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "sample", Name: "svc"},
		Spec: mcsv1a1.ServiceImportSpec{
			Type:  typ,
			IPs:   ips,
			Ports: []mcsv1a1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
}

// slice is an imported EndpointSlice as servicesync writes it into a
// member.
func slice(cluster, name string, annotations map[string]string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "sample", Name: name, Annotations: annotations, Labels: map[string]string{
			servicesync.LabelSourceCluster:   cluster,
			servicesync.LabelSourceNamespace: "sample",
			servicesync.LabelServiceName:     "svc",
			discoveryv1.LabelManagedBy:       servicesync.ManagedBy,
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

func endpoint(addr string, ready *bool, hostname, pod string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	if hostname != "" {
		e.Hostname = &hostname
	}
	if pod != "" {
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: pod}
	}
	return e
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

var (
	yes = new(true)
	no  = new(false)
)

func TestServiceFromAClusterSetIPImport(t *testing.T) {
	got := service(serviceImport(mcsv1a1.ClusterSetIP),
		[]*discoveryv1.EndpointSlice{
			slice("c3", "svc-3", nil, endpoint("242.3.0.9", no, "", "")),
			slice("c2", "svc-2", nil, endpoint("10.99.0.10", yes, "", "")),
			slice("c4", "svc-4", nil, endpoint("10.97.0.10", nil, "", "")),
			{ObjectMeta: metav1.ObjectMeta{Name: "no-cluster-label"}},
		}, "c1", nil)
	http := []dnsd.Port{{Name: "http", Protocol: "TCP", Port: 8080}}
	want := dnsd.Service{
		Namespace: "sample", Name: "svc",
		Ports: []dnsd.Port{{Name: "http", Protocol: "TCP", Port: 80}},
		Exports: []dnsd.Export{
			{Cluster: "c2", IPs: addrs("10.99.0.10"), Ready: true, Ports: http},
			// Under Globalnet the slice holds the global IP: that is the
			// address answered.
			{Cluster: "c3", IPs: addrs("242.3.0.9"), Ready: false, Ports: http},
			// Readiness unknown counts as ready.
			{Cluster: "c4", IPs: addrs("10.97.0.10"), Ready: true, Ports: http},
		},
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if vip := service(serviceImport(mcsv1a1.ClusterSetIP, "10.200.0.1", "junk"), nil, "c1", nil); !reflect.DeepEqual(vip.ClusterSetIPs, addrs("10.200.0.1")) {
		t.Errorf("clusterset IPs %v, want the ServiceImport's spec.ips", vip.ClusterSetIPs)
	}
}

func TestServiceFromAHeadlessImport(t *testing.T) {
	publish := map[string]string{servicesync.AnnotationPublishNotReady: "true"}
	global := map[string]string{servicesync.AnnotationGlobalnet: "true"}
	imported := []*discoveryv1.EndpointSlice{
		slice("c2", "svc-2b", nil, endpoint("10.9.0.14", yes, "", "whereami-2")),
		slice("c2", "svc-2a", nil,
			endpoint("10.9.0.12", yes, "whereami-0", "pod-x"),
			endpoint("10.9.0.13", no, "whereami-1", "")),
		slice("c3", "svc-3", publish, endpoint("10.10.0.5", no, "whereami-0", "")),
		slice("c1", "svc-1", global, endpoint("242.1.0.10", yes, "", "db-0")),
	}
	own := func(ns, name string) []*discoveryv1.EndpointSlice {
		if ns != "sample" || name != "svc" {
			t.Errorf("own slices asked for %s/%s", ns, name)
		}
		return []*discoveryv1.EndpointSlice{{
			ObjectMeta: metav1.ObjectMeta{Name: "svc-abcde"},
			Ports:      []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080))}},
			Endpoints:  []discoveryv1.Endpoint{endpoint("10.7.0.20", yes, "", "db-0")},
		}}
	}
	got := service(serviceImport(mcsv1a1.Headless), imported, "c1", own)
	http := []dnsd.Port{{Name: "http", Protocol: "TCP", Port: 8080}}
	want := []dnsd.Export{
		// The local cluster's pods, under Globalnet, with their own IPs.
		{Cluster: "c1", Ports: http, Endpoints: []dnsd.Endpoint{{Addresses: addrs("10.7.0.20"), Ready: true}}},
		// The hostname, never the pod's name (dnsd names the others by
		// their address); slices in name order.
		{Cluster: "c2", Ports: http, Endpoints: []dnsd.Endpoint{
			{Hostname: "whereami-0", Addresses: addrs("10.9.0.12"), Ready: true},
			{Hostname: "whereami-1", Addresses: addrs("10.9.0.13"), Ready: false},
			{Addresses: addrs("10.9.0.14"), Ready: true},
		}},
		{Cluster: "c3", Ports: http, PublishNotReady: true, Endpoints: []dnsd.Endpoint{{Hostname: "whereami-0", Addresses: addrs("10.10.0.5")}}},
	}
	if !got.Headless || fmt.Sprintf("%+v", got.Exports) != fmt.Sprintf("%+v", want) {
		t.Errorf("got  %+v\nwant %+v", got.Exports, want)
	}
	// Without Globalnet, the local cluster's slice is taken as it is.
	got = service(serviceImport(mcsv1a1.Headless), imported, "c1", nil)
	if a := got.Exports[0].Endpoints[0].Addresses; !reflect.DeepEqual(a, addrs("242.1.0.10")) {
		t.Errorf("without the own slices: %v, want the imported address", a)
	}
}

func TestConnectedClusters(t *testing.T) {
	conn := func(cluster string, st submv1.ConnectionStatus) submv1.Connection {
		return submv1.Connection{Status: st, Endpoint: submv1.EndpointSpec{ClusterID: cluster}}
	}
	gws := []*submv1.Gateway{
		{Status: submv1.GatewayStatus{HAStatus: submv1.HAStatusActive, Connections: []submv1.Connection{
			conn("c3", submv1.Connected), conn("c2", submv1.Connected), conn("c4", submv1.Connecting), conn("c5", submv1.ConnectionError),
		}}},
		// A passive gateway's connections are stale.
		{Status: submv1.GatewayStatus{HAStatus: submv1.HAStatusPassive, Connections: []submv1.Connection{conn("c6", submv1.Connected)}}},
		{Status: submv1.GatewayStatus{HAStatus: submv1.HAStatusActive, Connections: []submv1.Connection{conn("c2", submv1.Connected)}}},
	}
	if got := connected(gws); !reflect.DeepEqual(got, []string{"c2", "c3"}) {
		t.Errorf("connected %v, want [c2 c3]", got)
	}
}
