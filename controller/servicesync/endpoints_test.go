package servicesync

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

func testService(clusterIP string, publishNotReady bool) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "prod"},
		Spec: corev1.ServiceSpec{
			ClusterIP:                clusterIP,
			PublishNotReadyAddresses: publishNotReady,
			Ports:                    []corev1.ServicePort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}},
		},
	}
}

// ep is an endpoint; ready nil means unknown.
func ep(addr, pod, hostname string, ready *bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	if pod != "" {
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: pod}
	}
	if hostname != "" {
		e.Hostname = &hostname
	}
	return e
}

// endpointsOf renders a slice's endpoints as "hostname=address".
func endpointsOf(eps *discoveryv1.EndpointSlice) []string {
	var out []string
	for _, e := range eps.Endpoints {
		h := "<none>"
		if e.Hostname != nil {
			h = *e.Hostname
		}
		out = append(out, h+"="+strings.Join(e.Addresses, ","))
	}
	return out
}

func TestHeadlessSlice(t *testing.T) {
	yes, no := new(true), new(false)
	src := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "db-abcde", Namespace: "prod"},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("pg"), Port: new(int32(15432))}},
		Endpoints: []discoveryv1.Endpoint{
			ep("10.0.0.1", "db-0", "primary", yes),
			ep("10.0.0.2", "db-1", "", nil),
			ep("10.0.0.3", "db-2", "", no),
			ep("10.0.0.4", "", "", yes),
		},
	}
	gips := newFakeGlobalIPs()
	gips.set(gips.pods, "prod", "db-0", "242.1.0.10")
	gips.set(gips.pods, "prod", "db-2", "242.1.0.12")
	tests := []struct {
		name            string
		publishNotReady bool
		gips            GlobalIPs
		want            []string
	}{
		{"ready and unknown endpoints, with their own hostnames only", false, nil,
			[]string{"primary=10.0.0.1", "<none>=10.0.0.2", "<none>=10.0.0.4"}},
		{"not-ready endpoints too when the service publishes them", true, nil,
			[]string{"primary=10.0.0.1", "<none>=10.0.0.2", "<none>=10.0.0.3", "<none>=10.0.0.4"}},
		{"global IPs, leaving out pods without one and endpoints of no pod", true, gips,
			[]string{"primary=242.1.0.10", "<none>=242.1.0.12"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := testService(corev1.ClusterIPNone, tt.publishNotReady)
			got := headlessSlice("c2", "broker", svc, src, tt.gips)
			if e := endpointsOf(got); !slices.Equal(e, tt.want) {
				t.Errorf("endpoints %v, want %v", e, tt.want)
			}
			if got.Namespace != "broker" || got.Labels[LabelSourceName] != "db-abcde" || got.Labels[LabelIsHeadless] != "true" ||
				got.Labels[LabelSourceCluster] != "c2" || got.Labels[LabelSourceNamespace] != "prod" || got.Labels[LabelServiceName] != "db" ||
				got.Labels[discoveryv1.LabelManagedBy] != ManagedBy {
				t.Errorf("metadata %s/%s %v", got.Namespace, got.Name, got.Labels)
			}
			if want := map[bool]string{true: "true", false: "false"}[tt.gips != nil]; got.Annotations[AnnotationGlobalnet] != want {
				t.Errorf("%s = %q, want %s", AnnotationGlobalnet, got.Annotations[AnnotationGlobalnet], want)
			}
			if got.Annotations[AnnotationPublishNotReady] != map[bool]string{true: "true", false: "false"}[tt.publishNotReady] {
				t.Errorf("%s = %q", AnnotationPublishNotReady, got.Annotations[AnnotationPublishNotReady])
			}
			if len(got.Ports) != 1 || *got.Ports[0].Port != 15432 {
				t.Errorf("ports %v, want the source slice's target port 15432", got.Ports)
			}
		})
	}
	if src.Endpoints[1].Hostname != nil {
		t.Error("building the slice wrote a hostname into the source slice")
	}
}

