#!/usr/bin/env bash
# Builds the static snorkel binary the container image ships: no cgo, so no
# dynamic loader or libc; -trimpath so the binary holds no build paths. The
# image's build stage runs this script, and CI runs it to check the result
# is static.
#
#   deploy/build-static.sh OUT [VERSION]
#
# VERSION (printed by `snorkel version`) defaults to `git describe`, else
# "dev". GOOS/GOARCH from the environment cross-compile as usual.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 OUT [VERSION]" >&2
	exit 2
fi
out=$1
version=${2:-}
cd "$(dirname "$0")/.."
if [ -z "$version" ]; then
	version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
fi
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${version}" -o "$out" ./cmd/snorkel
