package diagnose

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// The Kubernetes minor versions Snorkel supports: from v1.29, where the
// CRD validation rules (x-kubernetes-validations) its CRDs carry became
// GA, through the newest its tests run on.
const (
	minMinor    = 29
	testedMinor = 37
)

// SupportedVersions says which Kubernetes versions Snorkel supports.
func SupportedVersions() string {
	return fmt.Sprintf("v1.%d to v1.%d", minMinor, testedMinor)
}

func checkK8sVersion(_ context.Context, c *cluster, r *result) {
	v, err := c.Kube.Discovery().ServerVersion()
	if err != nil {
		r.Fail("Cannot read the Kubernetes version: %v", err)
		return
	}
	judgeVersion(r, v.GitVersion, v.Major, v.Minor)
}

// judgeVersion reports whether Kubernetes major.minor (as the API server's
// /version gives them; a minor may end in "+") is supported.
func judgeVersion(r *result, gitVersion, major, minor string) {
	mi, err := strconv.Atoi(strings.TrimSuffix(minor, "+"))
	if major != "1" || err != nil {
		r.Fail("Cannot tell Kubernetes version %q (major %q, minor %q): Snorkel supports %s", gitVersion, major, minor, SupportedVersions())
		return
	}
	switch {
	case mi < minMinor:
		r.Fail("Kubernetes v1.%d (%s) is older than Snorkel supports (%s): upgrade the cluster to v1.%d or newer", mi, gitVersion, SupportedVersions(), minMinor)
	case mi > testedMinor:
		r.Warn("Kubernetes v1.%d (%s) is newer than Snorkel is tested on (%s); it should work, report what does not", mi, gitVersion, SupportedVersions())
	default:
		r.Success("Kubernetes v1.%d (%s) is supported (%s)", mi, gitVersion, SupportedVersions())
	}
}
