package diagnose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/internal/statusline"
	"github.com/snorkel-net/snorkel/controller/show"
)

// Check is one of `snorkel diagnose`'s checks, named as subctl's.
type Check string

// The checks. All is every other one, in subctl's order.
const (
	K8sVersion       Check = "k8s-version"
	Deployment       Check = "deployment"
	CNI              Check = "cni"
	Connections      Check = "connections"
	KubeProxyMode    Check = "kube-proxy-mode"
	Firewall         Check = "firewall"
	Globalnet        Check = "globalnet"
	ServiceDiscovery Check = "service-discovery"
	All              Check = "all"
)

// allOrder is the order `diagnose all` runs the checks in, subctl's.
var allOrder = []Check{K8sVersion, Deployment, CNI, Connections, KubeProxyMode, Firewall, Globalnet, ServiceDiscovery}

// checkDef is how one check is titled and run.
type checkDef struct {
	// title is the status line, subctl's words.
	title string
	// needsAgent: the check reads what only a joined cluster has.
	needsAgent bool
	run        func(context.Context, *cluster, *result)
}

var checks = map[Check]checkDef{
	K8sVersion:       {"Checking Snorkel support for the Kubernetes version", false, checkK8sVersion},
	Deployment:       {"Checking the Snorkel deployment", true, checkDeployment},
	CNI:              {"Checking Snorkel support for the CNI network plugin", true, checkCNI},
	Connections:      {"Checking gateway connections", true, checkConnections},
	KubeProxyMode:    {"Checking Snorkel support for the kube-proxy mode", true, checkKubeProxyMode},
	Firewall:         {"Checking the firewall between the gateways", true, checkFirewall},
	Globalnet:        {"Checking the Globalnet configuration", true, checkGlobalnet},
	ServiceDiscovery: {"Checking service discovery", true, checkServiceDiscovery},
}

// ParseCheck reads a check's name.
func ParseCheck(s string) (Check, error) {
	c := Check(s)
	if _, ok := checks[c]; ok || c == All {
		return c, nil
	}
	return "", fmt.Errorf("unknown check %q; choose one of %s", s, CheckNames())
}

// CheckNames lists the checks' names, all first.
func CheckNames() string {
	names := []string{string(All)}
	for _, c := range allOrder {
		names = append(names, string(c))
	}
	return strings.Join(names, ", ")
}

// Options configures Run.
type Options struct {
	// Namespace is the agent namespace; default api.AgentNamespace.
	Namespace string
	// Header prints `Cluster "NAME"` before each cluster, as subctl does
	// when it walks several contexts.
	Header bool
	// Verbose prints a ✓ line for every object checked.
	Verbose bool
	// RequestTimeout bounds each request to a cluster or the broker;
	// default 15s.
	RequestTimeout time.Duration
	// Probe runs probe pods on the nodes (firewall, MTU and MSS, CNI
	// masquerade); without it those checks read what the gateways
	// reported.
	Probe bool
	// Image is what the probe pods run; empty: each cluster's agent
	// image, which its nodes have.
	Image string
	// ProbeTimeout bounds each batch of probe pods; default 90s.
	ProbeTimeout time.Duration
	// Firewall limits the firewall check to one of its parts
	// (FirewallInter, FirewallIntra, FirewallNATDiscovery,
	// FirewallMetrics); empty runs them all.
	Firewall string
	Out      io.Writer
}

// The firewall check's parts, subctl's `diagnose firewall` subcommands.
const (
	FirewallInter        = "inter-cluster"
	FirewallIntra        = "intra-cluster"
	FirewallNATDiscovery = "nat-discovery"
	FirewallMetrics      = "metrics"
)

// FirewallParts are the firewall check's parts, in the order they run.
var FirewallParts = []string{FirewallIntra, FirewallMetrics, FirewallInter, FirewallNATDiscovery}

// ErrFailed is returned by Run when a check failed; the ✗ lines say which
// and how to fix it.
var ErrFailed = errors.New("diagnose found problems")

