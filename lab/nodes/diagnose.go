package nodes

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/natdiscovery"
)

// firewallTable is the nftables table the scenario puts on a's peer's
// gateway node to block the tunnel port.
const firewallTable = "lab-firewall"

// diagnose runs snorkel diagnose against a and b, which must pass with
// every probe; then breaks the network twice on purpose, each time
// requiring the failure that names the fault, and puts it back: a
// firewall on b's gateway node dropping the tunnel port, and a's worker
// without its route agent and the route agent's masquerade bypass. Under
// Globalnet it only requires that every check passes: the probes reach
// the remote server pod at its global IP and want a source in a's global
// CIDR.
func (t *Tutorial) diagnose(ctx context.Context, a, b Cluster) {
	contexts := a.Context() + "," + b.Context()
	port := fmt.Sprint(api.DefaultNATTPort)
	natd := fmt.Sprint(natdiscovery.DefaultPort)
	inter := []string{"diagnose", "firewall", "inter-cluster", "--context", a.Context(), "--remotecontext", b.Context()}
	aGateway, err := t.activeGateway(ctx, a)
	if err != nil {
		t.fail(err.Error())
		return
	}
	bGateway, err := t.activeGateway(ctx, b)
	if err != nil {
		t.fail(err.Error())
		return
	}
	if t.Lab.Scenario.GlobalnetRange.IsValid() {
		t.expect(ctx, "diagnose  every check passes, probes included, between "+a.Name+" and "+b.Name+" under Globalnet", true,
			[]string{"✓ UDP port " + port + " is open: datagrams from gateway node " + aGateway,
				"with addresses of this cluster's global CIDR " + a.GlobalCIDR.String(),
				"✓ Packets up to ",
				"reach the active gateway node",
				"✓ NAT discovery's UDP port " + natd + " is open",
				"✓ The metrics port is open"},
			"diagnose", "all", "--contexts", contexts)
		return
	}
	t.expect(ctx, "diagnose  every check passes, probes included, between "+a.Name+" and "+b.Name, true,
		[]string{"✓ UDP port " + port + " is open: datagrams from gateway node " + aGateway,
			"✓ The health-check path is open",
			"✓ Packets up to ",
			"with their own addresses",
			"reach the active gateway node",
			"✓ NAT discovery's UDP port " + natd + " is open",
			"✓ The metrics port is open"},
		"diagnose", "all", "--contexts", contexts)
	t.expect(ctx, "diagnose  firewall inter-cluster passes", true, []string{"✓ UDP port " + port + " is open"}, inter...)

	gw := t.Lab.Topo.NS(bGateway)
	drop := fmt.Sprintf("table inet %s {\n\tchain input {\n\t\ttype filter hook input priority -10; policy accept;\n\t\tudp dport %s drop\n\t}\n}\n", firewallTable, port)
	if err := gw.Nft(ctx, drop); err != nil {
		t.fail("nftables drop on " + bGateway + ": " + err.Error())
		return
	}
	fmt.Fprintf(t.Out, "# %s drops UDP port %s\n", bGateway, port)
	t.expect(ctx, "diagnose  firewall inter-cluster fails naming UDP port "+port+" while "+bGateway+" drops it", false,
		[]string{"✗ UDP port " + port + " is blocked: datagrams from gateway node " + aGateway}, inter...)
	t.expect(ctx, "diagnose  firewall nat-discovery passes while only UDP port "+port+" is dropped", true,
		[]string{"✓ NAT discovery's UDP port " + natd + " is open"},
		"diagnose", "firewall", "nat-discovery", "--context", a.Context(), "--remotecontext", b.Context())
	if err := gw.Nft(ctx, "delete table inet "+firewallTable+"\n"); err != nil {
		t.fail("removing the nftables drop: " + err.Error())
		return
	}
	t.check(ctx, "show  the tunnel to "+b.Name+" is back", b.Name+`.* connected`, t.Snorkel, "--context", a.Context(), "show", "connections")

	worker := a.Worker().Name
	if err := t.routeAgentAway(ctx, a, worker); err != nil {
		t.fail(err.Error())
		return
	}
	if err := t.Lab.Topo.NS(worker).Nft(ctx, "delete table ip snorkel-routeagent\n"); err != nil {
		t.fail("deleting the route agent's table on " + worker + ": " + err.Error())
	}
	fmt.Fprintf(t.Out, "# %s runs no route agent and lost its table ip snorkel-routeagent\n", worker)
	t.expect(ctx, "diagnose  cni fails naming "+worker+": no route agent, and its pods' traffic masqueraded", false,
		[]string{"✗ No route agent pod runs on node " + worker, " on node " + worker + " "},
		"diagnose", "cni", "--contexts", contexts)
	if err := t.routeAgentBack(ctx, a); err != nil {
		t.fail(err.Error())
		return
	}
	t.expect(ctx, "diagnose  every check passes again", true, []string{"with their own addresses", "✓ UDP port " + port + " is open"},
		"diagnose", "all", "--contexts", contexts)
}

