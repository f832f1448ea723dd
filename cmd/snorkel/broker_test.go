package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestJoinNeedsOneBrokerInformationFile(t *testing.T) {
	if err := runJoin([]string{"--clusterid", "c3"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "broker information file") {
		t.Errorf("no file: %v", err)
	}
}
