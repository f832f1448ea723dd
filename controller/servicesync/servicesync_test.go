package servicesync

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// settle bounds every wait for a change to reach a member. On an idle
// machine a change takes tens of milliseconds (BenchmarkSingleExportPropagation
// measures it); with both cores busy starting other packages' API
// servers it can take seconds, and a test's deadline must not be what
// fails then.
const settle = 60 * time.Second

// TestServiceSync runs a broker and three members with a Syncer each, and
// exports and imports services between them.
func TestServiceSync(t *testing.T) {
	cs := startClusterset(t)
	for _, n := range []string{"c1", "c2", "c3"} {
		cs.run(n, nil)
	}
	c1, c2, c3 := cs.members["c1"], cs.members["c2"], cs.members["c3"]
	all := []string{"c1", "c2", "c3"}

	t.Run("ClusterIPExportReachesEveryMemberAndUnexportRemovesIt", func(t *testing.T) {
		cs.namespace(t, "web1", all...)
		svc := c2.service(t, "web1", "web", "", 80)
		c2.writeSlice(t, "web1", "web", "web-x1", 8080, endpoint{addr: "10.2.0.5", pod: "web-a", ready: true})
		c2.export(t, "web1", "web")
		for _, m := range []*member{c1, c3, c2} {
			eventually(t, settle, m.name+" imports c2's web", func() string {
				return clusterIPImport(t, m, "web1", "web", map[string]string{"c2": svc.Spec.ClusterIP}, true, "p80:80/TCP")
			})
		}
		eventually(t, settle, "c2's ServiceExport conditions", func() string {
			return conditions(t, c2, "web1", "web", "Valid=True/Valid", "Ready=True/Exported", "Conflict=False/NoConflicts")
		})

		c2.unexport(t, "web1", "web")
		for _, m := range []*member{c1, c2, c3} {
			eventually(t, settle, m.name+" forgets web", func() string { return nothingImported(t, m, "web1", "web") })
		}
		eventually(t, settle, "the broker forgets web", func() string { return brokerEmpty(t, cs, "web1") })
	})

	t.Run("ExportsAndImportsAreCountedUnderSubmarinersNames", func(t *testing.T) {
		cs.namespace(t, "count", all...)
		c2.service(t, "count", "web", "", 80)
		c2.writeSlice(t, "count", "web", "web-x1", 8080, endpoint{addr: "10.2.0.6", ready: true})
		exports := `submariner_service_export{direction="localToRemote",operation="%s",syncer_name="Local ServiceImport"}`
		imports := `submariner_service_import{direction="none",operation="%s",syncer_name="Remote ServiceImport"}`
		before := map[string]float64{}
		for _, o := range []string{"create", "delete"} {
			before["c2 "+fmt.Sprintf(exports, o)] = gauge(t, c2, fmt.Sprintf(exports, o))
			before["c1 "+fmt.Sprintf(imports, o)] = gauge(t, c1, fmt.Sprintf(imports, o))
		}
		grew := func(m *member, series string) func() string {
			return func() string {
				if got, was := gauge(t, m, series), before[m.name+" "+series]; got < was+1 {
					return fmt.Sprintf("%s: %v, was %v", series, got, was)
				}
				return ""
			}
		}
		c2.export(t, "count", "web")
		eventually(t, settle, "c2 counts its export created on the broker", grew(c2, fmt.Sprintf(exports, "create")))
		eventually(t, settle, "c1 counts the import it created", grew(c1, fmt.Sprintf(imports, "create")))
		c2.unexport(t, "count", "web")
		eventually(t, settle, "c2 counts its export deleted from the broker", grew(c2, fmt.Sprintf(exports, "delete")))
		eventually(t, settle, "c1 counts the import it deleted", grew(c1, fmt.Sprintf(imports, "delete")))
	})

	t.Run("ServiceExportedByTwoClustersListsBothAndHasTwoSlices", func(t *testing.T) {
		cs.namespace(t, "web2", all...)
		ips := map[string]string{}
		for _, m := range []*member{c2, c3} {
			ips[m.name] = m.service(t, "web2", "web", "", 80).Spec.ClusterIP
			m.writeSlice(t, "web2", "web", "web-x1", 8080, endpoint{addr: "10.9.0.5", ready: true})
			m.export(t, "web2", "web")
		}
		eventually(t, settle, "c1 imports web from c2 and c3", func() string {
			return clusterIPImport(t, c1, "web2", "web", ips, true, "p80:80/TCP")
		})
		c3.unexport(t, "web2", "web")
		delete(ips, "c3")
		eventually(t, settle, "c1 imports web from c2 alone", func() string {
			return clusterIPImport(t, c1, "web2", "web", ips, true, "p80:80/TCP")
		})
		c2.unexport(t, "web2", "web")
		eventually(t, settle, "c1 forgets web", func() string { return nothingImported(t, c1, "web2", "web") })
	})

	t.Run("HeadlessServicePublishesReadyPodsWithHostnames", func(t *testing.T) {
		cs.namespace(t, "db", all...)
		c2.service(t, "db", "db", corev1.ClusterIPNone, 5432)
		pods := []endpoint{
			{addr: "10.2.1.10", pod: "db-0", hostname: "primary", ready: true},
			{addr: "10.2.1.11", pod: "db-1", ready: true},
			{addr: "10.2.1.12", pod: "db-2", ready: false},
		}
		c2.writeSlice(t, "db", "db", "db-x1", 5432, pods...)
		c2.export(t, "db", "db")
		eventually(t, settle, "c1 imports db's two ready pods", func() string {
			return headlessImport(t, c1, "db", "db", "c2", "primary=10.2.1.10", "<none>=10.2.1.11")
		})
		eventually(t, settle, "c3 imports db's two ready pods", func() string {
			return headlessImport(t, c3, "db", "db", "c2", "primary=10.2.1.10", "<none>=10.2.1.11")
		})

		pods[2].ready, pods[0].ready = true, false
		c2.writeSlice(t, "db", "db", "db-x1", 5432, pods...)
		eventually(t, settle, "c1 follows db-2 becoming ready and db-0 not", func() string {
			return headlessImport(t, c1, "db", "db", "c2", "<none>=10.2.1.11", "<none>=10.2.1.12")
		})

		c2.updateService(t, "db", "db", func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true })
		eventually(t, settle, "c1 has not-ready db-0 too once the service publishes not-ready addresses", func() string {
			return headlessImport(t, c1, "db", "db", "c2", "primary=10.2.1.10", "<none>=10.2.1.11", "<none>=10.2.1.12")
		})
		c2.unexport(t, "db", "db")
		eventually(t, settle, "c1 forgets db", func() string { return nothingImported(t, c1, "db", "db") })
	})

	t.Run("ValidConditionNamesTheService", func(t *testing.T) {
		cs.namespace(t, "valid", all...)
		c2.export(t, "valid", "ghost")
		eventually(t, settle, "ghost is invalid", func() string {
			return conditions(t, c2, "valid", "ghost", "Valid=False/ServiceUnavailable:valid/ghost", "Ready=absent", "Conflict=absent")
		})
		if s := brokerEmpty(t, cs, "valid"); s != "" {
			t.Errorf("a ServiceExport without its Service published something: %s", s)
		}

		ip := c2.service(t, "valid", "ghost", "", 80).Spec.ClusterIP
		eventually(t, settle, "ghost is exported once its Service exists", func() string {
			return clusterIPImport(t, c1, "valid", "ghost", map[string]string{"c2": ip}, false, "p80:80/TCP")
		})
		eventually(t, settle, "ghost is valid", func() string {
			return conditions(t, c2, "valid", "ghost", "Valid=True/Valid", "Ready=True/Exported")
		})

		if err := c2.kc.CoreV1().Services("valid").Delete(context.Background(), "ghost", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, m := range []*member{c1, c2, c3} {
			eventually(t, settle, m.name+" forgets ghost once its Service is deleted", func() string {
				return nothingImported(t, m, "valid", "ghost")
			})
		}
		eventually(t, settle, "ghost is invalid again", func() string {
			return conditions(t, c2, "valid", "ghost", "Valid=False/ServiceUnavailable:valid/ghost", "Ready=absent")
		})

		ext := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "valid"},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"},
		}
		if _, err := c2.kc.CoreV1().Services("valid").Create(context.Background(), ext, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		c2.export(t, "valid", "ext")
		eventually(t, settle, "ext is refused", func() string {
			return conditions(t, c2, "valid", "ext", "Valid=False/UnsupportedServiceType:valid/ext", "Ready=absent")
		})
		if c := c2.condition(t, "valid", "ext", "Valid"); !strings.Contains(c.Message, "ExternalName") {
			t.Errorf("Valid message %q does not name the type ExternalName", c.Message)
		}
		if s := brokerEmpty(t, cs, "valid"); s != "" {
			t.Errorf("an ExternalName service published something: %s", s)
		}
	})

	t.Run("ConflictingPortsAndTypesSetConflictOnBothExports", func(t *testing.T) {
		cs.namespace(t, "conflict", all...)
		c2.service(t, "conflict", "web", "", 80)
		c3.service(t, "conflict", "web", "", 8080)
		c2.export(t, "conflict", "web")
		c3.export(t, "conflict", "web")
		for _, m := range []*member{c2, c3} {
			eventually(t, settle, m.name+"'s export has Conflict=True", func() string {
				return conditions(t, m, "conflict", "web", "Conflict=True/ConflictingPorts:c2:c3:80/TCP:8080/TCP")
			})
		}
		eventually(t, settle, "c1's import has the union of the ports by name", func() string {
			si := c1.serviceImport(t, "conflict", "web")
			if si == nil {
				return "no ServiceImport"
			}
			if got := portsString(si.Spec.Ports); got != "[p80:80/TCP, p8080:8080/TCP]" {
				return "ports " + got
			}
			return ""
		})

		c3.updateService(t, "conflict", "web", func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "p80", Port: 80, Protocol: corev1.ProtocolTCP}}
		})
		for _, m := range []*member{c2, c3} {
			eventually(t, settle, m.name+"'s export has Conflict=False once the ports agree", func() string {
				return conditions(t, m, "conflict", "web", "Conflict=False/NoConflicts")
			})
		}

		// c2 exports mixed as ClusterIP, c3 as headless: the first
		// exporter (c2, or by name on a tie) decides the type.
		ip := c2.service(t, "conflict", "mixed", "", 80).Spec.ClusterIP
		c2.export(t, "conflict", "mixed")
		eventually(t, settle, "c1 imports mixed from c2", func() string {
			return clusterIPImport(t, c1, "conflict", "mixed", map[string]string{"c2": ip}, false, "p80:80/TCP")
		})
		c3.service(t, "conflict", "mixed", corev1.ClusterIPNone, 80)
		c3.writeSlice(t, "conflict", "mixed", "mixed-x1", 80, endpoint{addr: "10.3.0.7", pod: "mixed-0", ready: true})
		c3.export(t, "conflict", "mixed")
		for _, m := range []*member{c2, c3} {
			eventually(t, settle, m.name+"'s export has a type conflict", func() string {
				return conditions(t, m, "conflict", "mixed", "Conflict=True/ConflictingType:c2:c3:ClusterSetIP:Headless")
			})
		}
		if got := c1.importedSlices(t, "conflict", "mixed"); len(got["c3"]) != 0 {
			t.Errorf("c1 imported the slices of c3, whose type lost: %v", got["c3"])
		}
		if s := clusterIPImport(t, c1, "conflict", "mixed", map[string]string{"c2": ip}, false, "p80:80/TCP"); s != "" {
			t.Errorf("c1's import changed with c3's conflicting export: %s", s)
		}
	})

	t.Run("ImportWaitsForTheNamespaceToExist", func(t *testing.T) {
		cs.namespace(t, "late", "c2")
		ip := c2.service(t, "late", "web", "", 80).Spec.ClusterIP
		c2.export(t, "late", "web")
		eventually(t, settle, "c2 imports its own web", func() string {
			return clusterIPImport(t, c2, "late", "web", map[string]string{"c2": ip}, false, "p80:80/TCP")
		})
		if _, err := c1.kc.CoreV1().Namespaces().Get(context.Background(), "late", metav1.GetOptions{}); err == nil {
			t.Fatal("the Syncer created namespace late in c1")
		}
		cs.namespace(t, "late", "c1")
		eventually(t, settle, "c1 imports web once namespace late exists", func() string {
			return clusterIPImport(t, c1, "late", "web", map[string]string{"c2": ip}, false, "p80:80/TCP")
		})
	})

	t.Run("ChangesWhileStoppedAreReconciledOnStart", func(t *testing.T) {
		// late/web, exported by c2, is imported by c1 (the case above).
		cs.stopSyncer("c2")
		cs.stopSyncer("c1")
		c2.unexport(t, "late", "web")
		// A copy from a cluster that left while c1 was down.
		stale := localCopy(clusterIPSlice("c9", brokerNS, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "late"},
		}, "10.9.9.9", nil), "late")
		if _, err := c1.kc.DiscoveryV1().EndpointSlices("late").Create(context.Background(), stale, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cs.run("c2", nil)
		cs.run("c1", nil)
		eventually(t, settle, "the broker forgets late/web", func() string { return brokerEmpty(t, cs, "late") })
		for _, m := range []*member{c1, c2} {
			eventually(t, settle, m.name+" forgets late/web", func() string { return nothingImported(t, m, "late", "web") })
		}
	})

	t.Run("CLIExportsAndUnexportsThroughAKubeconfigContext", func(t *testing.T) { testCLI(t, cs) })

	t.Run("PortAndReadinessChangesPropagate", func(t *testing.T) {
		cs.namespace(t, "update", all...)
		ip := c2.service(t, "update", "web", "", 80).Spec.ClusterIP
		c2.writeSlice(t, "update", "web", "web-x1", 8080, endpoint{addr: "10.2.3.4", ready: true})
		c2.export(t, "update", "web")
		eventually(t, settle, "c1 imports web", func() string {
			return clusterIPImport(t, c1, "update", "web", map[string]string{"c2": ip}, true, "p80:80/TCP")
		})
		c2.writeSlice(t, "update", "web", "web-x1", 8080, endpoint{addr: "10.2.3.4", ready: false})
		eventually(t, settle, "c1 sees web's only backend not ready", func() string {
			return clusterIPImport(t, c1, "update", "web", map[string]string{"c2": ip}, false, "p80:80/TCP")
		})
		c2.updateService(t, "update", "web", func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 81, Protocol: corev1.ProtocolTCP}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}
		})
		for _, m := range []*member{c1, c3} {
			eventually(t, settle, m.name+" sees web's new ports", func() string {
				return clusterIPImport(t, m, "update", "web", map[string]string{"c2": ip}, false, "http:81/TCP", "dns:53/UDP")
			})
		}
	})

	t.Run("GlobalnetPublishesGlobalIPsOnceAssigned", func(t *testing.T) {
		cs.stopSyncer("c3")
		gips := newFakeGlobalIPs()
		s3 := cs.run("c3", gips)
		cs.namespace(t, "gn", all...)
		c3.service(t, "gn", "web", "", 80)
		c3.writeSlice(t, "gn", "web", "web-x1", 8080, endpoint{addr: "10.3.0.5", ready: true})
		c3.export(t, "gn", "web")
		eventually(t, settle, "web waits for its global IP", func() string {
			return conditions(t, c3, "gn", "web", "Valid=False/ServiceGlobalIPUnavailable:gn/web")
		})
		if s := brokerEmpty(t, cs, "gn"); s != "" {
			t.Errorf("a service without its global IP published something: %s", s)
		}
		gips.set(gips.services, "gn", "web", "242.3.0.9")
		s3.Resync("gn", "web")
		eventually(t, settle, "c1 imports web at its global IP", func() string {
			return clusterIPImport(t, c1, "gn", "web", map[string]string{"c3": "242.3.0.9"}, true, "p80:80/TCP")
		})

		c3.service(t, "gn", "db", corev1.ClusterIPNone, 5432)
		c3.writeSlice(t, "gn", "db", "db-x1", 5432,
			endpoint{addr: "10.3.1.10", pod: "db-0", ready: true},
			endpoint{addr: "10.3.1.11", pod: "db-1", ready: true})
		gips.set(gips.pods, "gn", "db-0", "242.3.0.10")
		c3.export(t, "gn", "db")
		eventually(t, settle, "c1 imports db-0 at its global IP and leaves db-1 out", func() string {
			return headlessImport(t, c1, "gn", "db", "c3", "<none>=242.3.0.10")
		})
		if got := c1.importedSlices(t, "gn", "db")["c3"]; len(got) == 1 && got[0].Annotations[AnnotationGlobalnet] != "true" {
			t.Errorf("annotation %s = %q, want true", AnnotationGlobalnet, got[0].Annotations[AnnotationGlobalnet])
		}
		gips.set(gips.pods, "gn", "db-1", "242.3.0.11")
		s3.Resync("gn", "db-1")
		eventually(t, settle, "c1 imports db-1 once it has a global IP", func() string {
			return headlessImport(t, c1, "gn", "db", "c3", "<none>=242.3.0.10", "<none>=242.3.0.11")
		})
		cs.stopSyncer("c3")
		cs.run("c3", nil)
	})

	t.Run("ClusterLeavingRemovesItsSlicesFromTheOthers", func(t *testing.T) {
		cs.namespace(t, "leave", all...)
		ips := map[string]string{}
		for _, m := range []*member{c2, c3} {
			ips[m.name] = m.service(t, "leave", "web", "", 80).Spec.ClusterIP
			m.export(t, "leave", "web")
		}
		eventually(t, settle, "c1 imports web from c2 and c3", func() string {
			return clusterIPImport(t, c1, "leave", "web", ips, false, "p80:80/TCP")
		})
		cs.stopSyncer("c3")
		if err := RemoveCluster(context.Background(), cs.broker.srv.Config(), brokerNS, "c3"); err != nil {
			t.Fatal(err)
		}
		delete(ips, "c3")
		for _, m := range []*member{c1, c2} {
			eventually(t, settle, m.name+" forgets c3's endpoints", func() string {
				return clusterIPImport(t, m, "leave", "web", ips, false, "p80:80/TCP")
			})
			eventually(t, settle, m.name+" forgets c3's other exports", func() string {
				for _, ns := range []string{"gn", "conflict"} {
					for svc, got := range m.allImportedSlices(t, ns) {
						if len(got["c3"]) > 0 {
							return fmt.Sprintf("%s/%s still has c3's slices", ns, svc)
						}
					}
				}
				return ""
			})
		}
		l, err := cs.broker.kc.DiscoveryV1().EndpointSlices(brokerNS).List(context.Background(), metav1.ListOptions{LabelSelector: LabelSourceCluster + "=c3"})
		if err != nil || len(l.Items) > 0 {
			t.Errorf("the broker keeps c3's slices: %d, %v", len(l.Items), err)
		}
	})
}

