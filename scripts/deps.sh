#!/usr/bin/env bash
# Installs SpecBed's Debian 12 build and run dependencies and its Python environment (idempotent).
# 1. Debian's packages (skipped when all are present). slurmctld, slurmd, slurm-client and munge
#    are for scripts/slurm_e2e (CI's real single-node Slurm run), which uses none of their system
#    services: it starts private daemons in a temporary folder. fonts-dejavu-core is the font the
#    report is drawn and laid out with (gnuplot's 'Sans', and the HTML's sans-serif where no
#    Helvetica/Arial substitute is installed). python3-yaml is for scripts/check_gpu_workflow.
#    python3-venv makes the environment below.
# 2. LibTorch and the transformers peer from PyPI, pinned, into the project's git-ignored .venv/
#    (skipped when the pins are installed there): torch 2.11.0 is the GPU machines' version (a
#    CUDA 13.0 build; its wheel carries LibTorch's headers, libraries and CMake package, which
#    cmake/SpecBedTorch.cmake finds there), transformers/safetensors/tokenizers for the live parity
#    test and scripts/peer_transformers. ~4.9 GB, ~2 min on a fresh machine.
#    SPECBED_VENV=<dir> puts it elsewhere; SPECBED_SKIP_VENV=1 skips it (Torch_DIR given by hand).
# Usage: scripts/deps.sh [--debian]    --debian: step 1 only (CI installs the packages first and
#        starts its LibTorch-free clang build while PyPI's download runs).
# Checked by: CI (.ci/run starts with it on a fresh machine).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  build-essential cmake ninja-build git pkg-config
  nlohmann-json3-dev libcli11-dev libsqlite3-dev sqlite3
  libgtest-dev libgmock-dev libpcre2-dev
  gnuplot-nox chromium fonts-dejavu-core clang-format
  libutf8proc-dev clang libclang-rt-14-dev
  python3-yaml python3-venv
  slurmctld slurmd slurm-client munge
)
python_pins=(torch==2.11.0 transformers==5.24.0 safetensors==0.8.0 tokenizers==0.23.3)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

install_debian() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: all ${#packages[@]} Debian packages present"
    return
  fi
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # The Slurm and munge packages start their system services on install, and their postinst fails
  # when a service cannot start (slurmd has no slurm.conf yet). scripts/slurm_e2e needs none of
  # them, so where no policy-rc.d exists (a container image usually has one) a temporary one keeps
  # the services from starting during this install.
  local policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary, scripts/deps.sh: no service starts during the install\nexit 101\n' |
      $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    trap '$SUDO rm -f "$policy"' EXIT
  fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

install_venv() {
  [ "${SPECBED_SKIP_VENV:-0}" = 1 ] && { echo "deps: SPECBED_SKIP_VENV=1, no Python environment"; return; }
  local venv="${SPECBED_VENV:-.venv}"
  if [ -x "$venv/bin/python" ] &&
    "$venv/bin/python" - "${python_pins[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
sys.exit(any(version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))
PY
    echo "deps: $venv has ${python_pins[*]}"
    return
  fi
  echo "deps: installing ${python_pins[*]} into $venv (PyPI)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --disable-pip-version-check -q "${python_pins[@]}"
}

install_debian
if [ "${1:-}" = --debian ]; then exit 0; fi
install_venv
