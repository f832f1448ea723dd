package imagetar

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitFor polls cond until it holds or a deadline generous enough for a
// busy two-core machine passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// notifying says whether Go program pid has called signal.Notify. A
// SIGTERM that comes earlier meets the runtime's own handler, which dies
// of it, and the runtime installs that handler for every signal at start,
// so SigCgt cannot tell. What Notify alone starts is the runtime's
// signal-forwarding thread, which blocks every signal it may (SIGUSR1
// among them) but not those that kill (SIGTERM); signal.Notify marks the
// signal wanted before it starts that thread. Threads block everything
// for a moment while the runtime clones them, SIGTERM too.
func notifying(pid int) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			mask, ok := strings.CutPrefix(line, "SigBlk:\t")
			if !ok {
				continue
			}
			var m uint64
			if _, err := fmt.Sscanf(mask, "%x", &m); err == nil && m&(1<<(syscall.SIGUSR1-1)) != 0 && m&(1<<(syscall.SIGTERM-1)) == 0 {
				return true
			}
		}
	}
	return false
}

func TestPauseExitsZeroOnSIGTERM(t *testing.T) {
	bin := buildPause(t)
	if err := requireStatic(bin, "fix"); err != nil {
		t.Fatalf("the pause program is not static: %v", err)
	}
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pause to call signal.Notify", func() bool { return notifying(cmd.Process.Pid) })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("pause after SIGTERM: %v, want exit status 0", err)
	}
}

func TestStaticRecipes(t *testing.T) {
	bin := buildPause(t)
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	_, haveCA := os.Stat(caBundle)
	for _, tc := range []struct {
		recipe func(binary, tag string) (Image, error)
		path   string
	}{
		{Snorkel, "/snorkel"},
		{Pause, "/pause"},
		{CoreDNS, "/coredns"},
	} {
		img, err := tc.recipe(bin, "example.test/img:dev")
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		m, c, l := readArchive(t, write(t, img)).only(t)
		if strings.Join(m.RepoTags, ",") != "example.test/img:dev" || strings.Join(c.Config.Entrypoint, " ") != tc.path {
			t.Errorf("%s: tags %q, entry point %q", tc.path, m.RepoTags, c.Config.Entrypoint)
		}
		if e := l[tc.path]; e.hdr == nil || e.hdr.Mode != 0o755 || !bytes.Equal(e.data, want) {
			t.Errorf("%s is not the binary, mode 0755", tc.path)
		}
		if !strings.Contains(string(l["/etc/passwd"].data), "nonroot:x:65532:65532:") ||
			!strings.Contains(string(l["/etc/group"].data), "nonroot:x:65532:") {
			t.Errorf("%s: /etc/passwd or /etc/group has no nonroot (65532), which dnsd runs as", tc.path)
		}
		if e := l["/tmp"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeDir || e.hdr.Mode != 0o1777 {
			t.Errorf("%s: /tmp is not a directory with mode 1777", tc.path)
		}
		if _, ok := l[caBundle]; ok != (haveCA == nil) {
			t.Errorf("%s: CA bundle in the image %v, on the host %v", tc.path, ok, haveCA == nil)
		}
	}
}

func TestStaticRecipesRefuse(t *testing.T) {
	dynamic, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("no cat to stand for a dynamic binary")
	}
	notELF := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		recipe func(binary, tag string) (Image, error)
		binary string
		want   []string
	}{
		{"a dynamic snorkel", Snorkel, dynamic, []string{dynamic, "dynamically linked", "deploy/build-static.sh"}},
		{"a dynamic coredns", CoreDNS, dynamic, []string{dynamic, "dynamically linked", "CGO_ENABLED=0"}},
		{"a script as pause", Pause, notELF, []string{notELF, "not an ELF executable", "./deploy/imagetar/pause"}},
		{"a missing binary", Snorkel, "/nonexistent/snorkel", []string{"/nonexistent/snorkel", "deploy/build-static.sh"}},
	} {
		_, err := tc.recipe(tc.binary, "t")
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want one saying %q", tc.name, err, w)
			}
		}
	}
}
