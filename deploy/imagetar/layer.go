package imagetar

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// epoch is every entry's modification time: a fixed time keeps a layer's
// digest a function of its files alone.
var epoch = time.Unix(0, 0)

// buildLayer returns the uncompressed layer tar of files and the
// directories above them, sorted by path so that a parent precedes its
// children and the same files always make the same bytes.
func buildLayer(files []File) ([]byte, error) {
	byPath := make(map[string]File, len(files))
	for _, f := range files {
		if err := f.check(); err != nil {
			return nil, err
		}
		if _, dup := byPath[f.Path]; dup {
			return nil, fmt.Errorf("%s is in the image twice", f.Path)
		}
		byPath[f.Path] = f
	}
	for _, f := range files {
		for dir := path.Dir(f.Path); dir != "/"; dir = path.Dir(dir) {
			parent, ok := byPath[dir]
			if !ok {
				byPath[dir] = File{Path: dir, Mode: fs.ModeDir | 0o755}
				continue
			}
			if !parent.Mode.IsDir() {
				return nil, fmt.Errorf("%s needs %s to be a directory, but it is a %s", f.Path, dir, parent.Mode.Type())
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		if err := writeFile(tw, byPath[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// check says whether f can go into a layer.
func (f File) check() error {
	if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
		return fmt.Errorf("file path %q is not an absolute, clean path below /", f.Path)
	}
	switch f.Mode.Type() {
	case fs.ModeDir:
	case fs.ModeSymlink:
		if f.Link == "" {
			return fmt.Errorf("%s is a symlink with no target", f.Path)
		}
	case 0:
		if f.HostPath != "" && f.Data != nil {
			return fmt.Errorf("%s has both Data and HostPath", f.Path)
		}
	default:
		return fmt.Errorf("%s is a %s; an image holds directories, symlinks and regular files", f.Path, f.Mode.Type())
	}
	return nil
}

// writeFile writes f's header and, for a regular file, its bytes.
func writeFile(tw *tar.Writer, f File) error {
	hdr := &tar.Header{
		Name:    strings.TrimPrefix(f.Path, "/"),
		Mode:    tarMode(f.Mode),
		ModTime: epoch,
	}
	var data []byte
	switch f.Mode.Type() {
	case fs.ModeDir:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	case fs.ModeSymlink:
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = f.Link
	default:
		hdr.Typeflag = tar.TypeReg
		data = f.Data
		if f.HostPath != "" {
			b, err := os.ReadFile(f.HostPath)
			if err != nil {
				return err
			}
			data = b
		}
		hdr.Size = int64(len(data))
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	return nil
}

// tarMode turns Go's mode bits into the Unix ones a tar header carries;
// /tmp's sticky bit is why this is not just Perm.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
