package servicesync

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// One-line usages of the commands, for the snorkel command list.
const (
	ExportUsage   = "export a service to the clusterset: snorkel export service NAME [-n NAMESPACE] [--kubeconfig F] [--context C]"
	UnexportUsage = "stop exporting a service: snorkel unexport service NAME [-n NAMESPACE] [--kubeconfig F] [--context C]"
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

// parseServiceArgs reads "service NAME" and the flags, in any order, and
// connects to the kubeconfig context. The namespace defaults to the
// context's, else "default".
func parseServiceArgs(verb string, args []string, out io.Writer) (*serviceTarget, error) {
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: snorkel %s service NAME [flags]\n\nflags:\n", verb)
		fs.PrintDefaults()
	}
	var ns string
	fs.StringVar(&ns, "n", "", "the service's namespace (default: the context's namespace, else default)")
	fs.StringVar(&ns, "namespace", "", "same as -n")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	kubeContext := fs.String("context", "", "kubeconfig context of the cluster the service is in (default: the current context)")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	switch {
	case len(pos) == 0 || pos[0] != "service":
		fs.Usage()
		return nil, fmt.Errorf("name what to %s: snorkel %s service NAME", verb, verb)
	case len(pos) != 2:
		return nil, fmt.Errorf("give one service name after %q, got %d: snorkel %s service NAME -n NAMESPACE", "service", len(pos)-1, verb)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *kubeContext})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kubeconfigWhere(*kubeconfig, *kubeContext), err)
	}
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = metav1.NamespaceDefault
		}
	}
	t := &serviceTarget{namespace: ns, name: pos[1]}
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
func RunExport(args []string, out io.Writer) error {
	t, err := parseServiceArgs("export", args, out)
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
	_, err = t.mcs.MulticlusterV1alpha1().ServiceExports(t.namespace).Create(ctx, se, metav1.CreateOptions{FieldManager: "snorkel"})
	switch {
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
	return nil
}

// RunUnexport is `snorkel unexport service NAME`: it deletes the
// ServiceExport; the agents then withdraw the service from every cluster.
func RunUnexport(args []string, out io.Writer) error {
	t, err := parseServiceArgs("unexport", args, out)
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
