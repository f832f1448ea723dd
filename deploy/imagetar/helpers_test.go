package imagetar

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// archive is a docker-save archive read back, its digests checked.
type archive struct {
	manifest []manifestEntry
	configs  map[string]config // by manifest Config name
	layers   map[string]layer  // by manifest Layers name
}

// layer is a layer tar read back: its entries by image path.
type layer map[string]entry

type entry struct {
	hdr  *tar.Header
	data []byte
}

// readArchive parses a docker-save archive and checks that every config
// is named by its sha256 and that every diff_id is its layer's sha256.
func readArchive(t *testing.T, b []byte) archive {
	t.Helper()
	blobs := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := blobs[hdr.Name]; dup {
			t.Errorf("%s is in the archive twice", hdr.Name)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		blobs[hdr.Name] = data
	}
	a := archive{configs: map[string]config{}, layers: map[string]layer{}}
	if err := json.Unmarshal(blobs["manifest.json"], &a.manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	for _, m := range a.manifest {
		raw, ok := blobs[m.Config]
		if !ok {
			t.Fatalf("config %s is not in the archive", m.Config)
		}
		if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:])+".json" != m.Config {
			t.Errorf("config %s has sha256 %x", m.Config, sum)
		}
		var c config
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatalf("%s: %v", m.Config, err)
		}
		a.configs[m.Config] = c
		if c.RootFS.Type != "layers" || len(c.RootFS.DiffIDs) != len(m.Layers) {
			t.Fatalf("%s: rootfs %+v for layers %v", m.Config, c.RootFS, m.Layers)
		}
		for i, name := range m.Layers {
			raw, ok := blobs[name]
			if !ok {
				t.Fatalf("layer %s is not in the archive", name)
			}
			if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != c.RootFS.DiffIDs[i] {
				t.Errorf("layer %s has sha256 %x, its diff_id is %s", name, sum, c.RootFS.DiffIDs[i])
			}
			a.layers[name] = readLayer(t, raw)
		}
	}
	return a
}

// readLayer parses a layer tar, checking that each entry is owned by root,
// has the fixed time and comes after its parent directory.
func readLayer(t *testing.T, b []byte) layer {
	t.Helper()
	l := layer{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return l
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		p := "/" + strings.TrimSuffix(hdr.Name, "/")
		if hdr.Uid != 0 || hdr.Gid != 0 || !hdr.ModTime.Equal(epoch) {
			t.Errorf("%s: uid %d gid %d time %v, want 0, 0, %v", p, hdr.Uid, hdr.Gid, hdr.ModTime, epoch)
		}
		if parent := filepath.Dir(p); parent != "/" {
			if e, ok := l[parent]; !ok || e.hdr.Typeflag != tar.TypeDir {
				t.Errorf("%s comes before its directory %s", p, parent)
			}
		}
		l[p] = entry{hdr, data}
	}
}

// only returns the one image of a, its config and its layer.
func (a archive) only(t *testing.T) (manifestEntry, config, layer) {
	t.Helper()
	if len(a.manifest) != 1 {
		t.Fatalf("%d images, want 1", len(a.manifest))
	}
	m := a.manifest[0]
	return m, a.configs[m.Config], a.layers[m.Layers[0]]
}

// write runs Write and returns the archive's bytes.
func write(t *testing.T, images ...Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, images...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var (
	pauseOnce sync.Once
	pauseBin  string
	pauseErr  error
	pauseDir  string
)

// buildPause builds ./pause static, once per test binary: it is both the
// pause image's program and a cheap static binary for the other recipes.
func buildPause(t *testing.T) string {
	t.Helper()
	pauseOnce.Do(func() {
		pauseDir, pauseErr = os.MkdirTemp("", "imagetar-pause")
		if pauseErr != nil {
			return
		}
		pauseBin = filepath.Join(pauseDir, "pause")
		cmd := exec.Command("go", "build", "-trimpath", "-o", pauseBin, "./pause")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			pauseErr = errors.New("go build ./pause: " + err.Error() + "\n" + string(out))
		}
	})
	if pauseErr != nil {
		t.Fatal(pauseErr)
	}
	return pauseBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pauseDir != "" {
		os.RemoveAll(pauseDir)
	}
	os.Exit(code)
}
