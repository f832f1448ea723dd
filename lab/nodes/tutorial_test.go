package nodes

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/snorkel-net/snorkel/deploy"
)

// TestTutorialOnRealNodes runs both parts of the tutorial on real
// kubelet nodes, as `make node-lab` does: Snorkel installed by the CLI
// from the image, the checks from a client pod on a worker node, and a
// teardown that leaves nothing behind.
func TestTutorialOnRealNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, cgroups, containerd")
	}
	toolsDir := os.Getenv("SNORKEL_KUBE_TOOLS")
	if toolsDir == "" {
		t.Skip("SNORKEL_KUBE_TOOLS is not set; make test sets it to the tools make tools builds")
	}
	tools := ToolsIn(toolsDir, envOr("SNORKEL_KUBE_VERSION", "v1.37.2"))
	if err := tools.check(); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("SNORKEL_COREDNS") == "" {
		t.Fatal("SNORKEL_COREDNS is not set; make test sets it")
	}
	bin := t.TempDir()
	snorkel := filepath.Join(bin, "snorkel")
	pause := filepath.Join(bin, "pause")
	build(t, snorkel, "-ldflags", "-X main.version=node-lab-test", "github.com/snorkel-net/snorkel/cmd/snorkel")
	build(t, pause, "github.com/snorkel-net/snorkel/deploy/imagetar/pause")
	before, err := readSysctls()
	if err != nil {
		t.Fatal(err)
	}
	// join's default cable driver is esp, as subctl's is libreswan; the
	// first part runs WireGuard, whose UAPI socket needs the agent's memory
	// volume under the read-only root.
	cable := map[string]string{"tutorial": "wireguard"}
	for _, sc := range Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			defer cancel()
			var out bytes.Buffer
			stateDir := filepath.Join(t.TempDir(), "lab")
			o := Options{
				Scenario: sc,
				StateDir: stateDir,
				Prefix:   "snkt-",
				Tools:    tools,
				Images:   Images{Snorkel: snorkel, SnorkelImage: deploy.ImageName + ":node-lab-test", Pause: pause, CoreDNS: os.Getenv("SNORKEL_COREDNS")},
				Out:      &out,
			}
			l, err := Up(ctx, o)
			if err != nil {
				t.Log("\n" + out.String())
				t.Fatal(err)
			}
			tut := &Tutorial{Lab: l, Snorkel: snorkel, Kubectl: tools.Kubectl, SnorkelImage: o.Images.SnorkelImage, CableDriver: cable[sc.Name], Out: &out}
			terr := tut.Run(ctx)
			var status bytes.Buffer
			serr := Status(ctx, stateDir, &status)
			derr := l.Down(&out)
			t.Log("\n" + out.String() + status.String())
			for _, err := range []error{terr, serr, derr} {
				if err != nil {
					t.Error(err)
				}
			}
			// The figures the manifests' resource requests come from.
			for _, c := range []string{" agent ", " route-agent ", " dnsd "} {
				if !regexp.MustCompile(c + `.*CPU .*RSS +[1-9][0-9.]* MiB, peak`).MatchString(status.String()) {
					t.Errorf("status shows no usage of%s:\n%s", c, status.String())
				}
			}
			verified := "✓ " + sc.Clusters[0].Name + " → " + sc.Clusters[1].Name + ": "
			wants := []string{"✓ http  whereami-cs.sample.svc.clusterset.local answers from", verified, "all checks passed", "removed " + stateDir}
			if !sc.GlobalnetRange.IsValid() {
				wants = append(wants, "✓ http  whereami-vip.sample.svc.clusterset.local (the VIP) answers from "+sc.Clusters[0].Name)
			}
			for _, want := range wants {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the run did not print %q", want)
				}
			}
			assertNothingLeft(t, o)
		})
	}
	after, err := readSysctls()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("host sysctl %s is %s, was %s before the lab", k, after[k], v)
		}
	}
}

// assertNothingLeft checks that the teardown left no namespace, cgroup,
// mount, process or file of the lab.
func assertNothingLeft(t *testing.T, o Options) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), o.Prefix) {
		t.Errorf("namespaces left: %s", out)
	}
	if _, err := os.Stat(o.StateDir); !os.IsNotExist(err) {
		t.Errorf("state directory %s left: %v", o.StateDir, err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), o.StateDir) {
		t.Errorf("mounts left under %s", o.StateDir)
	}
	hs, err := cgroupHierarchies()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range o.Scenario.allNodes() {
		for _, h := range hs {
			if _, err := os.Stat(filepath.Join(h, o.Prefix+n.Name)); !os.IsNotExist(err) {
				t.Errorf("cgroup %s left in %s", o.Prefix+n.Name, h)
			}
		}
		if _, err := os.Stat(filepath.Join(agentStateDir, n.Name)); !os.IsNotExist(err) {
			t.Errorf("%s left", filepath.Join(agentStateDir, n.Name))
		}
	}
	if _, err := os.Stat("/sys/class/net/" + o.Prefix + "host"); !os.IsNotExist(err) {
		t.Errorf("the host's veth %shost is left", o.Prefix)
	}
}

func build(t *testing.T, out string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"build", "-trimpath", "-o", out}, args...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", out, err, b)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