// clusterIPImport checks m's import of a ClusterIP service: a
// ServiceImport listing exactly the clusters of ips with the given ports,
// and one slice per cluster whose one endpoint is the cluster's address,
// ready as given; "" when all holds.
func clusterIPImport(t testing.TB, m *member, ns, name string, ips map[string]string, ready bool, ports ...string) string {
	t.Helper()
	si := m.serviceImport(t, ns, name)
	if si == nil {
		return "no ServiceImport"
	}
	if si.Spec.Type != mcsv1a1.ClusterSetIP {
		return "ServiceImport type " + string(si.Spec.Type)
	}
	var want, got []string
	for c := range ips {
		want = append(want, c)
	}
	for _, c := range si.Status.Clusters {
		got = append(got, c.Cluster)
	}
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(want, got) {
		return fmt.Sprintf("ServiceImport lists clusters %v, want %v", got, want)
	}
	if p := portsString(si.Spec.Ports); p != "["+strings.Join(ports, ", ")+"]" {
		return "ServiceImport ports " + p
	}
	slicesByCluster := m.importedSlices(t, ns, name)
	if len(slicesByCluster) != len(ips) {
		return fmt.Sprintf("slices from %d clusters, want %d", len(slicesByCluster), len(ips))
	}
	for c, ip := range ips {
		ss := slicesByCluster[c]
		if len(ss) != 1 {
			return fmt.Sprintf("%d slices from %s, want 1", len(ss), c)
		}
		s := ss[0]
		if len(s.Endpoints) != 1 || !slices.Equal(s.Endpoints[0].Addresses, []string{ip}) {
			return fmt.Sprintf("%s's slice endpoints %+v, want the one address %s", c, s.Endpoints, ip)
		}
		if r := s.Endpoints[0].Conditions.Ready; r == nil || *r != ready {
			return fmt.Sprintf("%s's endpoint ready %v, want %v", c, r, ready)
		}
		if s.Labels[LabelSourceNamespace] != ns || s.Labels[LabelIsHeadless] != "false" {
			return fmt.Sprintf("%s's slice labels %v", c, s.Labels)
		}
		var ps []string
		for _, p := range s.Ports {
			ps = append(ps, portString(mcsv1a1.ServicePort{Name: *p.Name, Protocol: *p.Protocol, Port: *p.Port}))
		}
		if !slices.Equal(ps, ports) {
			return fmt.Sprintf("%s's slice ports %v, want %v", c, ps, ports)
		}
	}
	return ""
}

