#!/usr/bin/env bash
# Configures (CMake preset "release": Ninja, build/) and builds SpecBed with 2 jobs.
#   scripts/build.sh                 everything (library, CLI, every test binary)
#   scripts/build.sh specbed         only the named targets (scripts/quickstart needs only the CLI)
# SPECBED_CUDA=ON (environment): the same tree with the CUDA kernels (SPECBED_CUDA=ON, nvcc from
# PATH or /usr/local/cuda/bin, sm_90 without a GPU): what CI builds and tests, so that one build
# serves the CPU tests and the CUDA build check (scripts/check_cuda_build --build-dir build). CPU
# test binaries still load libtorch_cpu alone (kernels/README.md). SPECBED_CUDA=ON or OFF
# reconfigures a tree configured the other way; unset keeps the tree's setting (OFF for a new one).
set -euo pipefail
cd "$(dirname "$0")/.."
cuda="${SPECBED_CUDA:-}"
configure=()
if [ "$cuda" = ON ]; then
  nvcc="$(command -v nvcc || true)"
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  if [ -z "$nvcc" ]; then
    echo "scripts/build.sh: SPECBED_CUDA=ON but nvcc is not on PATH or in /usr/local/cuda/bin" >&2
    exit 1
  fi
  configure=(-DSPECBED_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc")
fi
if [ ! -f build/build.ninja ]; then
  cmake --preset release "${configure[@]}"
elif [ -n "$cuda" ] && ! grep -q "^SPECBED_CUDA:BOOL=$cuda\$" build/CMakeCache.txt; then
  cmake build -DSPECBED_CUDA="$cuda" "${configure[@]}"
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j "${SPECBED_JOBS:-2}" "${targets[@]}"
