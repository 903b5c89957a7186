#!/usr/bin/env bash
# base-image.sh SUITE TAG [EXTRA_APT_OPTS] - a Debian base image without any container
# registry: debootstrap a minimal root file system from the Debian mirror this machine's
# apt already uses (read from /etc/apt/sources.list*, never hard-coded) and `docker import`
# it as TAG. ~1 min per suite, ~200 MB. Needs root, debootstrap and a running dockerd.
#   base-image.sh bookworm launcher-slurm-base:bookworm-<hash>
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin

debian_mirror() { # the first http(s) Debian mirror of this machine's apt sources (not -security)
  local m=""
  m=$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}' /etc/apt/sources.list.d/*.sources 2>/dev/null |
    grep -E '^https?://' | grep -v -- '-security' | head -n1 || true)
  [[ -n $m ]] || m=$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\//) {print $i; break}}' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | grep -v -- '-security' | head -n1 || true)
  [[ -n $m ]] || { echo "base-image.sh: no Debian mirror found in /etc/apt/sources.list*" >&2; return 1; }
  echo "${m%/}"
}

if [[ ${1:-} == --mirror ]]; then debian_mirror; exit; fi
suite=${1:?usage: base-image.sh SUITE TAG | --mirror}
tag=${2:?usage: base-image.sh SUITE TAG | --mirror}
command -v debootstrap >/dev/null || { echo "base-image.sh: debootstrap missing (apt-get install debootstrap)" >&2; exit 1; }
mirror=$(debian_mirror)
dir=$(mktemp -d "${TMPDIR:-/tmp}/launcher-debootstrap.XXXXXX")
trap 'rm -rf "$dir"' EXIT
# unstable's Release file may be past its Valid-Until on a snapshot mirror
if ! debootstrap --variant=minbase "$suite" "$dir" "$mirror" >"$dir.log" 2>&1; then
  tail -n 20 "$dir.log" >&2; rm -f "$dir.log"
  echo "base-image.sh: debootstrap $suite from $mirror failed" >&2; exit 1
fi
rm -f "$dir.log"
# the image's apt uses the same mirror the host does
echo "deb $mirror $suite main" >"$dir/etc/apt/sources.list"
rm -f "$dir"/etc/apt/sources.list.d/*
tar -C "$dir" -c . | docker import -c 'CMD ["bash"]' - "$tag" >/dev/null
echo "$tag"
