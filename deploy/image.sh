#!/usr/bin/env bash
# Builds the Snorkel container image from deploy/Dockerfile with docker, or
# podman if there is no docker. `make image` runs it.
#
#   deploy/image.sh [IMAGE]
#
# IMAGE defaults to $IMAGE, else ghcr.io/snorkel-net/snorkel:dev; VERSION
# (what `snorkel version` prints) defaults to `git describe`.
set -euo pipefail

cd "$(dirname "$0")/.."
image=${1:-${IMAGE:-ghcr.io/snorkel-net/snorkel:dev}}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}

engine=""
why=""
for candidate in docker podman; do
	if ! command -v "$candidate" >/dev/null 2>&1; then
		why+="  $candidate: not installed"$'\n'
		continue
	fi
	if ! out=$("$candidate" info 2>&1); then
		why+="  $candidate: installed, but it cannot reach its engine: ${out##*$'\n'}"$'\n'
		continue
	fi
	engine=$candidate
	break
done
if [ -z "$engine" ]; then
	{
		echo "make image needs a container engine, docker or podman, and found none that works:"
		printf '%s' "$why"
		echo "Install Docker (https://docs.docker.com/engine/install/) or Podman and start it, then run make image again."
		echo "Without one, deploy/build-static.sh OUT builds the same static binary the image ships."
	} >&2
	exit 1
fi

echo "building $image (version $version) with $engine"
"$engine" build -f deploy/Dockerfile --build-arg "VERSION=$version" -t "$image" .
