package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestExportArguments checks the arguments export and unexport refuse
// before they reach a cluster.
func TestExportArguments(t *testing.T) {
	kubeconfig := "kubeconfig"
	for _, tt := range []struct {
		name  string
		cmd   func([]string, io.Writer) error
		args  []string
		words []string
	}{
		{"no name", runExport, []string{"service", "--kubeconfig", kubeconfig}, []string{"one service name"}},
		{"two names", runUnexport, []string{"service", "a", "b", "--kubeconfig", kubeconfig}, []string{"one service name"}},
		{"not a service", runExport, []string{"deployment", "web", "--kubeconfig", kubeconfig}, []string{"service NAME"}},
		{"an unknown flag", runExport, []string{"service", "web", "--cluster", "c2"}, []string{"-cluster"}},
	} {
		err := tt.cmd(tt.args, &bytes.Buffer{})
		for _, w := range tt.words {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v does not mention %q", tt.name, err, w)
			}
		}
	}
}

// TestExportTakesFlagsAroundTheName checks that flags may come before or
// after "service NAME", and that -n and --namespace are one flag.
func TestExportTakesFlagsAroundTheName(t *testing.T) {
	for _, args := range [][]string{
		{"service", "web", "-n", "cli", "--kubeconfig", "k", "--context", "c2"},
		{"--kubeconfig", "k", "--context", "c2", "service", "--namespace", "cli", "web"},
	} {
		c, err := parseServiceArgs("export", args, io.Discard)
		if err != nil || c.Name != "web" || c.Namespace != "cli" || c.Kubeconfig != "k" || c.Context != "c2" {
			t.Errorf("%q: %+v, %v", args, c, err)
		}
	}
}
