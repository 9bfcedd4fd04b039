#!/usr/bin/env bash
# Installs SpecBed's Debian 12 build and run dependencies (idempotent; skips apt when all are present).
# libopenblas0-openmp must be named explicitly: without it libtorch falls back to the reference
# BLAS and fp32 matmul runs ~15x slower (see docs/DEPENDENCIES.md). slurmctld, slurmd,
# slurm-client and munge are for scripts/slurm_e2e (CI's real single-node Slurm run), which uses
# none of their system services: it starts private daemons in a temporary folder.
# fonts-dejavu-core is the font the report is drawn and laid out with (gnuplot's 'Sans', and the
# HTML's sans-serif where no Helvetica/Arial substitute is installed), named so that a minimal
# Debian has it whatever else pulls it in (today fontconfig-config does). python3-yaml is for
# scripts/check_gpu_workflow (ctest TreeCheck.GpuWorkflow parses .github/workflows/gpu.yml).
set -euo pipefail
packages=(
  build-essential cmake ninja-build git pkg-config
  libtorch-dev libopenblas0-openmp
  nlohmann-json3-dev libcli11-dev libsqlite3-dev sqlite3
  libgtest-dev libgmock-dev libpcre2-dev
  gnuplot-nox chromium fonts-dejavu-core clang-format
  libutf8proc-dev clang libclang-rt-14-dev
  python3-yaml
  slurmctld slurmd slurm-client munge
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The Slurm and munge packages start their system services on install, and their postinst fails
# when a service cannot start (slurmd has no slurm.conf yet). scripts/slurm_e2e needs none of
# them, so where no policy-rc.d exists (a container image usually has one) a temporary one keeps
# the services from starting during this install.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# temporary, scripts/deps.sh: no service starts during the install\nexit 101\n' |
    $SUDO tee "$policy" >/dev/null
  $SUDO chmod 755 "$policy"
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
