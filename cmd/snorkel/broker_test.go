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

func TestJoinImageFromSubctlsFlags(t *testing.T) {
	const def = "ghcr.io/snorkel-net/snorkel:dev"
	for _, tc := range []struct {
		name                      string
		set                       []string
		repository, tag, override string
		want                      string
	}{
		{"no flag keeps the default", nil, "ghcr.io/snorkel-net", "dev", "", def},
		{"--repository and --version make the image", []string{"repository", "version"}, "quay.io/example/", "0.1", "", "quay.io/example/snorkel:0.1"},
		{"--version alone keeps the repository", []string{"version"}, "ghcr.io/snorkel-net", "0.2", "", "ghcr.io/snorkel-net/snorkel:0.2"},
		{"--image-override snorkel=REF is the image", []string{"image-override"}, "ghcr.io/snorkel-net", "dev", "snorkel=registry.local/snorkel@sha256:abc", "registry.local/snorkel@sha256:abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := map[string]bool{}
			for _, f := range tc.set {
				set[f] = true
			}
			image := def
			if err := joinImage(&image, set, tc.repository, tc.tag, tc.override); err != nil || image != tc.want {
				t.Errorf("image %q, %v; want %q", image, err, tc.want)
			}
		})
	}
}
