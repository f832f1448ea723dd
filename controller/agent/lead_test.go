package agent

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
	"github.com/snorkel-net/snorkel/transport"
)

// logBook keeps what an agent logs, so that a test can tell what it did.
type logBook struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBook) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBook) has(msg string) bool {
	return strings.Contains(l.String(), msg)
}

func (l *logBook) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// logTo sends an agent's logs to l.
func logTo(l *logBook) func(*Config) {
	return func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(l, nil)) }
}

// TestAReplacedGatewayLeavesTheTakeoverToTheStandby restarts agents as a
// DaemonSet replaces a deleted pod: the old one releases the Lease and a
// new one with the same identity (the node's name) starts at once. With a
// standby, the standby takes over; alone, the new one campaigns at once.
// The broker runs on the member cluster, as Submariner allows.
func TestAReplacedGatewayLeavesTheTakeoverToTheStandby(t *testing.T) {
	srv := kubetest.Start(t, kubelocal.Options{Name: "c1", ServiceCIDR: "10.88.0.0/16"})[0]
	ctx := t.Context()
	d, err := broker.Deploy(ctx, srv.Config(), broker.BrokerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	member, err := broker.Join(ctx, srv.Config(), d.Info, broker.JoinOptions{
		ClusterID: "c1", CableDriver: transport.WireGuard, ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"},
	})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{cleanup: t.Cleanup}
	// Each step campaigns for a Lease of its own, so that the first agents
	// of a step find none and campaign at once.
	leases := kc.CoordinationV1().Leases(api.AgentNamespace)
	// lease is the holder of Lease name and how many times it changed hands.
	lease := func(name string) (string, int32) {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var holder string
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		var transitions int32
		if l.Spec.LeaseTransitions != nil {
			transitions = *l.Spec.LeaseTransitions
		}
		return holder, transitions
	}
	ips := map[string]string{"gw-a": "127.0.0.11", "gw-b": "127.0.0.12"}
	run := func(identity, leaseName string, logs *logBook) *runningAgent {
		return start(t, e, srv, member, identity, ips[identity], "", logTo(logs), func(c *Config) { c.Election.LeaseName = leaseName })
	}

	steps := []struct {
		name string
		run  func(*testing.T)
	}{
		{"a lone gateway restarting campaigns at once", func(t *testing.T) {
			first := run("gw-a", "lone", &logBook{})
			eventually(t, settle, "gw-a active", func() (bool, string) { return first.Active(), "passive" })
			first.halt()
			logs := &logBook{}
			next := run("gw-a", "lone", logs)
			eventually(t, settle, "the restarted gw-a active", func() (bool, string) { return next.Active(), "passive" })
			if logs.has(yieldNotice) {
				t.Errorf("the restarted gw-a, the cluster's only gateway, waited before it campaigned:\n%s", logs)
			}
			next.halt()
		}},
		{"a replaced active gateway leaves the takeover to the standby", func(t *testing.T) {
			logs := map[string]*logBook{"gw-a": {}, "gw-b": {}}
			a, b := run("gw-a", "replaced", logs["gw-a"]), run("gw-b", "replaced", logs["gw-b"])
			var active, standby *runningAgent
			eventually(t, settle, "one gateway of c1 active", func() (bool, string) {
				switch {
				case a.Active() && !b.Active():
					active, standby = a, b
				case b.Active() && !a.Active():
					active, standby = b, a
				default:
					return false, fmt.Sprintf("gw-a active %v, gw-b active %v", a.Active(), b.Active())
				}
				return true, ""
			})
			// The standby must already campaign (an agent that started
			// after the other won waits first) and have its Gateway.
			eventually(t, settle, "the standby "+standby.cfg.Identity+" campaigns", func() (bool, string) {
				g := gatewayObject(t, standby)
				return g != nil && g.Status.HAStatus == submv1.HAStatusPassive && logs[standby.cfg.Identity].has(campaignNotice),
					fmt.Sprintf("campaigning %v, Gateway %+v", logs[standby.cfg.Identity].has(campaignNotice), g)
			})
			_, before := lease("replaced")

			active.halt()
			nextLogs := &logBook{}
			next := run(active.cfg.Identity, "replaced", nextLogs)
			eventually(t, settle, "a gateway of c1 active again", func() (bool, string) {
				return standby.Active() || next.Active(), "both passive"
			})
			// Had the new agent won the Lease, the standby could not have
			// taken it before the new one's lease ran out: one change of
			// hands means the Lease went from the released to the standby.
			holder, transitions := lease("replaced")
			if !standby.Active() || next.Active() || holder != standby.cfg.Identity || transitions != before+1 {
				t.Errorf("the standby %s active %v, the new %s active %v; the Lease held by %q after %d changes of hands, want %s after 1",
					standby.cfg.Identity, standby.Active(), next.cfg.Identity, next.Active(), holder, transitions-before, standby.cfg.Identity)
			}
			if !nextLogs.has(yieldNotice) {
				t.Errorf("the new %s did not leave the takeover to the standby:\n%s", next.cfg.Identity, nextLogs)
			}
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.Fatalf("%q failed; the later steps depend on it", s.name)
		}
	}
}
