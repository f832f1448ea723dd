package servicesync

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/snorkel-net/snorkel/controller/api"
)

// cliTimeout bounds one command's requests.
const cliTimeout = 30 * time.Second

// serviceTarget is what export and unexport act on: a service and the
// clients of the cluster it lives in.
type serviceTarget struct {
	namespace, name string
	kc              kubernetes.Interface
	mcs             mcsclient.Interface
}

// ServiceCommand is what `snorkel export` and `snorkel unexport` act on:
// a service, and the kubeconfig context of the cluster it lives in.
type ServiceCommand struct {
	Name string
	// Namespace is the service's; empty means the context's namespace,
	// else "default".
	Namespace string
	// Kubeconfig and Context name the cluster; empty means $KUBECONFIG or
	// ~/.kube/config and its current context.
	Kubeconfig, Context string
	// UseClustersetIP, "true" or "false", sets the ServiceExport's
	// annotation api.UseClustersetIPAnnotation (export only); empty
	// leaves the cluster's default.
	UseClustersetIP string
}

// connect connects to the kubeconfig context of c.
func connect(c ServiceCommand) (*serviceTarget, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.Kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.Context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kubeconfigWhere(c.Kubeconfig, c.Context), err)
	}
	ns := c.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = metav1.NamespaceDefault
		}
	}
	t := &serviceTarget{namespace: ns, name: c.Name}
	if t.kc, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if t.mcs, err = mcsclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return t, nil
}

// kubeconfigWhere names the kubeconfig flags a user gave, for errors.
func kubeconfigWhere(path, kubeContext string) string {
	var parts []string
	if path != "" {
		parts = append(parts, "--kubeconfig "+path)
	}
	if kubeContext != "" {
		parts = append(parts, "--context "+kubeContext)
	}
	if len(parts) == 0 {
		return "the kubeconfig's current context"
	}
	return strings.Join(parts, " ")
}

// RunExport is `snorkel export service NAME`: it creates the ServiceExport
// of an existing ClusterIP service (headless or not), like subctl export.
// Exporting twice is not an error.
func RunExport(c ServiceCommand, out io.Writer) error {
	t, err := connect(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	svc, err := t.kc.CoreV1().Services(t.namespace).Get(ctx, t.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("service %s/%s not found: create it first, or give its namespace with -n and its cluster with --context", t.namespace, t.name)
	}
	if err != nil {
		return fmt.Errorf("reading service %s/%s: %w", t.namespace, t.name, err)
	}
	if _, ok := importType(svc); !ok {
		return fmt.Errorf("service %s/%s has type %s: only ClusterIP services, headless or not, can be exported", t.namespace, t.name, svc.Spec.Type)
	}
	se := &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: t.name, Namespace: t.namespace}}
	if c.UseClustersetIP != "" {
		se.Annotations = map[string]string{api.UseClustersetIPAnnotation: c.UseClustersetIP}
	}
	_, err = t.mcs.MulticlusterV1alpha1().ServiceExports(t.namespace).Create(ctx, se, metav1.CreateOptions{FieldManager: "snorkel"})
	switch {
	case apierrors.IsAlreadyExists(err) && c.UseClustersetIP != "":
		return setUseClustersetIP(ctx, t, c.UseClustersetIP, out)
	case apierrors.IsAlreadyExists(err):
		fmt.Fprintf(out, "Service %s/%s is already exported.\n", t.namespace, t.name)
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("this cluster does not serve ServiceExports (%v): is it joined to a broker? snorkel join installs the Multi-Cluster Services API", err)
	case err != nil:
		return fmt.Errorf("creating ServiceExport %s/%s: %w", t.namespace, t.name, err)
	}
	kind := "ClusterIP"
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		kind = "headless"
	}
	fmt.Fprintf(out, "Service %s/%s (%s) exported. The clusterset reaches it as %s.%s.svc.clusterset.local;\n"+
		"its ServiceExport's conditions report the export: kubectl get serviceexport -n %s %s -o yaml\n",
		t.namespace, t.name, kind, t.name, t.namespace, t.namespace, t.name)
	if c.UseClustersetIP == "true" {
		fmt.Fprintf(out, "The name resolves to a clusterset IP once the agent has allocated one: kubectl get serviceimport -n %s %s -o jsonpath='{.spec.ips}'\n", t.namespace, t.name)
	}
	return nil
}

// setUseClustersetIP sets the clusterset IP annotation of an existing
// ServiceExport.
func setUseClustersetIP(ctx context.Context, t *serviceTarget, use string, out io.Writer) error {
	c := t.mcs.MulticlusterV1alpha1().ServiceExports(t.namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		se, err := c.Get(ctx, t.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if se.Annotations[api.UseClustersetIPAnnotation] == use {
			return nil
		}
		if se.Annotations == nil {
			se.Annotations = map[string]string{}
		}
		se.Annotations[api.UseClustersetIPAnnotation] = use
		_, err = c.Update(ctx, se, metav1.UpdateOptions{FieldManager: "snorkel"})
		return err
	})
	if err != nil {
		return fmt.Errorf("setting %s on ServiceExport %s/%s: %w", api.UseClustersetIPAnnotation, t.namespace, t.name, err)
	}
	fmt.Fprintf(out, "Service %s/%s is already exported; its clusterset IP setting is now %s=%s.\n", t.namespace, t.name, api.UseClustersetIPAnnotation, use)
	return nil
}

// RunUnexport is `snorkel unexport service NAME`: it deletes the
// ServiceExport; the agents then withdraw the service from every cluster.
func RunUnexport(c ServiceCommand, out io.Writer) error {
	t, err := connect(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	err = t.mcs.MulticlusterV1alpha1().ServiceExports(t.namespace).Delete(ctx, t.name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("service %s/%s is not exported (there is no ServiceExport %s/%s); check -n and --context", t.namespace, t.name, t.namespace, t.name)
	}
	if err != nil {
		return fmt.Errorf("deleting ServiceExport %s/%s: %w", t.namespace, t.name, err)
	}
	fmt.Fprintf(out, "Service %s/%s unexported.\n", t.namespace, t.name)
	return nil
}
