#!/usr/bin/env bash
# Build and install llama-cpp-python (the `llamacpp` extra's binding) from source, portable across x86-64 CPUs
# of the same ISA level: GGML_NATIVE=OFF with the AVX2-level extensions named and AMX off. A -march=native build
# on an AMX-capable VM crashed at its first decode (SIGSEGV in ggml_backend_amx_mul_mat); naming the extensions
# keeps the build the same on every host and leaves AMX out. The mtmd (llava) library is not built (not used).
# Usage: scripts/install_llamacpp.sh [PYTHON]   (CMAKE_BUILD_PARALLEL_LEVEL defaults to the CPU count)
# Extra CMake flags: LLAMACPP_EXTRA_CMAKE_ARGS="-DGGML_AVX512=ON ..." (for hosts with AVX-512).
set -euo pipefail
PYTHON="${1:-${PYTHON:-python3}}"
VERSION="${LLAMACPP_VERSION:-0.3.36}"
SPEC="${LLAMACPP_SPEC:-llama-cpp-python==${VERSION}}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
# shellcheck source=scripts/llamacpp_cmake_args.sh
source "$(cd "$(dirname "$0")" && pwd)/llamacpp_cmake_args.sh"
# The sdist is patched before it is built (scripts/llamacpp-batch-invariant.patch, the reason in docs/llamacpp.md):
# a CPU backend can be made with ggml's reference paths (use_ref) for one llama.cpp context, which then computes
# every row of a batch as a one-token decode does. The runtime checks for the patch's symbol and says when it is missing.
PATCH="$(cd "$(dirname "$0")" && pwd)/llamacpp-batch-invariant.patch"
# The built wheel is kept (pip does not cache a wheel built from a folder), keyed by the patch, the CMake flags,
# the sdist and the interpreter: a later install on the same machine takes seconds. LLAMACPP_WHEEL_CACHE moves it.
PYTAG="$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
KEY="$( { cat "$PATCH"; echo "$CMAKE_ARGS" "$SPEC" "$PYTAG" "$(uname -m)"; } | sha256sum | cut -c1-16)"
WHEELS="${LLAMACPP_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/constrained-spec/llamacpp-wheels}/$KEY"
start=$(date +%s)
WHEEL="$(find "$WHEELS" -maxdepth 1 -name 'llama_cpp_python-*.whl' 2>/dev/null | head -n 1 || true)"
if [[ -n "$WHEEL" ]]; then
  echo "installing the patched llama-cpp-python built before: $WHEEL" >&2
else
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
  echo "building ${SPEC} from source, patched (CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL}); 6 min of CPU time: 3 to 4 min on 2 idle cores (measured 2026-12-04)" >&2
  if [[ -f "$SPEC" ]]; then cp "$SPEC" "$WORK/"; else "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: -d "$WORK" "$SPEC"; fi
  tar xzf "$WORK"/llama_cpp_python-*.tar.gz -C "$WORK"
  SRC="$(find "$WORK" -maxdepth 1 -type d -name 'llama_cpp_python-*' | head -n 1)"
  patch -p1 --forward -d "$SRC/vendor/llama.cpp/ggml" < "$PATCH"
  mkdir -p "$WORK/wheel"
  "$PYTHON" -m pip wheel --no-deps ${LLAMACPP_PIP_ARGS:-} -w "$WORK/wheel" "$SRC"
  mkdir -p "$WHEELS"
  cp "$WORK"/wheel/llama_cpp_python-*.whl "$WHEELS/"
  WHEEL="$(find "$WHEELS" -maxdepth 1 -name 'llama_cpp_python-*.whl' | head -n 1)"
fi
"$PYTHON" -m pip install --force-reinstall --no-deps "$WHEEL"
"$PYTHON" -m pip install "$WHEEL"  # its dependencies (numpy, diskcache, jinja2, typing-extensions), where missing
# the patch's digest beside the binding's libraries: `make install-llamacpp` rebuilds when the patch changes
"$PYTHON" - "$PATCH" <<'PY'
import hashlib, os, sys
import llama_cpp
folder = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
with open(sys.argv[1], "rb") as patch, open(os.path.join(folder, "constrained-spec-patch.sha256"), "w") as out:
    out.write(hashlib.sha256(patch.read()).hexdigest() + "\n")
PY
echo "llama-cpp-python (patched) installed in $(( $(date +%s) - start )) s" >&2
