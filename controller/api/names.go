package api

// Names in the broker cluster.
const (
	// DefaultBrokerNamespace is Submariner's broker namespace.
	DefaultBrokerNamespace = "submariner-k8s-broker"
	// ClusterUIDAnnotation, on a Cluster object in the broker namespace,
	// records the UID of the kube-system namespace of the cluster that
	// joined under that ID: another cluster cannot take the ID, the same
	// one can join again.
	ClusterUIDAnnotation = "snorkel.io/kube-system-uid"
	// ClusterIDLabel labels the broker's objects of one cluster, as
	// Submariner's syncer does.
	ClusterIDLabel = "submariner-io/clusterID"
)

// The Globalnet ConfigMap in the broker namespace, as Submariner keeps it:
// the range is a JSON string, the size a decimal.
const (
	GlobalnetConfigMapName  = "submariner-globalnet-info"
	GlobalnetEnabledKey     = "globalnetEnabled"
	GlobalnetCIDRRangeKey   = "globalnetCidrRange"
	GlobalnetClusterSizeKey = "globalnetClusterSize"
)

// The clusterset IP ConfigMap in the broker namespace, as Submariner's
// operator keeps it: the same format as the Globalnet ConfigMap's, whose
// "clusterinfo" key lists each cluster's clusterset IP CIDR. The range is
// recorded even when the default is off, so that a service can still ask
// for a clusterset IP.
const (
	ClustersetIPConfigMapName  = "submariner-clustersetip-info"
	ClustersetIPEnabledKey     = "clustersetIPEnabled"
	ClustersetIPCIDRRangeKey   = "clustersetIPCidrRange"
	ClustersetIPClusterSizeKey = "clustersetIPClusterSize"
)

// Clusterset IP annotations, Lighthouse's.
const (
	// UseClustersetIPAnnotation, "true" or "false" on a ServiceExport,
	// overrides the cluster's default (join --enable-clusterset-ip); on a
	// ServiceImport it records the setting the service was imported with.
	UseClustersetIPAnnotation = "lighthouse.submariner.io/use-clusterset-ip"
	// ClustersetIPAllocatedByAnnotation names, on a ServiceImport, the
	// cluster whose clusterset IP CIDR the service's VIP came from.
	ClustersetIPAllocatedByAnnotation = "lighthouse.submariner.io/clusterset-ip-allocated-by"
)

// Components a broker can offer, as subctl names them in broker-info.subm.
const (
	ComponentConnectivity     = "connectivity"
	ComponentServiceDiscovery = "service-discovery"
	ComponentGlobalnet        = "globalnet"
)

// Names in a member cluster.
const (
	// AgentNamespace is where the agent runs, Submariner's operator
	// namespace.
	AgentNamespace = "submariner-operator"
	// GatewayLeaseName is the Lease in AgentNamespace by which a
	// cluster's gateway agents elect the active gateway, and which the
	// route agents follow.
	GatewayLeaseName = "snorkel-gateway"
	// AgentServiceAccount is the agent's ServiceAccount; its ClusterRole,
	// Role and bindings have the same name.
	AgentServiceAccount = "snorkel-agent"
	// AgentSecretName is the Secret in AgentNamespace holding AgentConfig.
	AgentSecretName = "snorkel-agent"
)