// headlessImport checks m's import of cluster's headless service: its
// endpoints, as "hostname=address", in any order.
func headlessImport(t *testing.T, m *member, ns, name, cluster string, want ...string) string {
	t.Helper()
	si := m.serviceImport(t, ns, name)
	if si == nil {
		return "no ServiceImport"
	}
	if si.Spec.Type != mcsv1a1.Headless {
		return "ServiceImport type " + string(si.Spec.Type)
	}
	var got []string
	for _, s := range m.importedSlices(t, ns, name)[cluster] {
		if s.Labels[LabelIsHeadless] != "true" {
			return fmt.Sprintf("slice %s labelled %s=%q", s.Name, LabelIsHeadless, s.Labels[LabelIsHeadless])
		}
		for _, e := range s.Endpoints {
			h := "<none>"
			if e.Hostname != nil {
				h = *e.Hostname
			}
			got = append(got, h+"="+strings.Join(e.Addresses, ","))
		}
	}
	sort.Strings(got)
	want = slices.Clone(want)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		return fmt.Sprintf("endpoints %v, want %v", got, want)
	}
	return ""
}

// nothingImported checks that m has neither the ServiceImport nor any
// slice of ns/name.
func nothingImported(t testing.TB, m *member, ns, name string) string {
	t.Helper()
	if si := m.serviceImport(t, ns, name); si != nil {
		return fmt.Sprintf("ServiceImport still there, listing %v", si.Status.Clusters)
	}
	if got := m.importedSlices(t, ns, name); len(got) > 0 {
		return fmt.Sprintf("slices still there from %d clusters", len(got))
	}
	return ""
}

