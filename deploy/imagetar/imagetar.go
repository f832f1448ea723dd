// Package imagetar writes container images as a docker-save archive
// without a container engine or a registry, for the real-node lab: each
// node's containerd takes the archive with
//
//	ctr -n k8s.io images import FILE.tar
//
// and pods use the images with imagePullPolicy Never or IfNotPresent.
// An image is one layer built from a list of files; the recipes (Snorkel,
// Pause, CoreDNS, Client) say which files each image holds.
//
// Write holds one layer at a time in memory, since the archive names each
// layer by its digest before its bytes: an image costs its size in RAM
// while it is written. Write only reads its images and the host files
// they name, so concurrent calls are safe.
package imagetar

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
)

// File is one entry of an image's filesystem. Mode's type bits say what
// it is: a directory (fs.ModeDir), a symlink to Link (fs.ModeSymlink), or
// else a regular file whose bytes are Data, or the host file HostPath
// when that is set. Mode's permission, setuid, setgid and sticky bits go
// into the image as they are; every entry belongs to uid and gid 0.
type File struct {
	Path     string // absolute, clean path in the image
	Mode     fs.FileMode
	Data     []byte
	HostPath string
	Link     string
}

// Image is a one-layer image and the process configuration containerd
// starts it with. Tags are the names it is imported under
// ("registry/name:tag"); parent directories of Files are made as needed.
type Image struct {
	Tags       []string
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
	Files      []File
}

// The images run on the lab's Debian amd64 nodes, whose libraries the
// client image copies; the recipes refuse binaries for anything else.
const (
	imageOS   = "linux"
	imageArch = "amd64"
)

// manifestEntry is one image in the archive's manifest.json.
type manifestEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// config is the image configuration (the Docker image spec v1.2, which is
// also what the OCI image config encodes); it has no creation time so
// that the same files always make the same digest.
type config struct {
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Config       containerConfig `json:"config"`
	RootFS       rootFS          `json:"rootfs"`
}

type containerConfig struct {
	User       string   `json:"User,omitempty"`
	Env        []string `json:"Env,omitempty"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

// Write writes images as one docker-save archive to w. The same images
// always make the same bytes; a layer or configuration two images share
// is written once.
func Write(w io.Writer, images ...Image) error {
	if len(images) == 0 {
		return fmt.Errorf("imagetar: no images to write")
	}
	tw := tar.NewWriter(w)
	written := map[string]bool{}
	var manifest []manifestEntry
	for _, img := range images {
		if len(img.Tags) == 0 {
			return fmt.Errorf("imagetar: an image has no tag, so containerd would import it without a name")
		}
		layer, err := buildLayer(img.Files)
		if err != nil {
			return fmt.Errorf("imagetar: %s: %w", img.Tags[0], err)
		}
		diffID := sha256.Sum256(layer)
		layerName := hex.EncodeToString(diffID[:]) + "/layer.tar"
		cfg, err := json.Marshal(config{
			Architecture: imageArch,
			OS:           imageOS,
			Config: containerConfig{
				User:       img.User,
				Env:        img.Env,
				Entrypoint: img.Entrypoint,
				Cmd:        img.Cmd,
				WorkingDir: img.WorkingDir,
			},
			RootFS: rootFS{Type: "layers", DiffIDs: []string{"sha256:" + hex.EncodeToString(diffID[:])}},
		})
		if err != nil {
			return fmt.Errorf("imagetar: %s: config: %w", img.Tags[0], err)
		}
		cfgDigest := sha256.Sum256(cfg)
		cfgName := hex.EncodeToString(cfgDigest[:]) + ".json"
		for _, e := range []struct {
			name string
			data []byte
		}{{layerName, layer}, {cfgName, cfg}} {
			if written[e.name] {
				continue
			}
			written[e.name] = true
			if err := writeEntry(tw, e.name, e.data); err != nil {
				return err
			}
		}
		manifest = append(manifest, manifestEntry{Config: cfgName, RepoTags: img.Tags, Layers: []string{layerName}})
	}
	m, err := json.Marshal(manifest)
	if err != nil {
		return fmt.Errorf("imagetar: manifest: %w", err)
	}
	if err := writeEntry(tw, "manifest.json", m); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("imagetar: %w", err)
	}
	return nil
}

// writeEntry writes one regular file of the outer archive.
func writeEntry(tw *tar.Writer, name string, data []byte) error {
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("imagetar: %s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("imagetar: %s: %w", name, err)
	}
	return nil
}
