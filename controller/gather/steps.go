package gather

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/internal/statusline"
)

// A step gathers one type of one module into the cluster's directory and
// notes what it found on s. A module without a type (the broker has no
// pods) has no step for it.
type step func(context.Context, *cluster, *statusline.Section)

var steps = map[string]map[string]step{
	Connectivity: {
		Logs: func(ctx context.Context, c *cluster, s *statusline.Section) {
			c.logs(ctx, s, agentComponent)
			c.logs(ctx, s, routeAgentComponent)
		},
		Resources: connectivityResources,
		Status:    func(ctx context.Context, c *cluster, s *statusline.Section) { c.listeners(ctx, s, agentComponent) },
	},
	ServiceDiscovery: {
		Logs:      func(ctx context.Context, c *cluster, s *statusline.Section) { c.logs(ctx, s, dnsdComponent) },
		Resources: discoveryResources,
		Status:    func(ctx context.Context, c *cluster, s *statusline.Section) { c.listeners(ctx, s, dnsdComponent) },
	},
	Broker:   {Resources: brokerResources},
	Operator: {Resources: operatorResources},
}

func connectivityResources(ctx context.Context, c *cluster, s *statusline.Section) {
	for _, r := range []struct {
		gvr schema.GroupVersionResource
		ns  string
	}{
		{submv1.GatewayResource, c.Namespace},
		{submv1.EndpointResource, c.Namespace},
		{submv1.ClusterResource, c.Namespace},
		{submv1.ClusterGlobalEgressIPResource, ""},
		{submv1.GlobalEgressIPResource, ""},
		{submv1.GlobalIngressIPResource, ""},
	} {
		c.objects(ctx, s, c.Dynamic, r.gvr, r.ns, metav1.ListOptions{})
	}
}

func discoveryResources(ctx context.Context, c *cluster, s *statusline.Section) {
	c.objects(ctx, s, c.Dynamic, serviceExports, "", metav1.ListOptions{})
	c.objects(ctx, s, c.Dynamic, serviceImports, "", metav1.ListOptions{})
	c.objects(ctx, s, c.Dynamic, endpointSlices, "", lighthouseSlices)
	// The cluster's CoreDNS forwards clusterset.local to dnsd.
	c.objects(ctx, s, c.Dynamic, configMaps, metav1.NamespaceSystem, byName("coredns"))
}

func operatorResources(ctx context.Context, c *cluster, s *statusline.Section) {
	for _, gvr := range []schema.GroupVersionResource{daemonSets, deployments, pods, secrets, configMaps} {
		c.objects(ctx, s, c.Dynamic, gvr, c.Namespace, metav1.ListOptions{})
	}
}

// brokerResources gathers what the broker holds for the clusterset: from
// a broker this cluster hosts, and from the one it joined, read with the
// agent's token as the agent reads it.
func brokerResources(ctx context.Context, c *cluster, s *statusline.Section) {
	hosted, err := c.Kube.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, byName(api.GlobalnetConfigMapName))
	if err != nil {
		s.Warn("Cannot look for the brokers this cluster hosts (ConfigMaps named %s): %v", api.GlobalnetConfigMapName, err)
		hosted = &corev1.ConfigMapList{}
	}
	for _, cm := range hosted.Items {
		s.Success("Found a broker in namespace %q of this cluster", cm.Namespace)
		c.brokerObjects(ctx, s, c.Dynamic, cm.Namespace)
		c.objects(ctx, s, c.Dynamic, configMaps, cm.Namespace, byName(api.GlobalnetConfigMapName))
	}
	if c.Agent == nil {
		if len(hosted.Items) == 0 {
			s.Warn("This cluster hosts no broker and has joined none")
		}
		return
	}
	cfg := c.Agent.BrokerConfig()
	cfg.Timeout = requestTimeout
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		s.Fail("The broker at %s: %v", c.Agent.BrokerURL, err)
		return
	}
	s.Success("Reading the broker at %s that cluster %q joined", c.Agent.BrokerURL, c.Agent.ClusterID)
	c.brokerObjects(ctx, s, dyn, c.Agent.BrokerNamespace)
}

// brokerObjects are what a member may read in a broker namespace, the
// Role join gives it.
func (c *cluster) brokerObjects(ctx context.Context, s *statusline.Section, dyn dynamic.Interface, ns string) {
	for _, gvr := range []schema.GroupVersionResource{submv1.EndpointResource, submv1.ClusterResource, endpointSlices, serviceImports} {
		c.objects(ctx, s, dyn, gvr, ns, metav1.ListOptions{})
	}
}

func byName(name string) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
}
