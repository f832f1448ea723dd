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

// TestExportUseClustersetIP checks subctl's --use-clusterset-ip: absent
// leaves the cluster's default, bare means true, =false opts out, and
// anything else is refused naming the flag; unexport has no such flag.
func TestExportUseClustersetIP(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"service", "web"}, ""},
		{[]string{"service", "web", "--use-clusterset-ip"}, "true"},
		{[]string{"--use-clusterset-ip", "service", "web"}, "true"},
		{[]string{"service", "web", "--use-clusterset-ip=false"}, "false"},
		{[]string{"service", "web", "--use-clusterset-ip=TRUE"}, "true"},
	} {
		c, err := parseServiceArgs("export", tc.args, io.Discard)
		if err != nil || c.UseClustersetIP != tc.want || c.Name != "web" {
			t.Errorf("%q: %+v, %v; want UseClustersetIP %q", tc.args, c, err, tc.want)
		}
	}
	if _, err := parseServiceArgs("export", []string{"service", "web", "--use-clusterset-ip=maybe"}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "use-clusterset-ip") || !strings.Contains(err.Error(), "true or false") {
		t.Errorf("--use-clusterset-ip=maybe: %v, want a refusal naming the flag", err)
	}
	if _, err := parseServiceArgs("unexport", []string{"service", "web", "--use-clusterset-ip"}, io.Discard); err == nil {
		t.Error("unexport accepted --use-clusterset-ip")
	}
}
