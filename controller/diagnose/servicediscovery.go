package diagnose

import (
	"context"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/servicesync"
	"github.com/snorkel-net/snorkel/deploy"
)

// corefileKey is the key of the CoreDNS ConfigMap that holds the Corefile.
const corefileKey = "Corefile"

func checkServiceDiscovery(ctx context.Context, c *cluster, r *result) {
	if !c.Agent.ServiceDiscovery {
		r.Warn("Service discovery is not enabled on the broker this cluster joined; skipped")
		return
	}
	if ip := checkDNSService(ctx, c, r); ip != "" {
		checkCorefile(ctx, c, r, ip)
	}
	checkExports(ctx, c, r)
}

// checkDNSService returns dnsd's ClusterIP, or "" with a ✗ line.
func checkDNSService(ctx context.Context, c *cluster, r *result) string {
	svc, err := c.Kube.CoreV1().Services(c.Namespace).Get(ctx, broker.DNSService, metav1.GetOptions{})
	if err != nil {
		r.Fail("Cannot read dnsd's Service %s/%s: %v: %s", c.Namespace, broker.DNSService, err, rejoin)
		return ""
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == "None" {
		r.Fail("dnsd's Service %s/%s has no ClusterIP for CoreDNS to forward to: delete it and %s", c.Namespace, broker.DNSService, rejoin)
		return ""
	}
	r.Success("dnsd's Service %s/%s is at %s", c.Namespace, broker.DNSService, svc.Spec.ClusterIP)
	return svc.Spec.ClusterIP
}

// checkCorefile checks that the cluster's CoreDNS forwards the clusterset
// zones to dnsd at ip, as join wrote it.
func checkCorefile(ctx context.Context, c *cluster, r *result, ip string) {
	zones := strings.Join(c.Agent.DNSZones(), ", ")
	cm, err := c.Kube.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, broker.CoreDNSConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		stanza, _ := deploy.CoreDNSStanza(ip, c.Agent.CustomDomains...)
		r.Warn("No ConfigMap %s/%s: make the cluster's DNS forward %s to %s, e.g. with this Corefile section:\n%s",
			metav1.NamespaceSystem, broker.CoreDNSConfigMap, zones, ip, strings.TrimSpace(stanza))
		return
	}
	if err != nil {
		r.Fail("Cannot read the CoreDNS ConfigMap %s/%s: %v", metav1.NamespaceSystem, broker.CoreDNSConfigMap, err)
		return
	}
	corefile := cm.Data[corefileKey]
	want, err := deploy.AddCoreDNSStanza(corefile, ip, c.Agent.CustomDomains...)
	if err != nil {
		r.Fail("Cannot tell the clusterset section of CoreDNS's Corefile: %v", err)
		return
	}
	if want != corefile {
		r.Fail("CoreDNS (%s/%s) does not forward %s to dnsd at %s: %s, or put this section at the top of its Corefile:\n%s",
			metav1.NamespaceSystem, broker.CoreDNSConfigMap, zones, ip, rejoin, strings.TrimSpace(strings.TrimSuffix(want, deploy.RemoveCoreDNSStanza(corefile))))
		return
	}
	r.Success("CoreDNS (%s/%s) forwards %s to dnsd at %s", metav1.NamespaceSystem, broker.CoreDNSConfigMap, zones, ip)
}

// checkExports checks that every ServiceExport has been imported back
// into this cluster and is in conflict with no other cluster's.
func checkExports(ctx context.Context, c *cluster, r *result) {
	exports, err := c.mcs.MulticlusterV1alpha1().ServiceExports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Fail("Cannot list the ServiceExports: %v", err)
		return
	}
	bad := 0
	for i := range exports.Items {
		se := &exports.Items[i]
		name := se.Namespace + "/" + se.Name
		for _, cond := range []struct {
			typ  mcsv1a1.ServiceExportConditionType
			want metav1.ConditionStatus
		}{{mcsv1a1.ServiceExportConditionValid, metav1.ConditionTrue}, {mcsv1a1.ServiceExportConditionReady, metav1.ConditionTrue}, {mcsv1a1.ServiceExportConditionConflict, metav1.ConditionFalse}} {
			got := meta.FindStatusCondition(se.Status.Conditions, string(cond.typ))
			if got != nil && got.Status != cond.want {
				bad++
				r.Fail("ServiceExport %s is %s=%s (%s): %s", name, cond.typ, got.Status, got.Reason, exportFix(cond.typ, got.Reason, got.Message))
			}
		}
		if v := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1a1.ServiceExportConditionValid)); v != nil && v.Reason == servicesync.ReasonClustersetIPUnavailable {
			r.Warn("ServiceExport %s: %s", name, v.Message)
		}
		si, err := c.mcs.MulticlusterV1alpha1().ServiceImports(se.Namespace).Get(ctx, se.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			bad++
			r.Fail("ServiceExport %s has no ServiceImport: the active gateway's agent exports it through the broker; see `snorkel diagnose connections` and the agent's log", name)
		case err != nil:
			bad++
			r.Fail("Cannot read the ServiceImport %s: %v", name, err)
		case len(si.Spec.IPs) > 0:
			r.detail("ServiceExport %s is imported with clusterset IP %s (allocated by cluster %s)", name, si.Spec.IPs[0], si.Annotations[api.ClustersetIPAllocatedByAnnotation])
		default:
			r.detail("ServiceExport %s is imported", name)
		}
	}
	if bad == 0 {
		r.Success("All %d exported services are imported, with no conflict", len(exports.Items))
	}
}

func exportFix(typ mcsv1a1.ServiceExportConditionType, reason, msg string) string {
	if typ == mcsv1a1.ServiceExportConditionConflict && strings.Contains(reason, servicesync.ReasonClustersetIPConflict) {
		return msg + "; give the service the same clusterset IP setting in every cluster that exports it (snorkel export service NAME --use-clusterset-ip[=false] sets " + api.UseClustersetIPAnnotation + ")"
	}
	if typ == mcsv1a1.ServiceExportConditionConflict {
		return msg + "; make the service's type and ports the same in every cluster that exports it"
	}
	return msg
}
