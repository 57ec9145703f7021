#!/usr/bin/env bash
# Builds the project's images on this machine without a Docker engine: podman (settings in containers/podman.conf;
# overlay storage, as vfs would copy every layer whole), on a base image made locally with debootstrap (Debian
# bookworm's Python 3.11; no registry is pulled from), passed to the Dockerfiles as their PYTHON_IMAGE build
# argument. Installs podman, runc and debootstrap when missing (as root, from Debian's packages); keeps the base
# image and uv's download cache (TFPIPE_BUILD_CACHE, default /var/cache/tfpipe) between builds, and removes what
# older builds left unused for a week (dangling images: a replaced image, an old lock's layers).
# Prints each image's size and build time.
#   containers/images.sh [components|trainer|serving|trainer-gpu|serving-gpu ...]
#                                                                   (default: components trainer serving)
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=localhost/tfpipe-python:3.11-bookworm
TAG=${TFPIPE_IMAGE_TAG:-dev}
CACHE=${TFPIPE_BUILD_CACHE:-/var/cache/tfpipe}
MIRROR=${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
export CONTAINERS_CONF=$PWD/containers/podman.conf
podman() { command podman --storage-driver overlay "$@"; }

missing=()
for tool in podman:podman runc:runc debootstrap:debootstrap; do
  type -P "${tool%%:*}" >/dev/null || missing+=("${tool##*:}")  # type -P: not the podman function above
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! podman image exists "$BASE"; then
  echo "making the base image $BASE (debootstrap from $MIRROR)"
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
    bookworm "$root" "$MIRROR" >/dev/null
  # as in the official Python image: pip may install into the system Python (uv is installed that way)
  rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
  # this machine's certificate authorities (a proxy's, where there is one), for pip and uv inside the builds
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | podman import \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' - "$BASE" >/dev/null
fi

# The components image takes /opt/apache/beam/boot from Beam's SDK image (BEAM_SDK_IMAGE, the Dockerfile's default).
# Where its registry cannot be reached, a stand-in whose boot refuses to start, saying why: the image then runs the
# pipeline's steps but cannot be Dataflow's worker image (build that where the registry is reachable: Cloud Build).
beam_sdk_image() {
  local wanted
  wanted=$(sed -n 's/^ARG BEAM_SDK_IMAGE=//p' containers/components.Dockerfile)
  if podman image exists "$wanted" || timeout 120 podman pull --quiet "$wanted" >/dev/null 2>&1; then
    echo "$wanted"
    return
  fi
  local standin=localhost/tfpipe-beam-unavailable:${wanted##*:} dir
  if ! podman image exists "$standin"; then
    dir=$(mktemp -d)
    cat >"$dir/boot" <<EOF
#!/bin/sh
echo "this image was built without Beam's SDK harness launcher ($wanted could not be pulled):" \
  "Dataflow cannot start its workers on it; build it where that registry is reachable (Cloud Build)" >&2
exit 70
EOF
    chmod 755 "$dir/boot"
    printf 'FROM %s\nCOPY boot /opt/apache/beam/boot\n' "$BASE" >"$dir/Containerfile"
    podman build --quiet -t "$standin" "$dir" >/dev/null
    rm -rf "$dir"
  fi
  echo "$wanted could not be pulled: the components image gets a stand-in Beam launcher that refuses Dataflow" >&2
  echo "$standin"
}

images=("$@")
[ ${#images[@]} -gt 0 ] || images=(components trainer serving)
mkdir -p "$CACHE/uv"
for name in "${images[@]}"; do
  args=(--build-arg "PYTHON_IMAGE=$BASE" --build-arg UV_NO_CACHE=false --volume "$CACHE/uv:/root/.cache/uv")
  dockerfile=containers/$name.Dockerfile
  case "$name" in
    components) args+=(--build-arg "BEAM_SDK_IMAGE=$(beam_sdk_image)") ;;
    trainer-gpu) args+=(--build-arg LOCK=requirements-gpu.lock); dockerfile=containers/trainer.Dockerfile ;;
    serving-gpu) args+=(--build-arg LOCK=requirements-serving-gpu.lock); dockerfile=containers/serving.Dockerfile ;;
  esac
  log=/tmp/tfpipe-build-$name.log
  started=$(date +%s)
  podman build --network host "${args[@]}" -f "$dockerfile" -t "tfpipe/$name:$TAG" . >"$log" 2>&1 \
    || { tail -n 30 "$log"; echo "building tfpipe/$name:$TAG failed (log: $log)"; exit 1; }
  size=$(podman image inspect --format '{{.Size}}' "tfpipe/$name:$TAG")
  echo "tfpipe/$name:$TAG: $(awk -v b="$size" 'BEGIN {printf "%.2f GB", b / 1e9}'), built in $(($(date +%s) - started)) s"
done
podman image prune --force --filter until=168h >/dev/null
