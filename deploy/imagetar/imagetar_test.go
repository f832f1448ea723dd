package imagetar

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// testImages are two images that share nothing but the archive, with a
// file of every kind and a host file.
func testImages(t *testing.T) []Image {
	t.Helper()
	host := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(host, []byte("#!/bin/sh\necho host\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return []Image{
		{
			Tags:       []string{"example.test/a:1", "example.test/a:latest"},
			Entrypoint: []string{"/bin/tool"},
			Cmd:        []string{"--flag"},
			Env:        []string{"PATH=/bin"},
			User:       "65532",
			WorkingDir: "/work",
			Files: []File{
				{Path: "/bin/tool", Mode: 0o755, HostPath: host},
				{Path: "/etc/deep/nested/conf", Mode: 0o600, Data: []byte("x=1\n")},
				{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
				{Path: "/bin/alias", Mode: fs.ModeSymlink | 0o777, Link: "tool"},
				{Path: "/empty", Mode: 0o644},
			},
		},
		{Tags: []string{"example.test/b:2"}, Files: []File{{Path: "/b", Mode: 0o644, Data: []byte("b")}}},
	}
}

func TestWriteReadsBack(t *testing.T) {
	a := readArchive(t, write(t, testImages(t)...))
	if len(a.manifest) != 2 {
		t.Fatalf("%d images in manifest.json, want 2", len(a.manifest))
	}
	m := a.manifest[0]
	if !reflect.DeepEqual(m.RepoTags, []string{"example.test/a:1", "example.test/a:latest"}) {
		t.Errorf("RepoTags %q", m.RepoTags)
	}
	c := a.configs[m.Config]
	want := containerConfig{User: "65532", Env: []string{"PATH=/bin"}, Entrypoint: []string{"/bin/tool"}, Cmd: []string{"--flag"}, WorkingDir: "/work"}
	if c.OS != "linux" || c.Architecture != "amd64" || !reflect.DeepEqual(c.Config, want) {
		t.Errorf("config %+v", c)
	}

	l := a.layers[m.Layers[0]]
	for _, tc := range []struct {
		path     string
		typeflag byte
		mode     int64
		data     string
		link     string
	}{
		{"/bin", tar.TypeDir, 0o755, "", ""},
		{"/bin/tool", tar.TypeReg, 0o755, "#!/bin/sh\necho host\n", ""},
		{"/bin/alias", tar.TypeSymlink, 0o777, "", "tool"},
		{"/etc", tar.TypeDir, 0o755, "", ""},
		{"/etc/deep", tar.TypeDir, 0o755, "", ""},
		{"/etc/deep/nested", tar.TypeDir, 0o755, "", ""},
		{"/etc/deep/nested/conf", tar.TypeReg, 0o600, "x=1\n", ""},
		{"/tmp", tar.TypeDir, 0o1777, "", ""},
		{"/empty", tar.TypeReg, 0o644, "", ""},
	} {
		e, ok := l[tc.path]
		if !ok {
			t.Errorf("%s is not in the layer", tc.path)
			continue
		}
		if e.hdr.Typeflag != tc.typeflag || e.hdr.Mode != tc.mode || string(e.data) != tc.data || e.hdr.Linkname != tc.link {
			t.Errorf("%s: type %c mode %o data %q link %q, want %c %o %q %q",
				tc.path, e.hdr.Typeflag, e.hdr.Mode, e.data, e.hdr.Linkname, tc.typeflag, tc.mode, tc.data, tc.link)
		}
	}
	if len(l) != 9 {
		t.Errorf("the layer has %d entries, want 9", len(l))
	}
	if b := a.layers[a.manifest[1].Layers[0]]; len(b) != 1 || string(b["/b"].data) != "b" {
		t.Errorf("the second image's layer is %v", b)
	}
}

func TestWriteIsDeterministic(t *testing.T) {
	images := testImages(t)
	first := write(t, images...)
	// The order files are listed in is not the image's business.
	reversed := append([]File(nil), images[0].Files...)
	for i, j := 0, len(reversed)-1; i < j; i, j = i+1, j-1 {
		reversed[i], reversed[j] = reversed[j], reversed[i]
	}
	images[0].Files = reversed
	if second := write(t, images...); !bytes.Equal(first, second) {
		t.Error("the same images made two different archives")
	}
}

func TestWriteSharesIdenticalBlobs(t *testing.T) {
	img := Image{Tags: []string{"example.test/same:1"}, Files: []File{{Path: "/f", Mode: 0o644, Data: []byte("f")}}}
	twin := img
	twin.Tags = []string{"example.test/same:2"}
	a := readArchive(t, write(t, img, twin))
	if len(a.manifest) != 2 || a.manifest[0].Config != a.manifest[1].Config {
		t.Errorf("manifest %+v: want two names for one config", a.manifest)
	}
}

func TestWriteRefuses(t *testing.T) {
	file := func(p string) File { return File{Path: p, Mode: 0o644} }
	for _, tc := range []struct {
		name  string
		image Image
		want  string
	}{
		{"an image without a tag", Image{Files: []File{file("/a")}}, "no tag"},
		{"a relative path", Image{Tags: []string{"t"}, Files: []File{file("a")}}, "not an absolute, clean path"},
		{"an unclean path", Image{Tags: []string{"t"}, Files: []File{file("/a/../b")}}, "not an absolute, clean path"},
		{"the root", Image{Tags: []string{"t"}, Files: []File{{Path: "/", Mode: fs.ModeDir | 0o755}}}, "not an absolute, clean path"},
		{"a path twice", Image{Tags: []string{"t"}, Files: []File{file("/a"), file("/a")}}, "/a is in the image twice"},
		{"a file below a file", Image{Tags: []string{"t"}, Files: []File{file("/a"), file("/a/b")}}, "needs /a to be a directory"},
		{"a symlink without a target", Image{Tags: []string{"t"}, Files: []File{{Path: "/l", Mode: fs.ModeSymlink}}}, "no target"},
		{"a device", Image{Tags: []string{"t"}, Files: []File{{Path: "/dev/null", Mode: fs.ModeDevice}}}, "regular files"},
		{"both data and a host path", Image{Tags: []string{"t"}, Files: []File{{Path: "/a", Data: []byte("a"), HostPath: "/etc/hostname"}}}, "both Data and HostPath"},
		{"a missing host file", Image{Tags: []string{"t"}, Files: []File{{Path: "/a", HostPath: "/nonexistent/file"}}}, "/nonexistent/file"},
	} {
		err := Write(&bytes.Buffer{}, tc.image)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "imagetar: ") {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}
