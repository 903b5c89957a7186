#!/usr/bin/env bash
# build.sh VERSION - build (only if missing) the image of a dockerized test cluster and
# print its tag. VERSION: 22.05 (Debian bookworm), 24.11 (trixie), 26.05 (unstable).
#
# Images are cached by a hash of their inputs: the base image's tag carries the hash of
# (suite, base-image.sh), the Slurm image's tag the hash of (base tag, Dockerfile,
# entrypoint.sh, bashrc, sshd_config, sshd_mfa_config). A second run with the same inputs builds nothing.
# Builds of one version are serialised host-wide (flock), so concurrent test sessions build once.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=${1:?usage: build.sh 22.05|24.11|26.05}
LOCK=${LAUNCHER_DOCKER_BUILD_LOCK:-/run/lock/launcher-slurm-docker-build-$version.lock}
log() { echo "[build.sh $(date +%T)] $*" >&2; }

apt_opts=""
case $version in
  22.05) suite=bookworm ;;
  24.11) suite=trixie ;;
  26.05) suite=unstable; apt_opts="-o Acquire::Check-Valid-Until=false" ;; # snapshot mirror: Release past Valid-Until
  *) echo "build.sh: unknown Slurm version '$version' (22.05, 24.11 or 26.05)" >&2; exit 2 ;;
esac

hash_of() { cat "$@" | sha256sum | cut -c1-12; }
base_tag="launcher-slurm-base:$suite-$(printf '%s\n' "$suite" | cat - "$HERE/base-image.sh" | sha256sum | cut -c1-12)"
slurm_hash=$( (echo "$base_tag $version $apt_opts"; cat "$HERE/Dockerfile" "$HERE/entrypoint.sh" "$HERE/bashrc" "$HERE/sshd_config" "$HERE/sshd_mfa_config") | sha256sum | cut -c1-12)
tag="launcher-slurm:$version-$slurm_hash"

have() { docker image inspect "$1" >/dev/null 2>&1; }
if have "$tag"; then echo "$tag"; exit 0; fi

mkdir -p "$(dirname "$LOCK")"
exec 9>>"$LOCK"
flock -w 900 9 || { echo "build.sh: could not take $LOCK within 15 min" >&2; exit 1; }
if have "$tag"; then echo "$tag"; exit 0; fi # built by a concurrent run meanwhile

t0=$(date +%s)
if ! have "$base_tag"; then
  log "base image $base_tag: debootstrap $suite (about a minute)"
  "$HERE/base-image.sh" "$suite" "$base_tag" >/dev/null
fi
log "image $tag: Slurm from $suite's archive"
ctx=$(mktemp -d "${TMPDIR:-/tmp}/launcher-slurm-build.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
cp "$HERE/Dockerfile" "$HERE/entrypoint.sh" "$HERE/bashrc" "$HERE/sshd_config" "$HERE/sshd_mfa_config" "$ctx/"
if [[ -n $apt_opts ]]; then # unstable: every apt-get in the Dockerfile gets the options
  sed -i "s|apt-get update -qq|apt-get $apt_opts update -qq|" "$ctx/Dockerfile"
fi
if ! docker build -q --build-arg "BASE=$base_tag" -t "$tag" "$ctx" >"$ctx/build.log" 2>&1; then
  tail -n 30 "$ctx/build.log" >&2
  echo "build.sh: docker build of $tag failed" >&2
  exit 1
fi
log "built $tag in $(($(date +%s) - t0)) s"
echo "$tag"
