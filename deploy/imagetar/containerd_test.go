package imagetar

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// containerdConfig keeps a private containerd's every path under dir and
// leaves out CRI, which the import does not need and which would start
// a CNI and a streaming server.
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
`

// startContainerd runs a containerd of its own for the test and returns
// its socket; it is stopped, by its PID, when the test ends.
func startContainerd(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		t.Skip("containerd is not installed (apt-get install containerd)")
	}
	if _, err := exec.LookPath("ctr"); err != nil {
		t.Skip("ctr is not installed (apt-get install containerd)")
	}
	dir := t.TempDir()
	// A unix socket path has 108 bytes at most; t.TempDir's can be longer.
	sockDir, err := os.MkdirTemp("", "ctrd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "sock")
	cfg := filepath.Join(dir, "config.toml")
	body := fmt.Sprintf(containerdConfig, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, filepath.Join(dir, "opt"))
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
	})
	waitFor(t, "containerd to serve "+sock, func() bool {
		select {
		case <-exited:
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("containerd exited: %s", log)
		default:
		}
		return exec.Command("ctr", "-a", sock, "version").Run() == nil
	})
	return sock
}

// TestContainerdImports imports an archive as the lab does, with the
// node's own ctr, and finds every tag in containerd's k8s.io namespace.
// The import unpacks each layer, which checks it against its diff_id.
func TestContainerdImports(t *testing.T) {
	sock := startContainerd(t)
	bin := buildPause(t)
	pause, err := Pause(bin, "example.test/pause:dev")
	if err != nil {
		t.Fatal(err)
	}
	snorkel, err := Snorkel(bin, "example.test/snorkel:dev")
	if err != nil {
		t.Fatal(err)
	}
	snorkel.Tags = append(snorkel.Tags, "example.test/snorkel:latest")
	file := filepath.Join(t.TempDir(), "images.tar")
	if err := os.WriteFile(file, write(t, pause, snorkel), 0o644); err != nil {
		t.Fatal(err)
	}
	ctr := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ctr", append([]string{"-a", sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ctr("images", "import", file)
	listed := strings.Fields(ctr("images", "ls", "-q"))
	// check's columns: REF TYPE DIGEST STATUS SIZE UNPACKED.
	checked := map[string]string{}
	for _, line := range strings.Split(ctr("images", "check"), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			checked[f[0]] = line
		}
	}
	for _, tag := range []string{"example.test/pause:dev", "example.test/snorkel:dev", "example.test/snorkel:latest"} {
		if !slices.Contains(listed, tag) {
			t.Errorf("ctr images ls lists %q, not %s", listed, tag)
		}
		if line := checked[tag]; !strings.Contains(line, "complete") || !strings.HasSuffix(strings.TrimSpace(line), "true") {
			t.Errorf("ctr images check: %q, want %s complete and unpacked", line, tag)
		}
	}
}
