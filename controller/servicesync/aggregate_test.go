package servicesync

import (
	"math"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

func port(name string, p int32, proto corev1.Protocol) mcsv1a1.ServicePort {
	return mcsv1a1.ServicePort{Name: name, Port: p, Protocol: proto}
}

func exp(cluster string, created int64, typ mcsv1a1.ServiceImportType, ports ...mcsv1a1.ServicePort) exporter {
	return exporter{cluster: cluster, created: created, spec: &mcsv1a1.ServiceImportSpec{Type: typ, Ports: ports}}
}

func TestAggregate(t *testing.T) {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	set, hl := mcsv1a1.ClusterSetIP, mcsv1a1.Headless
	tests := []struct {
		name      string
		exps      []exporter
		typ       mcsv1a1.ServiceImportType
		clusters  []string
		ports     string
		conflict  bool
		reason    string
		msgWords  []string
		notInMsgs []string
	}{
		{
			name:     "one exporter has no conflict",
			exps:     []exporter{exp("c2", 5, set, port("http", 80, tcp))},
			typ:      set,
			clusters: []string{"c2"},
			ports:    "[http:80/TCP]",
			reason:   ReasonNoConflicts,
		},
		{
			name:     "same ports in another order do not conflict",
			exps:     []exporter{exp("c2", 5, set, port("a", 80, tcp), port("b", 53, udp)), exp("c3", 6, set, port("b", 53, udp), port("a", 80, tcp))},
			typ:      set,
			clusters: []string{"c2", "c3"},
			ports:    "[a:80/TCP, b:53/UDP]",
			reason:   ReasonNoConflicts,
		},
		{
			name:     "the oldest export comes first and wins a port name",
			exps:     []exporter{exp("c2", 9, set, port("a", 81, tcp), port("b", 90, tcp)), exp("c3", 3, set, port("a", 80, tcp))},
			typ:      set,
			clusters: []string{"c3", "c2"},
			ports:    "[a:80/TCP, b:90/TCP]",
			conflict: true,
			reason:   ReasonPortConflict,
			msgWords: []string{"[c3, c2]", "c3 exports [a:80/TCP]", "c2 exports [a:81/TCP, b:90/TCP]", "union"},
		},
		{
			name:     "a tie in time goes to the cluster ID that sorts first",
			exps:     []exporter{exp("c9", 4, hl), exp("c1", 4, hl)},
			typ:      hl,
			clusters: []string{"c1", "c9"},
			ports:    "[]",
			reason:   ReasonNoConflicts,
		},
		{
			name:     "an export without a time sorts last",
			exps:     []exporter{exp("a", math.MaxInt64, set, port("", 80, tcp)), exp("b", 7, set, port("", 80, tcp))},
			typ:      set,
			clusters: []string{"b", "a"},
			ports:    "[80/TCP]",
			reason:   ReasonNoConflicts,
		},
		{
			name:      "the first exporter's type wins and the others are left out",
			exps:      []exporter{exp("c3", 2, hl, port("", 5432, tcp)), exp("c2", 1, set, port("", 80, tcp))},
			typ:       set,
			clusters:  []string{"c2"},
			ports:     "[80/TCP]",
			conflict:  true,
			reason:    ReasonTypeConflict,
			msgWords:  []string{"[c2, c3]", "c2 exports ClusterSetIP", "c3 exports Headless", `"c2"`},
			notInMsgs: []string{"ports conflict"},
		},
		{
			name:     "type and port conflicts are both reported",
			exps:     []exporter{exp("c1", 1, set, port("", 80, tcp)), exp("c2", 2, set, port("", 8080, tcp)), exp("c3", 3, hl)},
			typ:      set,
			clusters: []string{"c1", "c2"},
			ports:    "[80/TCP]",
			conflict: true,
			reason:   ReasonTypeConflict + "," + ReasonPortConflict,
			msgWords: []string{"c3 exports Headless", "c1 exports [80/TCP]", "c2 exports [8080/TCP]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := aggregateOf(tt.exps)
			if a.typ != tt.typ || !slices.Equal(a.clusters, tt.clusters) || portsString(a.ports) != tt.ports {
				t.Errorf("type %s, clusters %v, ports %s; want %s, %v, %s", a.typ, a.clusters, portsString(a.ports), tt.typ, tt.clusters, tt.ports)
			}
			conflict, reason, msg := a.conflict()
			if conflict != tt.conflict || reason != tt.reason {
				t.Errorf("conflict %v %q, want %v %q (%s)", conflict, reason, tt.conflict, tt.reason, msg)
			}
			for _, w := range tt.msgWords {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			for _, w := range tt.notInMsgs {
				if strings.Contains(msg, w) {
					t.Errorf("message %q has %q", msg, w)
				}
			}
		})
	}
}

func TestAggregateOfNothing(t *testing.T) {
	a := aggregateOf(nil)
	if len(a.clusters) != 0 || a.precedent() != nil || a.exported("c1") {
		t.Errorf("an aggregate of no exports has clusters %v", a.clusters)
	}
}

func TestExporterOfReadsLabelsAndTimestamp(t *testing.T) {
	si := &mcsv1a1.ServiceImport{}
	if _, ok := exporterOf(si); ok {
		t.Error("a ServiceImport without the source cluster label was read as an export")
	}
	si.Labels = map[string]string{LabelSourceCluster: "c7"}
	si.Annotations = map[string]string{AnnotationTimestampPrefix + "c7": "1234"}
	e, ok := exporterOf(si)
	if !ok || e.cluster != "c7" || e.created != 1234 {
		t.Errorf("got %+v, %v", e, ok)
	}
	si.Annotations[AnnotationTimestampPrefix+"c7"] = "soon"
	if e, _ := exporterOf(si); e.created != math.MaxInt64 {
		t.Errorf("a bad timestamp read as %d, want the latest possible", e.created)
	}
}
