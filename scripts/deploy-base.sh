#!/usr/bin/env bash
# Make, once per machine, the two local base images the `deploy` test tier builds
# deploy/Containerfile FROM (no container registry can be reached here):
#
#   sardeenz-deploy-base:bookworm  a Debian bookworm root filesystem from `mmdebstrap`
#                                  (python3, python3-venv, ca-certificates), `podman import`ed:
#                                  the BASE of the CPU image and of the wheel stage.
#   sardeenz-deploy-node:bookworm  the same plus this machine's Node.js 20 (/usr/bin/node and
#                                  its npm): the NODE_BASE of the dashboard stage. Debian
#                                  bookworm's own nodejs is 18, older than the dashboard's
#                                  build needs (>= 20.19), and nodesource cannot be reached
#                                  from here, so the host's Node is copied in instead.
#
# Why cached with a marker (as scripts/kube-env.sh): mmdebstrap takes about a minute, the
# images survive `make clean`, and the test tier removes only what it built itself. The
# marker is written last; a run that finds it AND both images skips everything.
#
# Installs podman, runc and mmdebstrap with apt-get when missing (as `make browser-deps` installs
# chromium-headless-shell): that is the one system change.
#
# Usage: scripts/deploy-base.sh [DIR]   (prints the two image names on its last line)
set -euo pipefail

suite="bookworm"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/sardeenz"
dir="${1:-$cache/deploy-base-$suite}"
marker="$dir/.sardeenz-complete"
base_image="localhost/sardeenz-deploy-base:$suite"
node_image="localhost/sardeenz-deploy-node:$suite"
packages="python3,python3-venv,ca-certificates,libstdc++6"
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"

if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v mmdebstrap >/dev/null; then
  echo "deploy-base: installing podman, runc and mmdebstrap with apt-get" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq podman runc mmdebstrap >/dev/null
fi

mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9

if [[ -f "$marker" ]] && podman image exists "$base_image" && podman image exists "$node_image"
then
  echo "deploy-base: $base_image and $node_image ready (cached; build skipped)" >&2
  echo "$base_image $node_image"
  exit 0
fi

# The mirror the machine's own apt sources use (override: SARDEENZ_DEBIAN_MIRROR).
mirror="${SARDEENZ_DEBIAN_MIRROR:-}"
if [[ -z "$mirror" ]]; then
  # The first Debian archive URI among deb822 `URIs:` lines or one-line `deb URI ...` entries
  # (comments skipped: a commented snapshot URL is not the mirror in use).
  mirror=$(
    {
      cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n'
      cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p'
    } | grep -E '/debian/?$' | head -n 1
  ) || true
fi
if [[ -z "$mirror" ]]; then
  # No public address as a fallback: the machine's apt sources decide, or the operator does.
  echo "deploy-base: no Debian archive in this machine's apt sources; set SARDEENZ_DEBIAN_MIRROR" >&2
  exit 1
fi

start=$(date +%s)
rm -rf "$dir"
mkdir -p "$dir"
rootfs="$dir/rootfs"
echo "deploy-base: making the deploy tier's base images: mmdebstrap $suite ($packages) from $mirror (1-2 minutes once per machine)" >&2
mmdebstrap --quiet --variant=minbase --include="$packages" \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  "$suite" "$rootfs" "$mirror"

tar -C "$rootfs" -c . | podman import --quiet - "$base_image" >/dev/null

# The node layer: the host's node binary and npm, at the paths the official node image uses.
node_bin=$(readlink -f "$(command -v node)")
npm_dir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
install -D -m 0755 "$node_bin" "$rootfs/usr/local/bin/node"
mkdir -p "$rootfs/usr/local/lib/node_modules"
cp -a "$npm_dir" "$rootfs/usr/local/lib/node_modules/npm"
ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
tar -C "$rootfs" -c . | podman import --quiet - "$node_image" >/dev/null

# The images hold everything now; the root filesystem is not kept.
rm -rf "$rootfs"
date -u +%FT%TZ >"$marker"
echo "deploy-base: $base_image and $node_image made in $(($(date +%s) - start)) s" >&2
echo "$base_image $node_image"
