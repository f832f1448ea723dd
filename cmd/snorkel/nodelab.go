package main

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/snorkel-net/snorkel/deploy"
	"github.com/snorkel-net/snorkel/lab/nodes"
)

// Where `make node-lab` says the lab's programs are; each has a flag too.
const (
	envKubeTools   = "SNORKEL_KUBE_TOOLS"
	envKubeVersion = "SNORKEL_KUBE_VERSION"
	envCoreDNS     = "SNORKEL_COREDNS"
	envPause       = "SNORKEL_PAUSE"
)

// nodeLabFlags are `snorkel lab --nodes`'s own settings.
type nodeLabFlags struct {
	toolsDir, kubeVersion, coreDNS, pause string
	// failover's
	rounds, streams int
	kinds           string
	keep            bool
}

// runNodeLab is `snorkel lab --nodes SUB`: the real-node lab. This binary
// is both the CLI the tutorial runs and the program of Snorkel's image, so
// it must be static (make node-lab builds it so).
func runNodeLab(ctx context.Context, sub, scenario, stateDir, prefix, cable string, f nodeLabFlags) error {
	switch sub {
	case "down":
		return nodes.Down(stateDir, os.Stdout)
	case "status":
		return nodes.Status(ctx, stateDir, os.Stdout)
	case "run", "up", "failover":
	default:
		return fmt.Errorf("unknown command %q; use run, up, failover, down or status", sub)
	}
	fo := nodes.FailoverOptions{Rounds: f.rounds, Streams: f.streams, Keep: f.keep}
	if sub == "failover" {
		kinds, err := nodes.ParseFailureKinds(f.kinds)
		if err != nil {
			return fmt.Errorf("--kinds: %w", err)
		}
		fo.Kinds = kinds
		if f.rounds < 1 || f.streams < 1 {
			return fmt.Errorf("--rounds %d and --streams %d: both must be at least 1", f.rounds, f.streams)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := staticBinary(self); err != nil {
		return err
	}
	o := nodes.Options{
		StateDir: stateDir,
		Prefix:   prefix,
		Tools:    nodes.ToolsIn(f.toolsDir, f.kubeVersion),
		Images:   nodes.Images{Snorkel: self, SnorkelImage: deploy.ImageName + ":" + version, Pause: f.pause, CoreDNS: f.coreDNS},
		Out:      os.Stdout,
	}
	var scs []nodes.Scenario
	if scenario == "" && sub == "run" {
		scs = nodes.Scenarios()
	} else {
		if scenario == "" {
			scenario = "tutorial"
		}
		sc, err := nodes.ScenarioByName(scenario)
		if err != nil {
			return err
		}
		scs = []nodes.Scenario{sc}
	}
	var failed []error
	for _, sc := range scs {
		o.Scenario = sc
		fmt.Printf("== scenario %s: %s\n", sc.Name, sc.Description)
		var err error
		if sub == "failover" {
			err = nodes.RunFailovers(ctx, o, o.Tools.Kubectl, self, cable, fo)
		} else {
			err = nodes.RunTutorial(ctx, o, o.Tools.Kubectl, self, cable, sub == "run")
		}
		if err != nil {
			failed = append(failed, fmt.Errorf("scenario %s: %w", sc.Name, err))
		}
	}
	return errors.Join(failed...)
}

// staticBinary refuses a dynamically linked program: the image it goes
// into has no loader or libc.
func staticBinary(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is linked dynamically, and the real-node lab puts it into Snorkel's image; run make node-lab, or build it with deploy/build-static.sh %s", path, filepath.Join("bin", "snorkel-static"))
		}
	}
	return nil
}

// envOr is the environment variable key, or def when it is unset.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
