package imagetar

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// clientLayer builds the client image and returns its layer, skipping
// when the host lacks a tool (the image copies the host's).
func clientLayer(t *testing.T) layer {
	t.Helper()
	for _, tool := range clientTools {
		if _, err := exec.LookPath(tool.name); err != nil {
			t.Skipf("%s is not installed (apt-get install %s); the client image copies the host's", tool.name, tool.pkg)
		}
	}
	img, err := Client("example.test/client:dev")
	if err != nil {
		t.Fatal(err)
	}
	m, c, l := readArchive(t, write(t, img)).only(t)
	if len(m.RepoTags) != 1 || m.RepoTags[0] != "example.test/client:dev" || strings.Join(c.Config.Env, " ") != clientPath {
		t.Errorf("tags %q, env %q", m.RepoTags, c.Config.Env)
	}
	return l
}

// resolve follows symlinks in the image, as the kernel would, to a
// regular file; the client image has no symlinked directories.
func (l layer) resolve(p string) (string, bool) {
	for range maxLinks {
		e, ok := l[p]
		if !ok {
			return "", false
		}
		if e.hdr.Typeflag == tar.TypeReg {
			return p, true
		}
		if e.hdr.Typeflag != tar.TypeSymlink {
			return "", false
		}
		if path.IsAbs(e.hdr.Linkname) {
			p = e.hdr.Linkname
		} else {
			p = path.Join(path.Dir(p), e.hdr.Linkname)
		}
	}
	return "", false
}

func TestClientHasEveryLibrary(t *testing.T) {
	l := clientLayer(t)
	for _, name := range []string{"/usr/bin/curl", "/usr/bin/dig", "/usr/bin/nslookup", "/usr/bin/ping", "/usr/bin/sleep", "/usr/bin/cat", "/bin/sh", "/etc/nsswitch.conf", "/etc/passwd", "/etc/group"} {
		if _, ok := l.resolve(name); !ok {
			t.Errorf("%s is not in the image", name)
		}
	}
	dynamic := 0
	for p, e := range l {
		if e.hdr.Typeflag != tar.TypeReg || !bytes.HasPrefix(e.data, []byte(elf.ELFMAG)) {
			continue
		}
		f, err := elf.NewFile(bytes.NewReader(e.data))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		interp, err := interpreter(f)
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
		if interp != "" {
			dynamic++
			if _, ok := l.resolve(interp); !ok {
				t.Errorf("%s's loader %s is not in the image", p, interp)
			}
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
		for _, lib := range needed {
			found := false
			for _, dir := range libDirs {
				if _, ok := l.resolve(path.Join(dir, lib)); ok {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s needs %s, which is in none of the image's %v", p, lib, libDirs)
			}
		}
	}
	if dynamic == 0 {
		t.Error("no dynamic executable in the image: the check above checked nothing")
	}
}

// TestClientRunsInChroot runs each tool in the image's filesystem, which
// is what finding its libraries is for.
func TestClientRunsInChroot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	root := t.TempDir()
	extract(t, clientLayer(t), root)
	for _, args := range [][]string{
		{"/bin/sh", "-c", "echo ok"},
		{"curl", "--version"},
		{"dig", "-v"},
		{"nslookup", "-version"},
		{"ping", "-V"},
		{"cat", "/etc/nsswitch.conf"},
		{"sleep", "0"},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = []string{clientPath}
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		if args[0][0] != '/' {
			cmd.Path = "/usr/bin/" + args[0]
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s in the image: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// extract writes a layer's entries below root.
func extract(t *testing.T, l layer, root string) {
	t.Helper()
	paths := make([]string, 0, len(l))
	for p := range l {
		paths = append(paths, p)
	}
	// Sorted, a directory comes before what it holds.
	slices.Sort(paths)
	for _, p := range paths {
		e, dst := l[p], filepath.Join(root, p)
		var err error
		switch e.hdr.Typeflag {
		case tar.TypeDir:
			err = os.Mkdir(dst, os.FileMode(e.hdr.Mode).Perm())
		case tar.TypeSymlink:
			err = os.Symlink(e.hdr.Linkname, dst)
		default:
			err = os.WriteFile(dst, e.data, os.FileMode(e.hdr.Mode).Perm())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
