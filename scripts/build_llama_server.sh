#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the very source the binding is built from (the llama-cpp-python sdist's
# vendor/llama.cpp, patched with scripts/llamacpp-batch-invariant.patch, the same CMake flags as
# scripts/install_llamacpp.sh: GGML_OPENMP=OFF, the AVX2-level extensions named), as a benchmark peer.
# Only the `llama-server` target, 2 jobs by default, no web UI (no npm, no download), no OpenSSL.
# Idempotent: the binary lands in ${LLAMA_SERVER_CACHE:-~/.cache/constrained-spec/llama-server}/<key>/ (outside the
# repository), stamped with the key (patch, flags, sdist); a second run with the same key only prints the path.
# Measured 2026-12-05 on the 2-core host: see docs/llamacpp.md ("llama-server as a peer").
# Usage: scripts/build_llama_server.sh [--path]   (--path: print where the binary is or would be, build nothing)
# The binary's path is the last line of stdout.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PYTHON="${PYTHON:-python3}"
VERSION="${LLAMACPP_VERSION:-0.3.36}"
SPEC="${LLAMACPP_SPEC:-llama-cpp-python==${VERSION}}"
JOBS="${LLAMA_SERVER_JOBS:-2}"
PATCH="$HERE/llamacpp-batch-invariant.patch"
# shellcheck source=scripts/llamacpp_cmake_args.sh
source "$HERE/llamacpp_cmake_args.sh"
SERVER_ARGS="-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/constrained-spec"
SDIST="$(find "$CACHE/downloads" -maxdepth 1 -name "llama_cpp_python-${VERSION}.tar.gz" 2>/dev/null | head -n 1 || true)"
KEY="$( { cat "$PATCH"; echo "$CMAKE_ARGS" "$SERVER_ARGS" "$SPEC" "$(uname -m)"; } | sha256sum | cut -c1-16)"
OUT="${LLAMA_SERVER_CACHE:-$CACHE/llama-server}/$KEY"
BIN="$OUT/llama-server"
if [[ "${1:-}" == "--path" ]]; then echo "$BIN"; exit 0; fi
if [[ -x "$BIN" && -f "$OUT/stamp" && "$(cat "$OUT/stamp")" == "$KEY" ]]; then
  echo "llama-server already built: $BIN" >&2
  echo "$BIN"; exit 0
fi
start=$(date +%s)
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
if [[ -z "$SDIST" ]]; then
  mkdir -p "$CACHE/downloads"
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: -d "$CACHE/downloads" "$SPEC"
  SDIST="$(find "$CACHE/downloads" -maxdepth 1 -name "llama_cpp_python-${VERSION}.tar.gz" | head -n 1)"
fi
tar xzf "$SDIST" -C "$WORK"
SRC="$(find "$WORK" -maxdepth 1 -type d -name 'llama_cpp_python-*' | head -n 1)/vendor/llama.cpp"
if [[ ! -f "$SRC/tools/server/CMakeLists.txt" ]]; then
  echo "the sdist $SDIST has no vendor/llama.cpp/tools/server: llama-server cannot be built from it" >&2
  exit 2
fi
patch -p1 --forward --quiet -d "$SRC/ggml" < "$PATCH"
echo "building llama-server from $SDIST (patched, $JOBS jobs) into $OUT" >&2
# shellcheck disable=SC2086  # the flags are words
cmake -S "$SRC" -B "$WORK/build" $CMAKE_ARGS $SERVER_ARGS > "$WORK/configure.log" || { cat "$WORK/configure.log" >&2; exit 1; }
cmake --build "$WORK/build" --target llama-server -j "$JOBS" >&2
mkdir -p "$OUT"
cp "$WORK/build/bin/llama-server" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
echo "$KEY" > "$OUT/stamp"
echo "llama-server built in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
