#!/usr/bin/env bash
# Builds the Snorkel container image from deploy/Dockerfile with docker, or
# podman if there is no docker. Without a working engine it writes the same
# image as a docker-save archive with deploy/mkimage instead, which
# containerd, docker and kind load. `make image` runs it.
#
#   deploy/image.sh [IMAGE]
#
# IMAGE defaults to $IMAGE, else ghcr.io/snorkel-net/snorkel:dev; VERSION
# (what `snorkel version` prints) defaults to `git describe`. ARCHIVE, the
# archive written without an engine (a path from the repository root),
# defaults to bin/snorkel-image.tar; its static binary is built beside it
# as snorkel-static.
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
if [ -z "$engine" ] && ! command -v go >/dev/null 2>&1; then
	{
		echo "make image needs a container engine, docker or podman, or Go to write the image without one, and found none that works:"
		printf '%s' "$why"
		echo "  go: not installed"
		echo "Install Go (https://go.dev/doc/install), or Docker (https://docs.docker.com/engine/install/) or Podman and start it, then run make image again."
		echo "deploy/build-static.sh OUT builds the same static binary the image ships."
	} >&2
	exit 1
fi

if [ -z "$engine" ]; then
	# containerd, the real-node lab's runtime, imports a docker-save
	# archive as it is: no engine or registry is needed to make one.
	archive=${ARCHIVE:-bin/snorkel-image.tar}
	binary=$(dirname "$archive")/snorkel-static
	echo "no container engine works:"
	printf '%s' "$why"
	echo "writing $image (version $version) to $archive instead"
	mkdir -p "$(dirname "$archive")"
	deploy/build-static.sh "$binary" "$version"
	go run ./deploy/mkimage -o "$archive" --snorkel "$binary" --snorkel-tag "$image"
	echo "wrote $archive; load it where the image runs:"
	echo "  containerd (a node of the real-node lab):  ctr -n k8s.io images import $archive"
	echo "  docker:                                     docker load -i $archive"
	echo "  kind:                                       kind load image-archive $archive --name CLUSTER"
	exit 0
fi

echo "building $image (version $version) with $engine"
"$engine" build -f deploy/Dockerfile --build-arg "VERSION=$version" -t "$image" .
