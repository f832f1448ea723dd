package show

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/internal/statusline"
)

// View is one of the things `snorkel show` reads from a cluster.
type View string

// The views, named as subctl names its show commands. All is every other
// one, in subctl's order.
const (
	Connections View = "connections"
	Endpoints   View = "endpoints"
	Gateways    View = "gateways"
	Networks    View = "networks"
	Brokers     View = "brokers"
	Versions    View = "versions"
	All         View = "all"
)

// Views lists every view.
var Views = []View{Connections, Endpoints, Gateways, Networks, Brokers, Versions, All}

// allOrder is the order `all` shows the views in, subctl's.
var allOrder = []View{Brokers, Connections, Endpoints, Gateways, Networks, Versions}

// section is how one view is gathered and titled.
type section struct {
	// title is the status line, subctl's words.
	title string
	// needsAgent: the view reads what only a joined cluster has.
	needsAgent bool
	show       func(context.Context, *cluster) *result
}

var sections = map[View]section{
	Connections: {"Showing Connections", true, showConnections},
	Endpoints:   {"Showing Endpoints", true, showEndpoints},
	Gateways:    {"Showing Gateways", true, showGateways},
	Networks:    {"Showing Network details", true, showNetworks},
	Brokers:     {"Detecting broker(s)", false, showBrokers},
	Versions:    {"Showing versions", true, showVersions},
}

// Options configures Run.
type Options struct {
	// Namespace is the agent namespace; default api.AgentNamespace.
	Namespace string
	// Header prints `Cluster "NAME"` before each cluster and a blank line
	// after it, as subctl does when it walks several contexts.
	Header bool
	// Out receives the cluster headers, tables and details; Status the
	// ✓/⚠/✗ status lines. They may be the same writer.
	Out, Status io.Writer
}

// Run shows view of each target, in order, and goes on past a cluster
// that cannot be read or has no Snorkel. It returns an error when a
// target could not be read, or when no target had anything to show; the
// status lines above say which and why.
func Run(ctx context.Context, view View, targets []Target, o Options) error {
	if _, ok := sections[view]; !ok && view != All {
		return fmt.Errorf("unknown view %q; choose one of %s", view, viewNames())
	}
	if len(targets) == 0 {
		return errors.New("no kubeconfig context to show; give --kubeconfig or --context")
	}
	if o.Namespace == "" {
		o.Namespace = api.AgentNamespace
	}
	views := []View{view}
	if view == All {
		views = allOrder
	}
	var failed, silent []string
	for _, t := range targets {
		if o.Header {
			fmt.Fprintf(o.Out, "Cluster %q\n", t.Cluster)
		}
		shown, ok := o.showCluster(ctx, views, t)
		if !ok {
			failed = append(failed, t.Context)
		} else if !shown {
			silent = append(silent, t.Context)
		}
		if o.Header {
			fmt.Fprintln(o.Out)
		}
	}
	switch {
	case len(failed) > 0:
		return fmt.Errorf("could not show %s (see above)", contextList(failed))
	case len(silent) == len(targets):
		return fmt.Errorf("nothing to show in %s (see above)", contextList(silent))
	}
	return nil
}

// showCluster prints views of one target. It reports whether any view
// had something to show, and false for ok if the cluster could not be
// read.
func (o *Options) showCluster(ctx context.Context, views []View, t Target) (shown, ok bool) {
	c, err := open(ctx, t, o.Namespace)
	if err != nil {
		statusline.Write(o.Status, statusline.Fail, statusline.Capitalize(err.Error()))
		return false, false
	}
	ok = true
	for i, v := range views {
		if i > 0 {
			fmt.Fprintln(o.Out)
		}
		s := sections[v]
		if s.needsAgent && c.Agent == nil {
			statusline.Write(o.Status, statusline.Warn, c.NotInstalled())
			break
		}
		r := s.show(ctx, c)
		if err := r.print(s.title, o.Out, o.Status); err != nil {
			statusline.Write(o.Status, statusline.Fail, statusline.Capitalize(err.Error()))
			return shown, false
		}
		shown = shown || r.shown
		ok = ok && !r.Failed()
	}
	return shown, ok
}

// contextList names contexts for an error: `context "a"` or
// `contexts "a", "b"`.
func contextList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	if len(q) == 1 {
		return "context " + q[0]
	}
	return "contexts " + strings.Join(q, ", ")
}

func viewNames() string {
	s := make([]string, len(Views))
	for i, v := range Views {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// ParseView returns the view named s.
func ParseView(s string) (View, error) {
	for _, v := range Views {
		if string(v) == s {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown view %q; choose one of %s", s, viewNames())
}
