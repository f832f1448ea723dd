package deploy

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The manifests under kustomize/ are kustomize bases that `kubectl apply -k`
// installs as they are, and that `snorkel join` and `snorkel deploy-broker`
// apply from the binary by reading the same files: broker (the broker
// namespace and its client's access), agent (the gateway DaemonSet and its
// access), routeagent (the route agent DaemonSet on every node), dnsd (the
// clusterset.local DNS server) and member (the three together, with the
// image to run).
//
//go:embed kustomize
var kustomizeFiles embed.FS

// Kustomizations are the bases under kustomize/, by directory name.
var Kustomizations = []string{"broker", "agent", "routeagent", "dnsd", "member"}

// ImageName is the Snorkel image the manifests run, without a tag;
// DefaultImage is the reference they carry.
const (
	ImageName    = "ghcr.io/snorkel-net/snorkel"
	DefaultImage = ImageName + ":latest"
)

// kustomizationFile is the file that makes a directory a kustomize base.
const kustomizationFile = "kustomization.yaml"

// Kustomization is the part of kustomize's Kustomization that the manifests
// use: the files and bases to include, and image replacements. Reading one
// with any other field fails, so that a manifest never relies on a
// transformation the binary would not apply.
type Kustomization struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Resources  []string         `json:"resources"`
	Images     []KustomizeImage `json:"images,omitempty"`
}

// KustomizeImage replaces the image Name (without its tag) of every
// container with NewName (if set) and tag NewTag (if set), as kustomize's
// images field does.
type KustomizeImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
}

// ReadKustomization reads the kustomization of base dir (e.g. "agent").
func ReadKustomization(dir string) (*Kustomization, error) {
	name := path.Join("kustomize", dir, kustomizationFile)
	b, err := kustomizeFiles.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("deploy: %s: %w", name, err)
	}
	return parseKustomization(name, b)
}

func parseKustomization(name string, b []byte) (*Kustomization, error) {
	k := &Kustomization{}
	if err := yaml.UnmarshalStrict(b, k); err != nil {
		return nil, fmt.Errorf("deploy: %s: %w (the binary reads resources and images only)", name, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return nil, fmt.Errorf("deploy: %s: apiVersion %q kind %q, want kustomize.config.k8s.io/v1beta1 Kustomization", name, k.APIVersion, k.Kind)
	}
	for _, ki := range k.Images {
		if ki.Name == "" || (ki.NewName == "" && ki.NewTag == "") {
			return nil, fmt.Errorf("deploy: %s: images entry %+v needs a name and a newName or newTag", name, ki)
		}
	}
	return k, nil
}

// ManifestOptions changes the manifests as they are read.
type ManifestOptions struct {
	// Image, if set, replaces ImageName (any tag) in every container.
	Image string
}

// Manifests reads the objects of base dir (one of Kustomizations) in the
// order kustomize lists them, with the bases' image replacements and then
// o's applied.
func Manifests(dir string, o ManifestOptions) ([]*unstructured.Unstructured, error) {
	objs, err := readBase(path.Join("kustomize", dir), nil)
	if err != nil {
		return nil, err
	}
	if o.Image != "" {
		if err := ValidateImage(o.Image); err != nil {
			return nil, err
		}
		for _, u := range objs {
			if err := setImages(u, []KustomizeImage{{Name: ImageName, NewName: o.Image}}); err != nil {
				return nil, err
			}
		}
	}
	return objs, nil
}

// ManifestFiles returns every file under kustomize/, for checks that each
// is part of a base.
func ManifestFiles() ([]string, error) {
	var out []string
	err := fs.WalkDir(kustomizeFiles, "kustomize", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	})
	return out, err
}

// ManifestFile returns the content of a file under kustomize/.
func ManifestFile(name string) ([]byte, error) { return kustomizeFiles.ReadFile(name) }

