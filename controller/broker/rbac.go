package broker

import (
	"encoding/json"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1apply "k8s.io/client-go/applyconfigurations/rbac/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// BrokerClientServiceAccount is the ServiceAccount Deploy creates in the
// broker namespace, whose token broker-info.subm carries; its Role is
// BrokerClientServiceAccount too.
const BrokerClientServiceAccount = "submariner-k8s-broker-client"

// DNSServiceAccount is dnsd's ServiceAccount, which Join installs into a
// member cluster, named like Lighthouse's DNS server's; its ClusterRole,
// Role and bindings have the same name.
const DNSServiceAccount = "submariner-lighthouse-coredns"

// RouteAgentServiceAccount is the route agent's ServiceAccount, which Join
// installs into a member cluster, named like Submariner's route agent's;
// its Role and RoleBinding have the same name.
const RouteAgentServiceAccount = "submariner-routeagent"

var (
	readVerbs  = []string{"get", "list", "watch"}
	writeVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}
)

func rule(group string, resources []string, verbs []string) *rbacv1apply.PolicyRuleApplyConfiguration {
	return rbacv1apply.PolicyRule().WithAPIGroups(group).WithResources(resources...).WithVerbs(verbs...)
}

// brokerClientRules are what member agents need in the broker namespace,
// and nothing more: the clusterset's shared objects, and the Globalnet and
// clusterset IP ConfigMaps by name.
func brokerClientRules() []*rbacv1apply.PolicyRuleApplyConfiguration {
	return []*rbacv1apply.PolicyRuleApplyConfiguration{
		rule(submv1.Group, []string{submv1.ClusterResource.Resource, submv1.EndpointResource.Resource}, writeVerbs),
		rule(mcsv1a1.GroupName, []string{"serviceimports"}, writeVerbs),
		rule(discoveryv1.GroupName, []string{"endpointslices"}, writeVerbs),
		rule("", []string{"configmaps"}, []string{"get", "update"}).WithResourceNames(api.GlobalnetConfigMapName, api.ClustersetIPConfigMapName),
	}
}

// agentClusterRules are what the agent needs across its cluster: read the
// workloads it exports, write the imported services' EndpointSlices and
// ServiceImports and the exports' status, and run Globalnet.
func agentClusterRules() []*rbacv1apply.PolicyRuleApplyConfiguration {
	globalnet := []string{
		submv1.GlobalEgressIPResource.Resource, submv1.ClusterGlobalEgressIPResource.Resource, submv1.GlobalIngressIPResource.Resource,
	}
	var status []string
	for _, r := range globalnet {
		status = append(status, r+"/status")
	}
	return []*rbacv1apply.PolicyRuleApplyConfiguration{
		rule("", []string{"services", "pods", "namespaces", "nodes"}, readVerbs),
		rule(discoveryv1.GroupName, []string{"endpointslices"}, writeVerbs),
		rule(mcsv1a1.GroupName, []string{"serviceimports"}, writeVerbs),
		rule(mcsv1a1.GroupName, []string{"serviceexports"}, readVerbs),
		rule(mcsv1a1.GroupName, []string{"serviceexports/status", "serviceimports/status"}, []string{"get", "update", "patch"}),
		rule(submv1.Group, globalnet, writeVerbs),
		rule(submv1.Group, status, []string{"get", "update", "patch"}),
	}
}

// agentNamespaceRules are what the agent needs in api.AgentNamespace: leader
// election, its cluster's gateway objects, and its own Secret.
func agentNamespaceRules() []*rbacv1apply.PolicyRuleApplyConfiguration {
	return []*rbacv1apply.PolicyRuleApplyConfiguration{
		rule("coordination.k8s.io", []string{"leases"}, writeVerbs),
		rule(submv1.Group, []string{submv1.EndpointResource.Resource, submv1.GatewayResource.Resource, submv1.ClusterResource.Resource}, writeVerbs),
		rule(submv1.Group, []string{submv1.GatewayResource.Resource + "/status"}, []string{"get", "update", "patch"}),
		rule("", []string{"secrets"}, readVerbs).WithResourceNames(api.AgentSecretName),
	}
}

// dnsdClusterRules are what dnsd reads across its cluster: the imported
// services and their endpoints.
func dnsdClusterRules() []*rbacv1apply.PolicyRuleApplyConfiguration {
	return []*rbacv1apply.PolicyRuleApplyConfiguration{
		rule(mcsv1a1.GroupName, []string{"serviceimports"}, readVerbs),
		rule(discoveryv1.GroupName, []string{"endpointslices"}, readVerbs),
	}
}

// dnsdNamespaceRules are what dnsd reads in api.AgentNamespace: the gateways'
// connection status. It takes its cluster ID as a flag, filled from the
// agent Secret by the kubelet, so it may not read that Secret, which holds
// the broker token and the IPsec key.
func dnsdNamespaceRules() []*rbacv1apply.PolicyRuleApplyConfiguration {
	return []*rbacv1apply.PolicyRuleApplyConfiguration{
		rule(submv1.Group, []string{submv1.GatewayResource.Resource}, readVerbs),
	}
}

