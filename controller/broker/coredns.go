package broker

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/deploy"
)

// The cluster DNS configuration DeployMember edits, as Submariner's
// operator does: the Corefile of kube-system/coredns, where
// deploy.AddCoreDNSStanza puts the section that forwards clusterset.local
// to dnsd.
const (
	CoreDNSConfigMap = "coredns"
	corefileKey      = "Corefile"
)

// ClustersetZone is the zone CoreDNS forwards to dnsd.
const ClustersetZone = api.ClustersetDomain

// CoreDNSResult is what configureCoreDNS did.
type CoreDNSResult int

// The outcomes of configuring the cluster's CoreDNS.
const (
	// CoreDNSUpdated: the Corefile now forwards clusterset.local to dnsd.
	CoreDNSUpdated CoreDNSResult = iota
	// CoreDNSUnchanged: it already did.
	CoreDNSUnchanged
	// CoreDNSNotFound: the cluster has no kube-system/coredns ConfigMap;
	// its DNS must be told by hand (MemberDeployment.Stanza).
	CoreDNSNotFound
)

// configureCoreDNS makes the cluster's CoreDNS forward clusterset.local
// and customDomains to dnsIP.
func configureCoreDNS(ctx context.Context, kc kubernetes.Interface, dnsIP string, customDomains []string) (CoreDNSResult, error) {
	cms := kc.CoreV1().ConfigMaps(metav1.NamespaceSystem)
	result := CoreDNSUnchanged
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		cm, err := cms.Get(ctx, CoreDNSConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			result = CoreDNSNotFound
			return nil
		}
		if err != nil {
			return err
		}
		corefile, ok := cm.Data[corefileKey]
		if !ok {
			return fmt.Errorf("it has no %q key; add the clusterset.local section to the cluster's DNS configuration by hand", corefileKey)
		}
		want, err := deploy.AddCoreDNSStanza(corefile, dnsIP, customDomains...)
		if err != nil {
			return err
		}
		if want == corefile {
			result = CoreDNSUnchanged
			return nil
		}
		cm.Data[corefileKey] = want
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: deploy.FieldManager})
		result = CoreDNSUpdated
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("the CoreDNS ConfigMap %s/%s: %w", metav1.NamespaceSystem, CoreDNSConfigMap, err)
	}
	return result, nil
}

// customCoreDNSKey is the key of a custom CoreDNS ConfigMap that holds the
// forwards to dnsd, as Submariner's operator names it: CoreDNS imports the
// keys ending in .server as server blocks.
const customCoreDNSKey = "lighthouse.server"

// configureCustomCoreDNS writes the forwards of clusterset.local and
// customDomains to dnsIP into the custom ConfigMap ref (NAMESPACE/NAME),
// which it creates if missing, and leaves the Corefile alone.
func configureCustomCoreDNS(ctx context.Context, kc kubernetes.Interface, ref, dnsIP string, customDomains []string) (CoreDNSResult, error) {
	ns, name, _ := strings.Cut(ref, "/")
	stanza, err := deploy.CoreDNSStanza(dnsIP, customDomains...)
	if err != nil {
		return 0, err
	}
	cms := kc.CoreV1().ConfigMaps(ns)
	result := CoreDNSUnchanged
	err = retry.RetryOnConflict(conflictBackoff, func() error {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			result = CoreDNSUpdated
			_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{customCoreDNSKey: stanza}},
				metav1.CreateOptions{FieldManager: deploy.FieldManager})
			return err
		}
		if err != nil {
			return err
		}
		if cm.Data[customCoreDNSKey] == stanza {
			result = CoreDNSUnchanged
			return nil
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[customCoreDNSKey] = stanza
		result = CoreDNSUpdated
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: deploy.FieldManager})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("the custom CoreDNS ConfigMap %s (--coredns-custom-configmap): %w", ref, err)
	}
	return result, nil
}

// removeCustomCoreDNS takes the forwards out of the custom ConfigMap ref;
// false if there was nothing to take.
func removeCustomCoreDNS(ctx context.Context, kc kubernetes.Interface, ref string) (bool, error) {
	ns, name, _ := strings.Cut(ref, "/")
	cms := kc.CoreV1().ConfigMaps(ns)
	removed := false
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, ok := cm.Data[customCoreDNSKey]; !ok {
			return nil
		}
		delete(cm.Data, customCoreDNSKey)
		removed = true
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: deploy.FieldManager})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("the custom CoreDNS ConfigMap %s: %w", ref, err)
	}
	return removed, nil
}
