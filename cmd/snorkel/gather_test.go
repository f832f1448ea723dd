package main

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/snorkel-net/snorkel/controller/kubelocal"
	"github.com/snorkel-net/snorkel/controller/kubelocal/kubetest"
)

func TestGatherRefusesWhatSubctlRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--module", "connectivity,lighthouse"}, `invalid argument: "lighthouse" is not a supported module`},
		{[]string{"--type", "logs,traces"}, `invalid argument: "traces" is not a supported type`},
		{[]string{"c1"}, `unexpected argument "c1"`},
	} {
		err := runGather(tc.args, io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("gather %q: %v, want %q…", tc.args, err, tc.want)
		}
	}
}

// TestGatherTarballAsTyped runs the command line a subctl user types, with
// the context before the verb, on a cluster without Snorkel: the
// timestamped tarball replaces the directory and holds the cluster's
// summary, and the missing components are warnings, not a failure.
func TestGatherTarballAsTyped(t *testing.T) {
	srv := kubetest.Start(t, kubelocal.Options{Name: "c1"})[0]
	dir := t.TempDir()
	r := runSnorkelIn(t, dir, nil, "--context", "c1", "gather", "--kubeconfig", srv.Kubeconfig, "--tar", "--module", "connectivity,broker")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"Gathering information from cluster \"c1\"\n ⚠ Snorkel is not installed in context \"c1\"",
		" ⚠ Gathering connectivity logs\n",
		" ⚠ Gathering broker resources\n ⚠ This cluster hosts no broker and has joined none\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "service-discovery") {
		t.Errorf("--module left out service-discovery, but it was gathered:\n%s", r.stdout)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || !regexp.MustCompile(`^submariner-\d{14}\.tar\.gz$`).MatchString(entries[0].Name()) {
		t.Fatalf("the directory holds %v, want only submariner-YYYYMMDDHHMMSS.tar.gz", entries)
	}
	name := entries[0].Name()
	if want := "Files are stored in \"" + name + "\"\n"; !strings.HasSuffix(r.stdout, want) {
		t.Errorf("output does not end with %q:\n%s", want, r.stdout)
	}
	summary := tarFile(t, filepath.Join(dir, name), strings.TrimSuffix(name, ".tar.gz")+"/c1/summary.txt")
	if !strings.Contains(summary, " ⚠ This cluster hosts no broker and has joined none\n") {
		t.Errorf("summary.txt:\n%s", summary)
	}
}

// tarFile is the content of the file name in the gzipped tar file at path.
func tarFile(t *testing.T, path, name string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s has no %s", path, name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return string(data)
		}
	}
}
