package imagetar

import (
	"fmt"
	"io/fs"
	"os/exec"
	"sort"
)

// clientPath is the client image's PATH, Debian's default for root.
const clientPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// clientTools are the commands a Submariner tutorial user types in a
// client pod, each with the Debian package that installs it.
var clientTools = []struct{ name, pkg string }{
	{"curl", "curl"},
	{"dig", "bind9-dnsutils"},
	{"nslookup", "bind9-dnsutils"},
	{"ping", "iputils-ping"},
	{"sleep", "coreutils"},
	{"cat", "coreutils"},
}

// shells are the shells /bin/sh may be, smallest first.
var shells = []string{"dash", "bash"}

// Client is a client pod image with the host's own curl, dig, nslookup,
// ping, sleep, cat and sh, the shared libraries and loader they need, and
// the distroless base files. It sleeps until the pod is deleted, so
// `kubectl run client --image=TAG` stays up for `kubectl exec`.
func Client(tag string) (Image, error) {
	files := map[string]File{}
	var binaries []string
	add := func(name, host string) {
		files["/usr/bin/"+name] = File{Path: "/usr/bin/" + name, Mode: 0o755, HostPath: host}
		binaries = append(binaries, host)
	}
	for _, tool := range clientTools {
		p, err := exec.LookPath(tool.name)
		if err != nil {
			return Image{}, fmt.Errorf("imagetar: the client image needs %s: apt-get install %s (%w)", tool.name, tool.pkg, err)
		}
		add(tool.name, p)
	}
	shell := ""
	for _, sh := range shells {
		if p, err := exec.LookPath(sh); err == nil {
			add(sh, p)
			shell = sh
			break
		}
	}
	if shell == "" {
		return Image{}, fmt.Errorf("imagetar: the client image needs a shell: apt-get install dash")
	}
	files["/bin/sh"] = File{Path: "/bin/sh", Mode: fs.ModeSymlink | 0o777, Link: "/usr/bin/" + shell}

	libs, err := sharedObjects(binaries)
	if err != nil {
		return Image{}, err
	}
	for _, lib := range libs {
		chain, err := hostFiles(lib)
		if err != nil {
			return Image{}, err
		}
		for _, f := range chain {
			files[f.Path] = f
		}
	}
	for _, f := range baseFiles() {
		files[f.Path] = f
	}

	img := Image{Tags: []string{tag}, Env: []string{clientPath}, Cmd: []string{"sleep", "infinity"}}
	for _, f := range files {
		img.Files = append(img.Files, f)
	}
	sort.Slice(img.Files, func(i, j int) bool { return img.Files[i].Path < img.Files[j].Path })
	return img, nil
}