// routeAgentAway keeps c's route agent off node, as a node selector
// would, and waits until its pod there is gone.
func (t *Tutorial) routeAgentAway(ctx context.Context, c Cluster, node string) error {
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"NotIn","values":[%q]}]}]}}}}}}}`, node)
	if err := t.kubectl(ctx, "--context", c.Context(), "-n", api.AgentNamespace, "patch", "daemonset", broker.RouteAgentDaemonSet, "--type", "merge", "-p", patch); err != nil {
		return err
	}
	if err := t.kubectl(ctx, "--context", c.Context(), "-n", api.AgentNamespace, "rollout", "status", "daemonset/"+broker.RouteAgentDaemonSet, "--timeout=5m"); err != nil {
		return err
	}
	kc, err := Client(t.Lab.StateDir, c.Name)
	if err != nil {
		return err
	}
	return waitFor(ctx, checkDeadline, "the route agent pod on "+node+" gone", func() error {
		pods, err := kc.CoreV1().Pods(api.AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + broker.RouteAgentDaemonSet, FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left", len(pods.Items))
		}
		return nil
	})
}

// routeAgentBack lifts routeAgentAway's selector and waits for the route
// agent on every node.
func (t *Tutorial) routeAgentBack(ctx context.Context, c Cluster) error {
	if err := t.kubectl(ctx, "--context", c.Context(), "-n", api.AgentNamespace, "patch", "daemonset", broker.RouteAgentDaemonSet, "--type", "json", "-p", `[{"op":"remove","path":"/spec/template/spec/affinity"}]`); err != nil {
		return err
	}
	return t.kubectl(ctx, "--context", c.Context(), "-n", api.AgentNamespace, "rollout", "status", "daemonset/"+broker.RouteAgentDaemonSet, "--timeout=5m")
}

// expect runs snorkel args once, prints it, and checks that it succeeds
// (pass) or fails, printing every line of want.
func (t *Tutorial) expect(ctx context.Context, what string, pass bool, want []string, args ...string) {
	fmt.Fprintf(t.Out, "$ snorkel %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, t.Snorkel, args...)
	cmd.Dir, cmd.Env = t.Lab.StateDir, t.env()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Out.Write(out.Bytes())
	var missing []string
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			missing = append(missing, fmt.Sprintf("%q", w))
		}
	}
	switch {
	case pass && err != nil:
		t.fail(what + ": " + err.Error())
	case !pass && err == nil:
		t.fail(what + ": it passed")
	case len(missing) > 0:
		t.fail(what + ": no line with " + strings.Join(missing, ", "))
	default:
		fmt.Fprintf(t.Out, "✓ %s\n", what)
	}
}

// gather runs snorkel gather on both clusters and checks that each
// cluster's directory has the agent's log and its gateway's /status.
func (t *Tutorial) gather(ctx context.Context, clusters ...Cluster) {
	dir := filepath.Join(t.Lab.StateDir, "gather")
	var contexts []string
	for _, c := range clusters {
		contexts = append(contexts, c.Context())
	}
	if err := t.snorkel(ctx, "gather", "--contexts", strings.Join(contexts, ","), "--dir", dir); err != nil {
		t.fail("snorkel gather: " + err.Error())
		return
	}
	for _, c := range clusters {
		for _, suffix := range []string{".log", ".status.json"} {
			matches, _ := filepath.Glob(filepath.Join(dir, "*", broker.AgentDaemonSet+"-*"+suffix))
			found := false
			for _, m := range matches {
				if fi, err := os.Stat(m); err == nil && fi.Size() > 0 && strings.Contains(filepath.Dir(m), c.Name) {
					found = true
				}
			}
			what := "gather  " + c.Name + "'s directory has the agent's " + suffix
			if !found {
				t.fail(what + " (found " + strings.Join(matches, ", ") + ")")
				continue
			}
			fmt.Fprintf(t.Out, "✓ %s\n", what)
		}
	}
}
