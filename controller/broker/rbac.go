package broker

import (
	"context"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1apply "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/deploy"
)

// Names of what Deploy creates in the broker namespace.
const (
	// DefaultBrokerNamespace is Submariner's broker namespace.
	DefaultBrokerNamespace = "submariner-k8s-broker"
	// BrokerClientServiceAccount is the ServiceAccount whose token
	// broker-info.subm carries; its Role is BrokerClientServiceAccount too.
	BrokerClientServiceAccount = "submariner-k8s-broker-client"
)

// Names of what Join installs into a member cluster.
const (
	// AgentNamespace is where the agent runs, Submariner's operator
	// namespace.
	AgentNamespace = "submariner-operator"
	// AgentServiceAccount is the agent's ServiceAccount; its ClusterRole,
	// Role and bindings have the same name.
	AgentServiceAccount = "snorkel-agent"
	// AgentSecretName is the Secret in AgentNamespace holding AgentConfig.
	AgentSecretName = "snorkel-agent"
)

var (
	readVerbs  = []string{"get", "list", "watch"}
	writeVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}
)

func rule(group string, resources []string, verbs []string) *rbacv1apply.PolicyRuleApplyConfiguration {
	return rbacv1apply.PolicyRule().WithAPIGroups(group).WithResources(resources...).WithVerbs(verbs...)
}

// brokerClientRules are what member agents need in the broker namespace,
// and nothing more: the clusterset's shared objects, and the Globalnet
// ConfigMap by name.
func brokerClientRules() []*rbacv1apply.PolicyRuleApplyConfiguration {
	return []*rbacv1apply.PolicyRuleApplyConfiguration{
		rule(submv1.Group, []string{submv1.ClusterResource.Resource, submv1.EndpointResource.Resource}, writeVerbs),
		rule(mcsv1a1.GroupName, []string{"serviceimports"}, writeVerbs),
		rule(discoveryv1.GroupName, []string{"endpointslices"}, writeVerbs),
		rule("", []string{"configmaps"}, []string{"get", "update"}).WithResourceNames(GlobalnetConfigMapName),
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

// agentNamespaceRules are what the agent needs in AgentNamespace: leader
// election, its cluster's gateway objects, and its own Secret.
func agentNamespaceRules() []*rbacv1apply.PolicyRuleApplyConfiguration {
	return []*rbacv1apply.PolicyRuleApplyConfiguration{
		rule("coordination.k8s.io", []string{"leases"}, writeVerbs),
		rule(submv1.Group, []string{submv1.EndpointResource.Resource, submv1.GatewayResource.Resource, submv1.ClusterResource.Resource}, writeVerbs),
		rule(submv1.Group, []string{submv1.GatewayResource.Resource + "/status"}, []string{"get", "update", "patch"}),
		rule("", []string{"secrets"}, readVerbs).WithResourceNames(AgentSecretName),
	}
}

var applyOpts = metav1.ApplyOptions{FieldManager: deploy.FieldManager, Force: true}

// applyNamespace creates the namespace if it is missing.
func applyNamespace(ctx context.Context, kc kubernetes.Interface, name string) error {
	if _, err := kc.CoreV1().Namespaces().Apply(ctx, corev1apply.Namespace(name), applyOpts); err != nil {
		return fmt.Errorf("applying namespace %s: %w", name, err)
	}
	return nil
}

// applyNamespacedAccess applies a ServiceAccount, a Role with rules in the
// same namespace, and the RoleBinding between them, all named name.
func applyNamespacedAccess(ctx context.Context, kc kubernetes.Interface, ns, name string, rules []*rbacv1apply.PolicyRuleApplyConfiguration) error {
	if _, err := kc.CoreV1().ServiceAccounts(ns).Apply(ctx, corev1apply.ServiceAccount(name, ns), applyOpts); err != nil {
		return fmt.Errorf("applying ServiceAccount %s/%s: %w", ns, name, err)
	}
	if _, err := kc.RbacV1().Roles(ns).Apply(ctx, rbacv1apply.Role(name, ns).WithRules(rules...), applyOpts); err != nil {
		return fmt.Errorf("applying Role %s/%s: %w", ns, name, err)
	}
	rb := rbacv1apply.RoleBinding(name, ns).
		WithRoleRef(rbacv1apply.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("Role").WithName(name)).
		WithSubjects(rbacv1apply.Subject().WithKind("ServiceAccount").WithName(name).WithNamespace(ns))
	if _, err := kc.RbacV1().RoleBindings(ns).Apply(ctx, rb, applyOpts); err != nil {
		return fmt.Errorf("applying RoleBinding %s/%s: %w", ns, name, err)
	}
	return nil
}

// applyClusterAccess applies a ClusterRole with rules, named name, bound to
// the ServiceAccount ns/name.
func applyClusterAccess(ctx context.Context, kc kubernetes.Interface, ns, name string, rules []*rbacv1apply.PolicyRuleApplyConfiguration) error {
	if _, err := kc.RbacV1().ClusterRoles().Apply(ctx, rbacv1apply.ClusterRole(name).WithRules(rules...), applyOpts); err != nil {
		return fmt.Errorf("applying ClusterRole %s: %w", name, err)
	}
	crb := rbacv1apply.ClusterRoleBinding(name).
		WithRoleRef(rbacv1apply.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(name)).
		WithSubjects(rbacv1apply.Subject().WithKind("ServiceAccount").WithName(name).WithNamespace(ns))
	if _, err := kc.RbacV1().ClusterRoleBindings().Apply(ctx, crb, applyOpts); err != nil {
		return fmt.Errorf("applying ClusterRoleBinding %s: %w", name, err)
	}
	return nil
}
