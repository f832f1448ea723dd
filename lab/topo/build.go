package topo

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// SnorkelPackage is the import path of the snorkel command.
const SnorkelPackage = "github.com/snorkel-net/snorkel/cmd/snorkel"

// BuildSnorkel builds the snorkel binary into dir and returns its path, for
// tests that start gateways: they must run the code under test, not whatever
// binary happens to be installed. It runs the go tool found in PATH (`go test`
// puts its own first) from the current directory, which must be inside the
// module.
func BuildSnorkel(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "snorkel")
	b, err := exec.CommandContext(ctx, "go", "build", "-o", out, SnorkelPackage).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("topo: go build %s: %w: %s", SnorkelPackage, err, strings.TrimSpace(string(b)))
	}
	return out, nil
}