func TestClusterIPSlice(t *testing.T) {
	yes, no := new(true), new(false)
	slice := func(eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{Endpoints: eps}
	}
	tests := []struct {
		name    string
		ip      string
		sources []*discoveryv1.EndpointSlice
		ready   bool
		family  discoveryv1.AddressType
	}{
		{"no backends is not ready", "10.96.0.9", nil, false, discoveryv1.AddressTypeIPv4},
		{"only not-ready backends is not ready", "10.96.0.9", []*discoveryv1.EndpointSlice{slice(ep("10.0.0.1", "", "", no))}, false, discoveryv1.AddressTypeIPv4},
		{"one ready backend in any slice is ready", "10.96.0.9",
			[]*discoveryv1.EndpointSlice{slice(ep("10.0.0.1", "", "", no)), slice(ep("10.0.0.2", "", "", yes))}, true, discoveryv1.AddressTypeIPv4},
		{"unknown readiness counts as ready", "fd00::9", []*discoveryv1.EndpointSlice{slice(ep("fd00::1", "", "", nil))}, true, discoveryv1.AddressTypeIPv6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := clusterIPSlice("c2", "broker", testService(tt.ip, false), tt.ip, tt.sources)
			if len(got.Endpoints) != 1 || !slices.Equal(got.Endpoints[0].Addresses, []string{tt.ip}) {
				t.Fatalf("endpoints %+v, want one with %s", got.Endpoints, tt.ip)
			}
			if *got.Endpoints[0].Conditions.Ready != tt.ready || got.AddressType != tt.family {
				t.Errorf("ready %v %s, want %v %s", *got.Endpoints[0].Conditions.Ready, got.AddressType, tt.ready, tt.family)
			}
			if len(got.Ports) != 1 || *got.Ports[0].Port != 5432 || *got.Ports[0].Name != "pg" || got.Labels[LabelIsHeadless] != "false" {
				t.Errorf("ports %v labels %v, want the Service's port pg 5432", got.Ports, got.Labels)
			}
		})
	}
}

func TestImportType(t *testing.T) {
	for _, tt := range []struct {
		typ       corev1.ServiceType
		clusterIP string
		want      mcsv1a1.ServiceImportType
		ok        bool
	}{
		{"", "10.96.0.1", mcsv1a1.ClusterSetIP, true},
		{corev1.ServiceTypeClusterIP, "10.96.0.1", mcsv1a1.ClusterSetIP, true},
		{corev1.ServiceTypeClusterIP, corev1.ClusterIPNone, mcsv1a1.Headless, true},
		{corev1.ServiceTypeExternalName, "", "", false},
		{corev1.ServiceTypeNodePort, "10.96.0.1", "", false},
		{corev1.ServiceTypeLoadBalancer, "10.96.0.1", "", false},
	} {
		got, ok := importType(&corev1.Service{Spec: corev1.ServiceSpec{Type: tt.typ, ClusterIP: tt.clusterIP}})
		if got != tt.want || ok != tt.ok {
			t.Errorf("%q %q: got %q %v, want %q %v", tt.typ, tt.clusterIP, got, ok, tt.want, tt.ok)
		}
	}
}

func TestSliceNameIsStableDistinctAndNotLegacy(t *testing.T) {
	a := sliceName("c2", "prod", "web", "")
	if a != sliceName("c2", "prod", "web", "") {
		t.Error("the same slice got two names")
	}
	seen := map[string]bool{a: true}
	for _, n := range []string{sliceName("c3", "prod", "web", ""), sliceName("c2", "dev", "web", ""), sliceName("c2", "prod", "web", "web-x1"), sliceName("c2", "prod", "api", "")} {
		if seen[n] {
			t.Errorf("name %s given twice", n)
		}
		seen[n] = true
	}
	long := strings.Repeat("s", 63)
	for n := range seen {
		if strings.HasSuffix(n, "-c2") || strings.HasSuffix(n, "-c3") {
			t.Errorf("%s ends in a cluster ID: Lighthouse would take it for a legacy slice", n)
		}
	}
	if errs := validation.IsDNS1123Subdomain(sliceName(strings.Repeat("c", 63), long, long, long)); len(errs) > 0 {
		t.Errorf("longest name invalid: %v", errs)
	}
}

func TestNewRefusesBadConfigNamingTheField(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	good := Config{ClusterID: "c1", Local: kubernetes.NewForConfigOrDie(cfg), LocalConfig: cfg, Broker: cfg, BrokerNamespace: "submariner-k8s-broker"}
	if _, err := New(good); err != nil {
		t.Fatalf("a good config was refused: %v", err)
	}
	for _, tt := range []struct {
		field  string
		change func(*Config)
	}{
		{"ClusterID", func(c *Config) { c.ClusterID = "Bad_ID" }},
		{"ClusterID", func(c *Config) { c.ClusterID = "" }},
		{"Local", func(c *Config) { c.Local = nil }},
		{"LocalConfig", func(c *Config) { c.LocalConfig = nil }},
		{"Broker", func(c *Config) { c.Broker = nil }},
		{"BrokerNamespace", func(c *Config) { c.BrokerNamespace = "" }},
		{"Workers", func(c *Config) { c.Workers = -1 }},
	} {
		c := good
		tt.change(&c)
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), "Config."+tt.field) {
			t.Errorf("bad %s: error %v does not name Config.%s", tt.field, err, tt.field)
		}
	}
}
