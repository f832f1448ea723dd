package main

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"
)

func TestGlobalFlagsGoToTheCommandAsIfGivenAfterIt(t *testing.T) {
	for _, tt := range []struct {
		name string
		line []string
		cmd  string
		args []string
	}{
		{"none", []string{"join", "broker-info.subm", "--clusterid", "c1"}, "join", []string{"broker-info.subm", "--clusterid", "c1"}},
		{"context before join", []string{"--context", "kind-c1", "join", "broker-info.subm", "--clusterid", "c1"},
			"join", []string{"broker-info.subm", "--clusterid", "c1", "--context=kind-c1"}},
		{"kubeconfig and context with = and one dash", []string{"-kubeconfig=F", "--context=C", "show", "connections"},
			"show", []string{"connections", "--kubeconfig=F", "--context=C"}},
		{"the flag after the command wins", []string{"--context", "kind-broker", "show", "connections", "--context", "kind-c1"},
			"show", []string{"connections", "--context", "kind-c1"}},
		{"the flag after the command wins in its = form", []string{"--kubeconfig", "A", "--context", "X", "join", "--kubeconfig=B"},
			"join", []string{"--kubeconfig=B", "--context=X"}},
		{"before the end of the command's flags", []string{"--contexts", "a,b", "lab-pod", "--x", "--", "cmd", "--context", "c"},
			"lab-pod", []string{"--x", "--contexts=a,b", "--", "cmd", "--context", "c"}},
	} {
		global, cmd, rest, err := splitCommandLine(tt.line)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got := withGlobalFlags(rest, global); cmd != tt.cmd || !slices.Equal(got, tt.args) {
			t.Errorf("%s: %q → %s %q, want %s %q", tt.name, tt.line, cmd, got, tt.cmd, tt.args)
		}
	}
}

func TestGlobalFlagsRefuseWhatTheyDoNotKnow(t *testing.T) {
	for _, tt := range []struct {
		line  []string
		words []string
	}{
		{[]string{"--clusterid", "c1", "join"}, []string{"unknown global flag --clusterid", "--kubeconfig, --context, --contexts", "after it"}},
		{[]string{"--context"}, []string{"--context needs a value"}},
		{[]string{"--context", "c1"}, []string{"a command must follow"}},
		{[]string{"--context", "c1", "--"}, []string{"a command must follow"}},
	} {
		_, _, _, err := splitCommandLine(tt.line)
		for _, w := range tt.words {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %v lacks %q", tt.line, err, w)
			}
		}
	}
	if _, _, _, err := splitCommandLine([]string{"--context", "c", "--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help after a global flag: %v", err)
	}
}

func TestCommandLineExitStatus(t *testing.T) {
	r := runSnorkel(t, nil, "--namespace", "x", "show", "connections")
	if r.code != 2 || !strings.Contains(r.stderr, "unknown global flag --namespace") || !strings.Contains(r.stderr, "global flags, before the command") {
		t.Errorf("an unknown global flag: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = runSnorkel(t, nil, "--context", "kind-c1", "version")
	if r.code != 1 || !strings.Contains(r.stderr, "snorkel version: ") || !strings.Contains(r.stderr, "not defined: -context") {
		t.Errorf("a global flag the command does not take: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = runSnorkel(t, nil, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "snorkel ") {
		t.Errorf("version: exit %d, stdout %q", r.code, r.stdout)
	}
}
