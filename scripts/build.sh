#!/usr/bin/env bash
# Configures (CMake preset "release": Ninja, build/) and builds SpecBed with 2 jobs.
#   scripts/build.sh                 everything (library, CLI, every test binary)
#   scripts/build.sh specbed         only the named targets (scripts/quickstart needs only the CLI)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then cmake --preset release; fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j "${SPECBED_JOBS:-2}" "${targets[@]}"
