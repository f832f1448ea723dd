package deploy

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// staticBinaryEnv names the binary TestStaticBinary checks: `make static`
// builds it with build-static.sh, as the image's build stage does, and
// runs the test with it.
const staticBinaryEnv = "SNORKEL_STATIC_BINARY"

// TestDockerfileBuildsWithTheScript checks that the image's build stage
// runs build-static.sh, the script `make static` checks, and ships only
// its output on a static base.
func TestDockerfileBuildsWithTheScript(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var froms, runs, copies []string
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "FROM "):
			froms = append(froms, line)
		case strings.HasPrefix(line, "RUN "):
			runs = append(runs, line)
		case strings.HasPrefix(line, "COPY --from="):
			copies = append(copies, line)
		}
	}
	if len(froms) != 2 || froms[0] != "FROM golang:1.26 AS build" ||
		(!strings.HasPrefix(froms[1], "FROM gcr.io/distroless/static") && froms[1] != "FROM scratch") {
		t.Errorf("stages %q, want a golang:1.26 build stage and a static final one", froms)
	}
	if len(runs) == 0 || runs[len(runs)-1] != `RUN deploy/build-static.sh /out/snorkel "$VERSION"` {
		t.Errorf("the build stage's last step is %q, want deploy/build-static.sh", runs)
	}
	if len(copies) != 1 || copies[0] != "COPY --from=build /out/snorkel /snorkel" || !strings.Contains(string(b), `ENTRYPOINT ["/snorkel"]`) {
		t.Errorf("the final stage copies %q; want only /out/snorkel as the entry point", copies)
	}
}

// TestStaticBinary checks the binary build-static.sh made: no dynamic
// loader or shared library, the version it was given, and every command
// and flag the manifests and the Kind lab run it with.
func TestStaticBinary(t *testing.T) {
	bin := os.Getenv(staticBinaryEnv)
	if bin == "" {
		t.Skip(staticBinaryEnv + " is not set: `make static` builds the binary with deploy/build-static.sh and runs this test on it")
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has a %s program header: it is dynamically linked", bin, p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v (%v)", bin, libs, err)
	}
	if want := os.Getenv("SNORKEL_STATIC_VERSION"); want != "" {
		out, err := exec.Command(bin, "version").Output()
		if err != nil || strings.TrimSpace(string(out)) != "snorkel "+want {
			t.Errorf("%s version: %q (%v), want snorkel %s", bin, out, err, want)
		}
	}
	var commands [][]string
	objs, err := Manifests("member", ManifestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
			commands = append(commands, args)
		}
	}
	commands = append(commands, []string{"lab-pod", "whereami", "--name=x", "--cluster=x", "--listen=:8080"})
	for _, args := range commands {
		checkFlags(t, bin, args)
	}
}

// checkFlags runs `bin SUBCOMMAND... -h` for args and checks that its
// help lists each --flag of args.
func checkFlags(t *testing.T, bin string, args []string) {
	t.Helper()
	var sub []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		sub = append(sub, a)
	}
	out, _ := exec.Command(bin, append(sub, "-h")...).CombinedOutput()
	for _, a := range args[len(sub):] {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(name) + `(\s|$)`).Match(out) {
			t.Errorf("snorkel %s has no flag --%s, which a manifest passes:\n%s", strings.Join(sub, " "), name, out)
		}
	}
}

// fakeGo stands in for go: it logs its arguments and writes the file an
// -o names, as go build and go run ./deploy/mkimage would.
const fakeGo = `#!/bin/sh
echo "go $*" >> "$LOG"
while [ $# -gt 0 ]; do
	if [ "$1" = -o ]; then echo built > "$2"; fi
	shift
done
`

// TestImageScriptWritesAnArchiveWithoutAnEngine runs image.sh where no
// engine works but Go is installed: it must build the static binary with
// build-static.sh, write the archive with mkimage under the image's name,
// and say how to load it.
func TestImageScriptWritesAnArchiveWithoutAnEngine(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	for _, tc := range []struct {
		name       string
		fakeDocker string
		why        string
	}{
		{"no engine", "", "docker: not installed"},
		{"docker without its daemon", failingDocker, "docker: installed, but it cannot reach its engine"},
	} {
		// build-static.sh runs as its own bash script.
		dir := pathWith(t, tc.fakeDocker, "bash", "dirname", "mkdir")
		if err := os.WriteFile(filepath.Join(dir, "go"), []byte(fakeGo), 0o755); err != nil {
			t.Fatal(err)
		}
		state := t.TempDir()
		log, archive := filepath.Join(state, "log"), filepath.Join(state, "out", "snorkel-image.tar")
		binary := filepath.Join(state, "out", "snorkel-static")
		cmd := exec.Command(bash, "image.sh", "example.test/snorkel:v9")
		cmd.Env = []string{"PATH=" + dir, "LOG=" + log, "ARCHIVE=" + archive, "VERSION=v9"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", tc.name, err, out)
			continue
		}
		b, _ := os.ReadFile(log)
		calls := strings.Split(strings.TrimSpace(string(b)), "\n")
		want := []string{
			"go build -trimpath -ldflags -s -w -X main.version=v9 -o " + binary + " ./cmd/snorkel",
			"go run ./deploy/mkimage -o " + archive + " --snorkel " + binary + " --snorkel-tag example.test/snorkel:v9",
		}
		if strings.Join(calls, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: ran\n%s\nwant\n%s", tc.name, strings.Join(calls, "\n"), strings.Join(want, "\n"))
		}
		for _, w := range []string{tc.why, "ctr -n k8s.io images import " + archive, "docker load -i " + archive, "kind load image-archive " + archive} {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out)
			}
		}
	}
}
