package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/lab/topo"
)

// RunTutorial brings the scenario up, runs its part of the tutorial, and,
// with down, tears the lab down whatever the outcome; without, the lab
// stays for exploring.
func RunTutorial(ctx context.Context, o Options, kubectl, snorkel, cableDriver string, down bool) error {
	l, err := Up(ctx, o)
	if err != nil {
		return err
	}
	t := &Tutorial{Lab: l, Snorkel: snorkel, Kubectl: kubectl, SnorkelImage: o.Images.SnorkelImage, CableDriver: cableDriver, Out: o.Out}
	terr := t.Run(ctx)
	if !down {
		fmt.Fprintf(o.Out, "the lab stays up: KUBECONFIG=%s kubectl --context %s get pods -A; snorkel lab --nodes down removes it\n", KubeconfigFile(l.StateDir), l.Scenario.Clusters[0].Context())
		return terr
	}
	if terr != nil {
		fmt.Fprintf(o.Out, "logs before teardown: %s\n", l.Topo.LogDir())
	}
	return errors.Join(terr, l.Down(o.Out))
}

// Status prints a running lab's processes and nodes.
func Status(ctx context.Context, stateDir string, w io.Writer) error {
	var st state
	b, err := os.ReadFile(stateFile(stateDir))
	if err != nil {
		return fmt.Errorf("nodes: no lab in %s: %w", stateDir, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("nodes: %s: %w", stateFile(stateDir), err)
	}
	sc, err := ScenarioByName(st.Scenario)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "real-node lab in %s: scenario %s; KUBECONFIG=%s\n", stateDir, sc.Name, KubeconfigFile(stateDir))
	healthy := true
	t, err := topo.Load(topoFile(stateDir))
	if err != nil {
		return err
	}
	defer t.Release()
	for _, p := range t.Processes() {
		mark := "✓"
		if !p.Alive() {
			mark, healthy = "✗", false
		}
		fmt.Fprintf(w, "  %s %-28s pid %-7d log %s\n", mark, p.Name, p.PID, p.Log)
	}
	for _, c := range sc.Clusters {
		kc, err := Client(stateDir, c.Name)
		if err != nil {
			return err
		}
		nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(w, "  ✗ %s: %v\n", c.Context(), err)
			healthy = false
			continue
		}
		var list []string
		for _, n := range nodes.Items {
			s := n.Name + " NotReady"
			if nodeReady(n) {
				s = n.Name + " Ready"
			} else {
				healthy = false
			}
			list = append(list, s)
		}
		fmt.Fprintf(w, "  %s: %s\n", c.Context(), strings.Join(list, ", "))
	}
	usage, err := snorkelUsage(st.Prefix, st.Nodes)
	if err != nil {
		return err
	}
	if len(usage) > 0 {
		fmt.Fprintln(w, "Snorkel's processes (CPU is the average since each started):")
	}
	for _, u := range usage {
		if u.Command == "lab-pod" {
			continue
		}
		fmt.Fprintf(w, "  %-12s %-12s pid %-7d CPU %5.1fm (%.1fs in %s)  RSS %5.1f MiB, peak %5.1f MiB\n",
			u.Node, u.Command, u.PID, u.Millicores(), u.CPU.Seconds(), u.Age.Round(time.Second), float64(u.RSS)/(1<<20), float64(u.PeakRSS)/(1<<20))
	}
	if !healthy {
		return errors.New("nodes: the lab is not healthy")
	}
	return nil
}