// readBase reads the objects of the base in directory dir; seen holds the
// bases being read, to refuse a cycle.
func readBase(dir string, seen []string) ([]*unstructured.Unstructured, error) {
	for _, s := range seen {
		if s == dir {
			return nil, fmt.Errorf("deploy: %s includes itself", dir)
		}
	}
	seen = append(seen, dir)
	k, err := ReadKustomization(strings.TrimPrefix(dir, "kustomize/"))
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, r := range k.Resources {
		p := path.Clean(path.Join(dir, r))
		if !strings.HasPrefix(p, "kustomize/") {
			return nil, fmt.Errorf("deploy: %s lists %q, outside kustomize/", dir, r)
		}
		st, err := fs.Stat(kustomizeFiles, p)
		if err != nil {
			return nil, fmt.Errorf("deploy: %s lists %q: %w", dir, r, err)
		}
		var more []*unstructured.Unstructured
		if st.IsDir() {
			more, err = readBase(p, seen)
		} else {
			more, err = readObjects(p)
		}
		if err != nil {
			return nil, err
		}
		objs = append(objs, more...)
	}
	for _, u := range objs {
		if err := setImages(u, k.Images); err != nil {
			return nil, fmt.Errorf("deploy: %s images: %w", dir, err)
		}
	}
	return objs, nil
}

// readObjects decodes every document of a YAML file; each must be one
// object with apiVersion, kind and name.
func readObjects(name string) ([]*unstructured.Unstructured, error) {
	b, err := kustomizeFiles.ReadFile(name)
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("deploy: %s: %w", name, err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.UnmarshalStrict(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("deploy: %s document %d: %w", name, i+1, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("deploy: %s document %d: needs apiVersion, kind and metadata.name", name, i+1)
		}
		out = append(out, u)
	}
}

// podSpecPaths are where the workload kinds keep their pod template's spec.
var podSpecPaths = map[string][]string{
	"Pod":         {"spec"},
	"DaemonSet":   {"spec", "template", "spec"},
	"Deployment":  {"spec", "template", "spec"},
	"StatefulSet": {"spec", "template", "spec"},
	"Job":         {"spec", "template", "spec"},
}

// setImages applies image replacements to the containers of a workload.
func setImages(u *unstructured.Unstructured, images []KustomizeImage) error {
	specPath, ok := podSpecPaths[u.GetKind()]
	if !ok || len(images) == 0 {
		return nil
	}
	for _, field := range []string{"initContainers", "containers"} {
		cs, found, err := unstructured.NestedSlice(u.Object, append(specPath, field)...)
		if err != nil {
			return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		if !found {
			continue
		}
		for _, c := range cs {
			m, ok := c.(map[string]any)
			if !ok {
				return fmt.Errorf("%s %s: a container is not an object", u.GetKind(), u.GetName())
			}
			img, _ := m["image"].(string)
			for _, ki := range images {
				if imageRepo(img) == ki.Name {
					m["image"] = replaceImage(img, ki)
					break
				}
			}
		}
		if err := unstructured.SetNestedSlice(u.Object, cs, append(specPath, field)...); err != nil {
			return err
		}
	}
	return nil
}

// imageRepo is an image reference without its tag or digest.
func imageRepo(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// replaceImage applies ki to ref, whose repository is ki.Name. A NewName
// with its own tag or digest replaces the whole reference.
func replaceImage(ref string, ki KustomizeImage) string {
	repo, suffix := imageRepo(ref), strings.TrimPrefix(ref, imageRepo(ref))
	if ki.NewName != "" {
		if imageRepo(ki.NewName) != ki.NewName {
			return ki.NewName
		}
		repo = ki.NewName
	}
	if ki.NewTag != "" {
		suffix = ":" + ki.NewTag
	}
	return repo + suffix
}

// ValidateImage checks an image reference given on the command line.
func ValidateImage(ref string) error {
	if ref == "" || strings.ContainsAny(ref, " \t\n") || strings.HasPrefix(ref, "-") || strings.HasSuffix(ref, ":") || strings.HasSuffix(ref, "/") {
		return fmt.Errorf("--image %q is not an image reference; give one such as %s", ref, DefaultImage)
	}
	return nil
}
