package show

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
)

// requestTimeout bounds each request to a cluster or a broker, so that one
// unreachable context does not hold up the others for long.
const requestTimeout = 15 * time.Second

// Target is one cluster to show: a kubeconfig context.
type Target struct {
	// Context is the kubeconfig context's name; Cluster the name of its
	// cluster entry, which the per-cluster header shows, as subctl's does.
	Context, Cluster string
	// Config reaches the cluster; it is nil when Err says why the
	// kubeconfig gave none.
	Config *rest.Config
	Err    error
}

// cluster is one reachable cluster and what Snorkel keeps in it.
type cluster struct {
	*Conn

	gateways     []submv1.Gateway
	gatewaysErr  error
	gatewaysRead bool
}

// withTimeout returns a copy of cfg whose requests time out.
func withTimeout(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 {
		cfg.Timeout = requestTimeout
	}
	return cfg
}

// Conn is a reachable cluster and the agent configuration `snorkel join`
// stored in it: what show, diagnose and gather start from.
type Conn struct {
	Target Target
	// Config reaches the cluster, with a timeout on every request.
	Config *rest.Config
	// Namespace is the agent namespace.
	Namespace string
	Kube      kubernetes.Interface
	Dynamic   dynamic.Interface
	// Agent is nil when Snorkel is not installed.
	Agent *api.AgentConfig
}

// Connect reaches t's cluster and reads the agent configuration in
// namespace ns; timeout bounds each request (0: the kubeconfig's, else
// 15 s). The error says why
// the cluster cannot be read, in a user's words.
func Connect(ctx context.Context, t Target, ns string, timeout time.Duration) (*Conn, error) {
	if t.Err != nil {
		return nil, t.Err
	}
	cfg := withTimeout(t.Config)
	if timeout != 0 {
		cfg.Timeout = timeout
	}
	c := &Conn{Target: t, Config: cfg, Namespace: ns}
	var err error
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("context %q: %w", t.Context, err)
	}
	if c.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("context %q: %w", t.Context, err)
	}
	if _, err := c.Kube.Discovery().ServerVersion(); err != nil {
		var status apierrors.APIStatus
		switch {
		case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
			return nil, fmt.Errorf("context %q at %s refused the kubeconfig's credentials: %w", t.Context, cfg.Host, err)
		case errors.As(err, &status):
			return nil, fmt.Errorf("context %q at %s: %w", t.Context, cfg.Host, err)
		}
		return nil, fmt.Errorf("cannot reach context %q at %s: %w", t.Context, cfg.Host, err)
	}
	c.Agent, err = api.LoadAgentConfig(ctx, c.Kube, ns)
	if apierrors.IsNotFound(err) {
		c.Agent, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("context %q: %w", t.Context, err)
	}
	return c, nil
}

// NotInstalled is the message for a cluster without Snorkel.
func (c *Conn) NotInstalled() string {
	return fmt.Sprintf("Snorkel is not installed in context %q (no Secret %s/%s): run `snorkel join` for this cluster",
		c.Target.Context, c.Namespace, api.AgentSecretName)
}

// open connects to t's cluster for the views.
func open(ctx context.Context, t Target, ns string) (*cluster, error) {
	conn, err := Connect(ctx, t, ns, 0)
	if err != nil {
		return nil, err
	}
	return &cluster{Conn: conn}, nil
}

// listGateways reads the Gateway objects of the agent namespace once, in
// the API server's order (by name).
func (c *cluster) listGateways(ctx context.Context) ([]submv1.Gateway, error) {
	if c.gatewaysRead {
		return c.gateways, c.gatewaysErr
	}
	c.gatewaysRead = true
	list, err := c.Dynamic.Resource(submv1.GatewayResource).Namespace(c.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.gatewaysErr = fmt.Errorf("listing the Gateways in namespace %s: %w", c.Namespace, err)
		return nil, c.gatewaysErr
	}
	for i := range list.Items {
		g, err := submv1.FromUnstructured[submv1.Gateway](&list.Items[i])
		if err != nil {
			c.gatewaysErr = err
			return nil, err
		}
		c.gateways = append(c.gateways, *g)
	}
	return c.gateways, nil
}

// gatewayNode is the node a Gateway's agent runs on: the hostname in its
// local endpoint, else its name (the agent names it after its node).
func gatewayNode(g *submv1.Gateway) string {
	if g.Status.LocalEndpoint.Hostname != "" {
		return g.Status.LocalEndpoint.Hostname
	}
	return g.Name
}
