#!/usr/bin/env bash
# Configures (CMake preset "release": Ninja, build/) and builds SpecBed with 2 jobs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then cmake --preset release; fi
cmake --build build -j "${SPECBED_JOBS:-2}"
