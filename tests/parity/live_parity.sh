#!/usr/bin/env bash
# ctest's TransformersLive.LogitsAndIds: parity with Hugging Face transformers computed live.
# Writes the fixtures with the project's Python environment into OUT_DIR
# (tests/parity/make_hf_fixtures.py: four tiny random models, float32 and bfloat16 logits on the
# CPU, ~10 s) and runs hf_parity_test's CPU checks against them (SPECBED_PARITY_FIXTURES=OUT_DIR,
# SPECBED_PARITY_REQUIRE=1: every family must be there). Its [ PARITY ] lines give
# max |logit - transformers| per family and dtype.
# The committed tests/parity/fixtures stay the GPU machine's record (checked by plain ctest).
#   tests/parity/live_parity.sh HF_PARITY_TEST_BINARY OUT_DIR
# Environment:
#   SPECBED_PARITY_LIVE=0  skip (exit 77: ctest reports Skipped) where the environment is absent,
#                          e.g. a developer machine without scripts/deps.sh's .venv. Without it a
#                          missing environment fails: CI always has one (scripts/deps.sh).
#   SPECBED_PYTHON         python with torch + transformers (default: $SPECBED_VENV/bin/python when
#                          SPECBED_VENV is set, else <repo>/.venv/bin/python)
# Checked by: ctest TransformersLive.LogitsAndIds (tests/models/CMakeLists.txt).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: live_parity.sh HF_PARITY_TEST_BINARY OUT_DIR" >&2; exit 2; }
binary=$1 out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "${SPECBED_PARITY_LIVE:-1}" = 0 ]; then
  echo "live_parity: skipped (SPECBED_PARITY_LIVE=0)"
  exit 77
fi
python=${SPECBED_PYTHON:-${SPECBED_VENV:+$SPECBED_VENV/bin/python}}
python=${python:-$root/.venv/bin/python}
if ! "$python" -c 'import torch, transformers' 2>/dev/null; then
  echo "live_parity: no torch + transformers in $python: run scripts/deps.sh (or set" \
    "SPECBED_PYTHON; SPECBED_PARITY_LIVE=0 skips this test on a machine without them)" >&2
  exit 1
fi
rm -rf "$out"
start=$(date +%s)
# No hub (everything is local), no progress bars, no __pycache__ in the source tree; one torch
# thread (tiny matmuls: with two, a loaded 2-core machine spends 3x longer waiting on the pool).
OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 PYTHONDONTWRITEBYTECODE=1 \
  "$python" "$root/tests/parity/make_hf_fixtures.py" "$out"
echo "live_parity: fixtures written in $(($(date +%s) - start)) s by $python" \
  "(transformers $("$python" -c 'import transformers; print(transformers.__version__)'))"
SPECBED_PARITY_FIXTURES=$out SPECBED_PARITY_REQUIRE=1 "$binary" --gtest_filter='HfParity.*'

