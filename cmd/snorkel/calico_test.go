package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCalicoNamesItsSubcommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pools"}, "usage"},
	} {
		if err := runCalico(tc.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