// routeAgentNamespaceRules are what the route agent reads in
// api.AgentNamespace: the Gateways, whose status names the active gateway
// node and the remote clusters' CIDRs, and the gateways' Lease, whose
// holder is the active gateway the moment it takes over. It needs nothing
// else: it runs on every node, so it may not read the agent Secret.
func routeAgentNamespaceRules() []*rbacv1apply.PolicyRuleApplyConfiguration {
	return []*rbacv1apply.PolicyRuleApplyConfiguration{
		rule(submv1.Group, []string{submv1.GatewayResource.Resource}, readVerbs),
		rule("coordination.k8s.io", []string{"leases"}, readVerbs),
	}
}

// partOfLabel marks every object Snorkel installs.
var partOfLabel = map[string]string{"app.kubernetes.io/part-of": "snorkel"}

// podSecurityLabel lets api.AgentNamespace run the agent, which needs the host
// network, host paths and NET_ADMIN: the Pod Security "privileged" level.
var podSecurityLabel = map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}

// access is a ServiceAccount and what it may do: a Role in its own
// namespace and a ClusterRole, each named like the ServiceAccount and bound
// to it; a kind of rules left empty gets no role.
type access struct {
	namespace, name string
	namespaceRules  []*rbacv1apply.PolicyRuleApplyConfiguration
	clusterRules    []*rbacv1apply.PolicyRuleApplyConfiguration
}

// objects are a's ServiceAccount, roles and bindings.
func (a access) objects() []any {
	subject := rbacv1apply.Subject().WithKind("ServiceAccount").WithName(a.name).WithNamespace(a.namespace)
	roleRef := func(kind string) *rbacv1apply.RoleRefApplyConfiguration {
		return rbacv1apply.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind(kind).WithName(a.name)
	}
	out := []any{corev1apply.ServiceAccount(a.name, a.namespace).WithLabels(partOfLabel)}
	if len(a.namespaceRules) > 0 {
		out = append(out,
			rbacv1apply.Role(a.name, a.namespace).WithLabels(partOfLabel).WithRules(a.namespaceRules...),
			rbacv1apply.RoleBinding(a.name, a.namespace).WithLabels(partOfLabel).WithRoleRef(roleRef("Role")).WithSubjects(subject))
	}
	if len(a.clusterRules) > 0 {
		out = append(out,
			rbacv1apply.ClusterRole(a.name).WithLabels(partOfLabel).WithRules(a.clusterRules...),
			rbacv1apply.ClusterRoleBinding(a.name).WithLabels(partOfLabel).WithRoleRef(roleRef("ClusterRole")).WithSubjects(subject))
	}
	return out
}

// brokerAccessObjects are what Deploy applies to the broker besides the
// CRDs: the broker namespace ns and its client's access.
func brokerAccessObjects(ns string) []any {
	objs := []any{corev1apply.Namespace(ns).WithLabels(partOfLabel)}
	return append(objs, access{namespace: ns, name: BrokerClientServiceAccount, namespaceRules: brokerClientRules()}.objects()...)
}

// agentAccessObjects are api.AgentNamespace and the agent's access, what Join
// applies to a member besides the CRDs and the agent Secret.
func agentAccessObjects() []any {
	objs := []any{corev1apply.Namespace(api.AgentNamespace).WithLabels(partOfLabel).WithLabels(podSecurityLabel)}
	return append(objs, access{
		namespace: api.AgentNamespace, name: api.AgentServiceAccount,
		namespaceRules: agentNamespaceRules(), clusterRules: agentClusterRules(),
	}.objects()...)
}

// dnsdAccessObjects are dnsd's access, which Join applies with the agent's.
func dnsdAccessObjects() []any {
	return access{
		namespace: api.AgentNamespace, name: DNSServiceAccount,
		namespaceRules: dnsdNamespaceRules(), clusterRules: dnsdClusterRules(),
	}.objects()
}

// routeAgentAccessObjects are the route agent's access, which Join applies
// with the agent's.
func routeAgentAccessObjects() []any {
	return access{namespace: api.AgentNamespace, name: RouteAgentServiceAccount, namespaceRules: routeAgentNamespaceRules()}.objects()
}

// memberAccessObjects are everything Join applies to a member besides the
// CRDs and the agent Secret, in the member manifests' order.
func memberAccessObjects() []any {
	objs := agentAccessObjects()
	objs = append(objs, routeAgentAccessObjects()...)
	return append(objs, dnsdAccessObjects()...)
}

// unstructuredObjects turns apply configurations into objects
// deploy.Apply takes.
func unstructuredObjects(objs []any) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		out[i] = &unstructured.Unstructured{}
		if err := out[i].UnmarshalJSON(b); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// accessKinds are the kinds Deploy and Join apply from the definitions
// above; the manifests hold the same objects, written from them, for
// `kubectl apply -k`.
var accessKinds = map[string]bool{
	"Namespace": true, "ServiceAccount": true, "Role": true, "RoleBinding": true, "ClusterRole": true, "ClusterRoleBinding": true,
}