// brokerEmpty checks that the broker holds nothing of namespace ns.
func brokerEmpty(t *testing.T, cs *clusterset, ns string) string {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: LabelSourceNamespace + "=" + ns}
	sis, err := cs.broker.mcs.MulticlusterV1alpha1().ServiceImports(brokerNS).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := cs.broker.kc.DiscoveryV1().EndpointSlices(brokerNS).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if len(sis.Items)+len(eps.Items) > 0 {
		return fmt.Sprintf("%d ServiceImports and %d EndpointSlices of %s on the broker", len(sis.Items), len(eps.Items), ns)
	}
	return ""
}

// conditions checks the ServiceExport's conditions against specs
// "Type=Status/Reason[:word:word...]" (the words must appear in the
// message) or "Type=absent".
func conditions(t *testing.T, m *member, ns, name string, specs ...string) string {
	t.Helper()
	for _, spec := range specs {
		typ, rest, _ := strings.Cut(spec, "=")
		c := m.condition(t, ns, name, typ)
		if rest == "absent" {
			if c != nil {
				return fmt.Sprintf("%s present: %s/%s %q", typ, c.Status, c.Reason, c.Message)
			}
			continue
		}
		if c == nil {
			return typ + " missing"
		}
		parts := strings.Split(rest, ":")
		status, reason, _ := strings.Cut(parts[0], "/")
		if string(c.Status) != status || c.Reason != reason {
			return fmt.Sprintf("%s=%s/%s (%q), want %s", typ, c.Status, c.Reason, c.Message, parts[0])
		}
		for _, w := range parts[1:] {
			if !strings.Contains(c.Message, w) {
				return fmt.Sprintf("%s message %q does not mention %q", typ, c.Message, w)
			}
		}
	}
	return ""
}

// allImportedSlices lists the imported slices of every service in ns.
func (m *member) allImportedSlices(t *testing.T, ns string) map[string]map[string][]discoveryv1.EndpointSlice {
	t.Helper()
	l, err := m.kc.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sliceManagedBy})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]discoveryv1.EndpointSlice{}
	for _, s := range l.Items {
		svc, c := s.Labels[LabelServiceName], s.Labels[LabelSourceCluster]
		if out[svc] == nil {
			out[svc] = map[string][]discoveryv1.EndpointSlice{}
		}
		out[svc][c] = append(out[svc][c], s)
	}
	return out
}

// gauge reads one series, written as Prometheus's text format names it,
// from m's running Syncer's registry; 0 when it is not there yet.
func gauge(t testing.TB, m *member, series string) float64 {
	t.Helper()
	m.mu.Lock()
	reg := m.reg
	m.mu.Unlock()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			name := f.GetName() + "{"
			for i, l := range s.GetLabel() {
				if i > 0 {
					name += ","
				}
				name += l.GetName() + "=" + strconv.Quote(l.GetValue())
			}
			if name+"}" == series {
				return s.GetGauge().GetValue()
			}
		}
	}
	return 0
}
