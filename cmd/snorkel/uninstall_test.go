package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestUninstallAndRecoverArguments checks what the two commands refuse
// before they reach a cluster.
func TestUninstallAndRecoverArguments(t *testing.T) {
	for _, tt := range []struct {
		name  string
		run   func([]string) error
		args  []string
		words []string
	}{
		{"uninstall in another namespace", func(a []string) error { return runUninstall(a, strings.NewReader(""), &bytes.Buffer{}) },
			[]string{"--namespace", "other", "--yes"}, []string{`--namespace "other"`, "submariner-operator"}},
		{"uninstall with an argument", func(a []string) error { return runUninstall(a, strings.NewReader(""), &bytes.Buffer{}) },
			[]string{"-y", "c1"}, []string{`unexpected argument "c1"`}},
		{"recover with a bad broker URL", func(a []string) error { return runRecoverBrokerInfo(a, &bytes.Buffer{}) },
			[]string{"--broker-url", "ftp://broker"}, []string{"--broker-url", "https://broker.example:6443"}},
	} {
		err := tt.run(tt.args)
		for _, w := range tt.words {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v does not mention %q", tt.name, err, w)
			}
		}
	}
}
