package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Node role labels, by which join tells workers from the control plane as
// subctl does.
const (
	workerRoleLabel       = "node-role.kubernetes.io/worker"
	masterRoleLabel       = "node-role.kubernetes.io/master"
	controlPlaneRoleLabel = "node-role.kubernetes.io/control-plane"
)

// gatewayNodes returns the names of the nodes labelled GatewayLabel=true,
// sorted.
func gatewayNodes(ctx context.Context, kc kubernetes.Interface) ([]string, error) {
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: GatewayLabel + "=true"})
	if err != nil {
		return nil, fmt.Errorf("listing the gateway nodes: %w", err)
	}
	return nodeNames(nodes.Items), nil
}

// labelGatewayNode labels a worker node GatewayLabel=true when no node is
// labelled yet, as `subctl join --label-gateway` does without asking: the
// first by name of the nodes labelled as workers, else of those not
// labelled as the control plane (kind labels no workers). It returns the
// node it labelled, or "" when a gateway node exists or no worker does.
func labelGatewayNode(ctx context.Context, kc kubernetes.Interface) (string, error) {
	have, err := gatewayNodes(ctx, kc)
	if err != nil || len(have) > 0 {
		return "", err
	}
	workers, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: workerRoleLabel})
	if err != nil {
		return "", fmt.Errorf("listing the worker nodes: %w", err)
	}
	if len(workers.Items) == 0 {
		workers, err = kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "!" + masterRoleLabel + ",!" + controlPlaneRoleLabel})
		if err != nil {
			return "", fmt.Errorf("listing the worker nodes: %w", err)
		}
	}
	names := nodeNames(workers.Items)
	if len(names) == 0 {
		return "", nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{GatewayLabel: "true"}}})
	if err != nil {
		return "", err
	}
	if _, err := kc.CoreV1().Nodes().Patch(ctx, names[0], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return "", fmt.Errorf("labelling node %s as the gateway (%s=true): %w; label a node yourself, or join with --label-gateway=false", names[0], GatewayLabel, err)
	}
	return names[0], nil
}

func nodeNames(nodes []corev1.Node) []string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	slices.Sort(names)
	return names
}
