package gather

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/internal/statusline"
	"github.com/snorkel-net/snorkel/controller/show"
)

// The modules, subctl's components.
const (
	Connectivity     = "connectivity"
	ServiceDiscovery = "service-discovery"
	Broker           = "broker"
	Operator         = "operator"
)

// The types of data. Logs and Resources are subctl's; Status is what the
// gateways and dnsd serve: /status, /flows and /metrics.
const (
	Logs      = "logs"
	Resources = "resources"
	Status    = "status"
)

// Modules and Types list every module and type, in the order gathered.
var (
	Modules = []string{Connectivity, ServiceDiscovery, Broker, Operator}
	Types   = []string{Logs, Resources, Status}
)

// requestTimeout bounds each request, port forward included, so that one
// unreachable node does not hold up the rest.
const requestTimeout = 15 * time.Second

// SummaryFile, in each cluster's directory, repeats the status lines.
const SummaryFile = "summary.txt"

// Options configures Run.
type Options struct {
	// Directory receives a directory per cluster, named after its
	// kubeconfig cluster entry.
	Directory string
	// Modules and Types select what to gather; empty means all.
	Modules, Types []string
	// IncludeSensitiveData keeps Secrets' values and the broker token.
	IncludeSensitiveData bool
	// Namespace is the agent namespace; default api.AgentNamespace.
	Namespace string
	// Status receives the ✓/⚠/✗ lines.
	Status io.Writer
}

// Check validates the module and type names, as subctl does before it
// starts.
func (o *Options) Check() error {
	for _, m := range o.Modules {
		if !slices.Contains(Modules, m) {
			return fmt.Errorf("%q is not a supported module; choose from %s", m, strings.Join(Modules, ", "))
		}
	}
	for _, t := range o.Types {
		if !slices.Contains(Types, t) {
			return fmt.Errorf("%q is not a supported type; choose from %s", t, strings.Join(Types, ", "))
		}
	}
	return nil
}

// Run gathers from each target into its own directory under
// o.Directory. A component that is missing or cannot be read is reported
// and skipped; Run's error says which targets could not be reached at all
// or which directories could not be written.
func Run(ctx context.Context, targets []show.Target, o Options) error {
	if err := o.Check(); err != nil {
		return err
	}
	if len(targets) == 0 {
		return errors.New("no kubeconfig context to gather from; give --kubeconfig or --context")
	}
	if len(o.Modules) == 0 {
		o.Modules = Modules
	}
	if len(o.Types) == 0 {
		o.Types = Types
	}
	if o.Namespace == "" {
		o.Namespace = api.AgentNamespace
	}
	var failed []string
	for _, t := range targets {
		if err := o.gatherCluster(ctx, t); err != nil {
			statusline.Write(o.Status, statusline.Fail, statusline.Capitalize(err.Error()))
			failed = append(failed, fmt.Sprintf("%q", t.Context))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not gather from context %s (see above)", strings.Join(failed, ", "))
	}
	return nil
}

// gatherCluster writes one target's directory.
func (o *Options) gatherCluster(ctx context.Context, t show.Target) error {
	fmt.Fprintf(o.Status, "Gathering information from cluster %q\n", t.Cluster)
	c, err := open(ctx, t, o.Namespace)
	if err != nil {
		return err
	}
	c.dir = filepath.Join(o.Directory, fileName(t.Cluster))
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return fmt.Errorf("creating the directory for context %q: %w", t.Context, err)
	}
	c.red.off = o.IncludeSensitiveData
	if !c.red.off {
		c.learnSecrets(ctx)
	}
	var summary bytes.Buffer
	status := io.MultiWriter(o.Status, &summary)
	if c.Agent == nil {
		statusline.Write(status, statusline.Warn, fmt.Sprintf("Snorkel is not installed in context %q (no Secret %s/%s): gathering what exists", t.Context, c.Namespace, api.AgentSecretName))
	}
	for _, m := range o.Modules {
		for _, typ := range o.Types {
			step, ok := steps[m][typ]
			if !ok {
				continue
			}
			var s statusline.Section
			step(ctx, c, &s)
			s.Print(status, fmt.Sprintf("Gathering %s %s", m, typ))
		}
	}
	if err := os.WriteFile(filepath.Join(c.dir, SummaryFile), summary.Bytes(), 0o600); err != nil {
		return fmt.Errorf("writing the summary of context %q: %w", t.Context, err)
	}
	fmt.Fprintf(o.Status, "Files are stored under directory %q\n", c.dir)
	return nil
}

// cluster is one reachable cluster being gathered from.
type cluster struct {
	*show.Conn
	dir string
	red redactor
}

// open connects to t's cluster and reads the agent configuration, if any.
func open(ctx context.Context, t show.Target, ns string) (*cluster, error) {
	conn, err := show.Connect(ctx, t, ns, requestTimeout)
	if err != nil {
		return nil, err
	}
	return &cluster{Conn: conn}, nil
}

// learnSecrets collects the values to scrub from every file: the broker
// token and pre-shared key, and the tokens of the agent namespace's
// Secrets.
func (c *cluster) learnSecrets(ctx context.Context) {
	if c.Agent != nil {
		c.red.learn(c.Agent.BrokerToken)
		c.red.learn(c.Agent.PSK)
	}
	secrets, err := c.Kube.CoreV1().Secrets(c.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, s := range secrets.Items {
		c.red.learn(string(s.Data["token"]))
	}
}

// write stores data, scrubbed, as name in the cluster's directory.
func (c *cluster) write(name string, data []byte) error {
	path := filepath.Join(c.dir, fileName(name))
	if err := os.WriteFile(path, []byte(c.red.text(string(data))), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// fileName makes s safe as a file name, as subctl does.
func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		if strings.ContainsRune(`<>:"/\|?*`, r) {
			return '_'
		}
		return r
	}, s)
}