// Run runs check (All: every check) on each target in order and prints
// their status lines to o.Out. It goes on past a failed check and a
// cluster that cannot be read, and returns ErrFailed (or the reason a
// cluster could not be read) when anything failed.
func Run(ctx context.Context, check Check, targets []show.Target, o Options) error {
	if _, err := ParseCheck(string(check)); err != nil {
		return err
	}
	if len(targets) == 0 {
		return errors.New("no kubeconfig context to diagnose; give --kubeconfig, --context or --in-cluster")
	}
	if o.Namespace == "" {
		o.Namespace = api.AgentNamespace
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 15 * time.Second
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = 90 * time.Second
	}
	run := []Check{check}
	if check == All {
		run = allOrder
	}
	var errs []error
	// Every cluster is opened first: the probes of one reach the others.
	opened := make([]*cluster, len(targets))
	openErrs := make([]error, len(targets))
	for i, t := range targets {
		opened[i], openErrs[i] = open(ctx, t, o)
	}
	var pr *probes
	if o.Probe {
		pr = newProbes(o.Image, o.ProbeTimeout)
	}
	for i, c := range opened {
		if c == nil {
			continue
		}
		c.probes, c.firewall = pr, o.Firewall
		for j, peer := range opened {
			if j != i && peer != nil && peer.Agent != nil {
				c.peers = append(c.peers, peer)
			}
		}
	}
	failed := false
	for ti, t := range targets {
		if o.Header {
			fmt.Fprintf(o.Out, "Cluster %q\n", t.Cluster)
		}
		c, err := opened[ti], openErrs[ti]
		if err != nil {
			statusline.Write(o.Out, statusline.Fail, err.Error())
			errs = append(errs, err)
		}
		for i, name := range run {
			if c == nil {
				break
			}
			if i > 0 {
				fmt.Fprintln(o.Out)
			}
			def := checks[name]
			r := newResult(o.Verbose)
			if def.needsAgent && c.Agent == nil {
				r.Warn("%s", c.NotInstalled())
			} else {
				def.run(ctx, c, r)
			}
			r.Print(o.Out, def.title)
			failed = failed || r.Failed()
		}
		if o.Header {
			fmt.Fprintln(o.Out)
		}
	}
	if pr != nil {
		// Also after an interrupt: cleanup outlives ctx.
		if err := pr.cleanup(ctx); err != nil {
			statusline.Write(o.Out, statusline.Fail, err.Error())
			errs = append(errs, err)
		}
	}
	if failed {
		errs = append(errs, ErrFailed)
	}
	return errors.Join(errs...)
}

// cluster is one reachable cluster, as show.Connect reads it, with the
// MCS client the service-discovery check needs.
type cluster struct {
	*show.Conn
	mcs mcsclient.Interface
	// brokerTimeout bounds the requests to the broker.
	brokerTimeout time.Duration
	// probes runs the probe pods; nil when Options.Probe is off.
	probes *probes
	// peers are the other joined clusters of the run, which the probes
	// reach.
	peers []*cluster
	// firewall is Options.Firewall.
	firewall string
}

// open connects to t's cluster and reads the agent configuration.
func open(ctx context.Context, t show.Target, o Options) (*cluster, error) {
	conn, err := show.Connect(ctx, t, o.Namespace, o.RequestTimeout)
	if err != nil {
		return nil, err
	}
	c := &cluster{Conn: conn, brokerTimeout: o.RequestTimeout}
	if c.mcs, err = mcsclient.NewForConfig(conn.Config); err != nil {
		return nil, fmt.Errorf("context %q: %w", t.Context, err)
	}
	return c, nil
}

// broker is a client of the broker with the agent's credentials.
func (c *cluster) broker() (kubernetes.Interface, dynamic.Interface, error) {
	cfg := c.Agent.BrokerConfig()
	cfg.Timeout = c.brokerTimeout
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("the broker at %s: %w", c.Agent.BrokerURL, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("the broker at %s: %w", c.Agent.BrokerURL, err)
	}
	return kc, dyn, nil
}
