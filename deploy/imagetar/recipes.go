package imagetar

import (
	"io/fs"
	"os"
)

// caBundle is where Debian keeps the CA certificates, and where Go's
// crypto/x509 and Debian's curl look first.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// The users and groups of gcr.io/distroless/static-debian12, which the
// manifests rely on: the agent runs as root, dnsd as nonroot (65532).
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:65532:\n"
	// Without nsswitch.conf glibc asks DNS before /etc/hosts; Go reads it too.
	nsswitch = "hosts: files dns\n"
)

// baseFiles are what a distroless static base gives an image: users,
// name-service order, the host's CA certificates if it has them, and a
// /tmp anyone can write to.
func baseFiles() []File {
	files := []File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Path: "/etc/group", Mode: 0o644, Data: []byte(group)},
		{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte(nsswitch)},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
	}
	if _, err := os.Stat(caBundle); err == nil {
		files = append(files, File{Path: caBundle, Mode: 0o644, HostPath: caBundle})
	}
	return files
}

// Snorkel is deploy/Dockerfile's image: the static binary that
// deploy/build-static.sh builds, as the entry point, on a distroless base.
func Snorkel(binary, tag string) (Image, error) {
	return staticImage(binary, tag, "/snorkel", "build it with deploy/build-static.sh OUT")
}

// Pause is the pod sandbox image containerd's sandbox_image names: the
// program in ./pause, which waits to be stopped and holds the pod's
// namespaces meanwhile.
func Pause(binary, tag string) (Image, error) {
	return staticImage(binary, tag, "/pause", "build it with CGO_ENABLED=0 go build -o OUT ./deploy/imagetar/pause")
}

// CoreDNS is a cluster DNS image with the coredns binary as its entry
// point, as CoreDNS's own image has.
func CoreDNS(binary, tag string) (Image, error) {
	return staticImage(binary, tag, "/coredns", "build it with CGO_ENABLED=0 go build in CoreDNS's module")
}

// staticImage is an image whose only program is binary, at path in the
// image, on the distroless base files.
func staticImage(binary, tag, path, fix string) (Image, error) {
	if err := requireStatic(binary, fix); err != nil {
		return Image{}, err
	}
	return Image{
		Tags:       []string{tag},
		Entrypoint: []string{path},
		Files:      append(baseFiles(), File{Path: path, Mode: 0o755, HostPath: binary}),
	}, nil
}
