package show

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/snorkel-net/snorkel/controller/internal/statusline"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Selection picks the kubeconfig contexts to show, as subctl's --kubeconfig,
// --context and --contexts do.
type Selection struct {
	// Kubeconfig is a kubeconfig file, or several separated by ':' (the
	// system's list separator) or ','; they merge as $KUBECONFIG's do.
	// Empty means $KUBECONFIG, else ~/.kube/config.
	Kubeconfig string
	// Context picks one context. Contexts picks several, shown in that
	// order. With neither, every context is shown, one per cluster.
	Context  string
	Contexts []string
}

// Targets resolves the selection. header reports whether Run should head
// each cluster, as it does unless one context was picked with Context.
// When a cluster has several contexts and none was picked, the one whose
// user has the most contexts is taken (likely the administrator), and a
// ⚠ line on status says so.
func (s Selection) Targets(status io.Writer) (targets []Target, header bool, err error) {
	if s.Context != "" && len(s.Contexts) > 0 {
		return nil, false, errors.New("give --context or --contexts, not both")
	}
	rules, err := s.loadingRules()
	if err != nil {
		return nil, false, err
	}
	raw, err := rules.Load()
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", s.where(), err)
	}
	target := func(name string) Target {
		t := Target{Context: name}
		kctx, ok := raw.Contexts[name]
		if !ok {
			t.Cluster = name
			t.Err = fmt.Errorf("no context named %q in %s (it has %s)", name, s.where(), strings.Join(slices.Sorted(maps.Keys(raw.Contexts)), ", "))
			return t
		}
		t.Cluster = kctx.Cluster
		cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, name, &clientcmd.ConfigOverrides{}, rules).ClientConfig()
		if err != nil {
			t.Err = fmt.Errorf("context %q of %s: %w", name, s.where(), err)
		}
		t.Config = cfg
		return t
	}
	switch {
	case s.Context != "":
		t := target(s.Context)
		if t.Err != nil {
			return nil, false, fmt.Errorf("--context: %w", t.Err)
		}
		return []Target{t}, false, nil
	case len(s.Contexts) > 0:
		for _, name := range s.Contexts {
			targets = append(targets, target(name))
		}
		return targets, true, nil
	}
	if len(raw.Contexts) == 0 {
		return nil, false, fmt.Errorf("%s has no contexts; give a kubeconfig with --kubeconfig", s.where())
	}
	for _, name := range onePerCluster(raw, status) {
		targets = append(targets, target(name))
	}
	return targets, true, nil
}

// CurrentContext is the kubeconfig's current context, which a command
// acting on one cluster takes when it is given no --context.
func (s Selection) CurrentContext() (string, error) {
	rules, err := s.loadingRules()
	if err != nil {
		return "", err
	}
	raw, err := rules.Load()
	if err != nil {
		return "", fmt.Errorf("%s: %w", s.where(), err)
	}
	if raw.CurrentContext == "" {
		return "", fmt.Errorf("%s has no current context; name one with --context", s.where())
	}
	return raw.CurrentContext, nil
}

// onePerCluster picks a context per cluster, clusters in name order.
func onePerCluster(raw *clientcmdapi.Config, status io.Writer) []string {
	byCluster := map[string][]string{}
	userUse := map[string]int{}
	for name, c := range raw.Contexts {
		byCluster[c.Cluster] = append(byCluster[c.Cluster], name)
		userUse[c.AuthInfo]++
	}
	var picked []string
	for _, cl := range slices.Sorted(maps.Keys(byCluster)) {
		names := byCluster[cl]
		slices.Sort(names)
		// MaxFunc returns the first of equals: the first name.
		best := slices.MaxFunc(names, func(a, b string) int {
			return cmp.Compare(userUse[raw.Contexts[a].AuthInfo], userUse[raw.Contexts[b].AuthInfo])
		})
		if len(names) > 1 {
			statusline.Write(status, statusline.Warn, fmt.Sprintf("Found several kubeconfig contexts for cluster %q: %s; showing context %q (pick another with --context or --contexts)",
				cl, strings.Join(names, ", "), best))
		}
		picked = append(picked, best)
	}
	return picked
}

// loadingRules are the kubeconfig files to read.
func (s Selection) loadingRules() (*clientcmd.ClientConfigLoadingRules, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if s.Kubeconfig == "" {
		return rules, nil
	}
	paths := strings.FieldsFunc(s.Kubeconfig, func(r rune) bool { return r == filepath.ListSeparator || r == ',' })
	if len(paths) == 1 {
		rules.ExplicitPath = paths[0]
		return rules, nil
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
	}
	rules.Precedence = paths
	return rules, nil
}

func (s Selection) where() string {
	if s.Kubeconfig != "" {
		return "--kubeconfig " + s.Kubeconfig
	}
	return "the kubeconfig ($KUBECONFIG or ~/.kube/config)"
}
