package show

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/snorkel-net/snorkel/controller/api"
)

// brokerRow is a broker the cluster hosts or has joined.
type brokerRow struct {
	namespace, url string
	components     []string
	globalnet      bool
	// cidrRange and clusterSize are the Globalnet settings; empty when
	// Globalnet is off or they could not be read.
	cidrRange, clusterSize string
}

// showBrokers is `snorkel show brokers`: the brokers this cluster hosts
// (a namespace holding the Globalnet ConfigMap, which `snorkel
// deploy-broker` creates) and the one it joined (from the agent
// configuration, with the Globalnet settings read from that broker).
func showBrokers(ctx context.Context, c *cluster) *result {
	r := &result{}
	rows, err := hostedBrokers(ctx, c)
	if err != nil {
		r.Fail("error retrieving brokers: %v", err)
		return r
	}
	if c.Agent != nil {
		j := joinedBroker(ctx, c.Agent, r)
		if !slices.ContainsFunc(rows, func(h brokerRow) bool { return h.namespace == j.namespace && sameURL(h.url, j.url) }) {
			rows = append(rows, j)
		}
	}
	r.shown = true
	if len(rows) == 0 {
		r.Success("no brokers found")
		return r
	}
	t := &table{columns: []column{
		{"NAMESPACE", 24}, {"URL", 0}, {"COMPONENTS", 0}, {"GLOBALNET", 0}, {"GLOBALNET CIDR", 0}, {"DEFAULT GLOBALNET SIZE", 0},
	}}
	for _, b := range rows {
		t.add(b.namespace, b.url, b.components, b.globalnet, b.cidrRange, b.clusterSize)
	}
	r.body = t.write
	return r
}

func sameURL(a, b string) bool { return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/") }

// hostedBrokers are the broker namespaces of this cluster, found by their
// Globalnet ConfigMap. A user who may not list ConfigMaps cluster-wide is
// asked about the default broker namespace only.
func hostedBrokers(ctx context.Context, c *cluster) ([]brokerRow, error) {
	cms := c.Kube.CoreV1().ConfigMaps(metav1.NamespaceAll)
	list, err := cms.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", api.GlobalnetConfigMapName).String()})
	if apierrors.IsForbidden(err) {
		list = &corev1.ConfigMapList{}
		cm, err := c.Kube.CoreV1().ConfigMaps(api.DefaultBrokerNamespace).Get(ctx, api.GlobalnetConfigMapName, metav1.GetOptions{})
		switch {
		case err == nil:
			list.Items = append(list.Items, *cm)
		case !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err):
			return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", api.DefaultBrokerNamespace, api.GlobalnetConfigMapName, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("listing the ConfigMaps named %s: %w", api.GlobalnetConfigMapName, err)
	}
	var rows []brokerRow
	for i := range list.Items {
		cm := &list.Items[i]
		b := brokerRow{
			namespace:  cm.Namespace,
			url:        c.Target.Config.Host,
			components: []string{api.ComponentConnectivity, api.ComponentServiceDiscovery},
		}
		b.globalnet, b.cidrRange, b.clusterSize = globalnetSettings(cm)
		rows = append(rows, b.withGlobalnetComponent())
	}
	return rows, nil
}

// joinedBroker is the broker ac joined. Its Globalnet settings come from
// the broker, read with the agent's broker token; if that fails, r says
// why and the row has what the agent configuration tells.
func joinedBroker(ctx context.Context, ac *api.AgentConfig, r *result) brokerRow {
	b := brokerRow{namespace: ac.BrokerNamespace, url: ac.BrokerURL, components: []string{api.ComponentConnectivity}, globalnet: ac.GlobalCIDR != ""}
	if ac.ServiceDiscovery {
		b.components = append(b.components, api.ComponentServiceDiscovery)
	}
	cm, err := readBrokerGlobalnet(ctx, ac)
	if err != nil {
		r.Warn("cannot read the Globalnet settings of the broker at %s (namespace %s) with the agent's broker token: %v", ac.BrokerURL, ac.BrokerNamespace, err)
	} else {
		b.globalnet, b.cidrRange, b.clusterSize = globalnetSettings(cm)
	}
	return b.withGlobalnetComponent()
}

func readBrokerGlobalnet(ctx context.Context, ac *api.AgentConfig) (*corev1.ConfigMap, error) {
	bkc, err := kubernetes.NewForConfig(withTimeout(ac.BrokerConfig()))
	if err != nil {
		return nil, err
	}
	return bkc.CoreV1().ConfigMaps(ac.BrokerNamespace).Get(ctx, api.GlobalnetConfigMapName, metav1.GetOptions{})
}

// withGlobalnetComponent lists globalnet among the components when it is
// on, in the sorted order broker-info.subm lists them.
func (b brokerRow) withGlobalnetComponent() brokerRow {
	if b.globalnet && !slices.Contains(b.components, api.ComponentGlobalnet) {
		b.components = append(b.components, api.ComponentGlobalnet)
	}
	slices.Sort(b.components)
	return b
}

// globalnetSettings reads the Globalnet ConfigMap as it is, for display:
// the range without its JSON quotes.
func globalnetSettings(cm *corev1.ConfigMap) (enabled bool, cidrRange, clusterSize string) {
	enabled, _ = strconv.ParseBool(strings.TrimSpace(cm.Data[api.GlobalnetEnabledKey]))
	if !enabled {
		return false, "", ""
	}
	cidrRange = strings.TrimSpace(cm.Data[api.GlobalnetCIDRRangeKey])
	if s, err := strconv.Unquote(cidrRange); err == nil {
		cidrRange = s
	}
	return true, cidrRange, strings.TrimSpace(cm.Data[api.GlobalnetClusterSizeKey])
}
