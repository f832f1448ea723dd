package imagetar

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// libDirs are where the Debian amd64 loader looks for a library it has
// no path for, in its order; the client image keeps each library at the
// path it was found at, so the loader finds it there again.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64"}

// maxLinks bounds a symlink chain, as the kernel's 40 does (ELOOP).
const maxLinks = 40

// requireStatic returns an error unless binary is an amd64 ELF executable
// with no dynamic loader: the images that ship it have no libc. fix says
// how to build a binary that passes.
func requireStatic(binary, fix string) error {
	f, err := elf.Open(binary)
	if err != nil {
		return fmt.Errorf("imagetar: %s is not an ELF executable (%w); %s", binary, err, fix)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("imagetar: %s is built for %s, and the images are %s/%s; %s with GOARCH=%s", binary, f.Machine, imageOS, imageArch, fix, imageArch)
	}
	interp, err := interpreter(f)
	if err != nil {
		return fmt.Errorf("imagetar: %s: %w", binary, err)
	}
	if interp != "" {
		return fmt.Errorf("imagetar: %s is dynamically linked (it needs the loader %s), and the image has no libc; %s", binary, interp, fix)
	}
	return nil
}

// interpreter returns f's PT_INTERP, the loader the kernel starts a
// dynamic executable with, or "" for a static one.
func interpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return "", fmt.Errorf("read PT_INTERP: %w", err)
		}
		return strings.TrimRight(string(b), "\x00"), nil
	}
	return "", nil
}

// sharedObjects returns the host paths of the loaders and libraries that
// binaries need, following DT_NEEDED until nothing new turns up, as the
// loader would resolve them.
func sharedObjects(binaries []string) ([]string, error) {
	seen := map[string]bool{}
	var found []string
	queue := append([]string(nil), binaries...)
	for len(queue) > 0 {
		bin := queue[0]
		queue = queue[1:]
		f, err := elf.Open(bin)
		if err != nil {
			return nil, fmt.Errorf("imagetar: %w", err)
		}
		interp, err := interpreter(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("imagetar: %s: %w", bin, err)
		}
		needed, err := f.ImportedLibraries()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("imagetar: %s: DT_NEEDED: %w", bin, err)
		}
		deps := make([]string, 0, len(needed)+1)
		if interp != "" {
			deps = append(deps, interp)
		}
		for _, name := range needed {
			p, err := findLibrary(name)
			if err != nil {
				return nil, fmt.Errorf("imagetar: %s needs %s: %w", bin, name, err)
			}
			deps = append(deps, p)
		}
		for _, p := range deps {
			if !seen[p] {
				seen[p] = true
				found = append(found, p)
				queue = append(queue, p)
			}
		}
	}
	return found, nil
}

// findLibrary returns where the loader finds the library name.
func findLibrary(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range libDirs {
		p := path.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("it is in none of %s", strings.Join(libDirs, ", "))
}

// hostFiles returns the image files that make p what it is on the host:
// a regular file is copied; a symlink is kept, with the chain of files it
// leads to, so a library's soname link and its real file both land.
func hostFiles(p string) ([]File, error) {
	var files []File
	for range maxLinks {
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, fmt.Errorf("imagetar: %w", err)
		}
		if fi.Mode().Type() != os.ModeSymlink {
			if !fi.Mode().IsRegular() {
				return nil, fmt.Errorf("imagetar: %s is a %s, not a regular file", p, fi.Mode().Type())
			}
			return append(files, File{Path: p, Mode: fi.Mode().Perm(), HostPath: p}), nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			return nil, fmt.Errorf("imagetar: %w", err)
		}
		files = append(files, File{Path: p, Mode: os.ModeSymlink | 0o777, Link: target})
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(p), target)
		}
		p = target
	}
	return nil, fmt.Errorf("imagetar: %s: more than %d symlinks", files[0].Path, maxLinks)
}
