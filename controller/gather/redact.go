package gather

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Redacted replaces a sensitive value.
const Redacted = "##redacted##"

// lastApplied is kubectl's copy of an applied object, a Secret's data
// included.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// redactor removes secrets from what gather writes. The zero value, or
// one that is off, keeps everything.
type redactor struct {
	off bool
	// scrub are values replaced wherever they appear: tokens and keys,
	// never short ones such as "true", which would garble the files.
	scrub []string
}

// minScrub is the shortest value scrubbed from text.
const minScrub = 8

// learn adds a value to scrub.
func (r *redactor) learn(v string) {
	v = strings.TrimSpace(v)
	if len(v) >= minScrub && !slices.Contains(r.scrub, v) {
		r.scrub = append(r.scrub, v)
	}
}

// text scrubs the known sensitive values from s.
func (r *redactor) text(s string) string {
	if r.off {
		return s
	}
	for _, v := range r.scrub {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	return s
}

// object replaces, in a Secret, the value of every key of data and
// stringData, and kubectl's last-applied copy.
func (r *redactor) object(u *unstructured.Unstructured) {
	if r.off || u.GetKind() != "Secret" {
		return
	}
	for _, field := range []string{"data", "stringData"} {
		m, ok := u.Object[field].(map[string]any)
		if !ok {
			continue
		}
		for k := range m {
			m[k] = Redacted
		}
	}
	if a := u.GetAnnotations(); a[lastApplied] != "" {
		a[lastApplied] = Redacted
		u.SetAnnotations(a)
	}
}
