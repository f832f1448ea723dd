package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunNamesTheFlagAndTheFix(t *testing.T) {
	out := filepath.Join(t.TempDir(), "images.tar")
	notStatic := filepath.Join(t.TempDir(), "snorkel")
	if err := os.WriteFile(notStatic, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no output", []string{"--client-tag", "c:1"}, []string{"-o is required"}},
		{"no image", []string{"-o", out}, []string{"no image asked for", "--snorkel"}},
		{"a tag without its binary", []string{"-o", out, "--coredns-tag", "c:1"}, []string{"--coredns-tag without --coredns"}},
		{"an empty client tag", []string{"-o", out, "--client-tag", ""}, []string{"--client-tag is empty"}},
		{"a binary that is not static", []string{"-o", out, "--snorkel", notStatic}, []string{"--snorkel:", notStatic, "deploy/build-static.sh"}},
		{"a stray argument", []string{"-o", out, "extra"}, []string{`unexpected argument "extra"`}},
	} {
		err := run(tc.args)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want one saying %q", tc.name, err, w)
			}
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed run left %s behind (%v)", out, err)
	}
}
