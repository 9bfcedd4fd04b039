#!/usr/bin/env bash
# scripts/gpu_check's plumbing without a GPU: `--shrink` on the CPU build BUILD_DIR (its
# specbed), every step that can run here (probe, the attention diagnosis' five settings, the op
# counts per step, the GPU gate's config on the CPU, the twin at
# width x4 with its bench and AR, SpS, EAGLE-3, eagle3+svip and LTD on a padded head, BlockPilot
# on the padded DFlash head, Medusa on padded heads, PEARL on the draft twin, SpecBranch with the
# padded H-RAD, eagle3+specdecpp with the padded classifier and ngram at T = 0 and T = 1); the build (done), the ctest step (this is ctest) and the
# method matrix (slow) skipped. Checks the exit status, the step table and the databases; and that
# an unknown argument is refused with exit 2.
# Usage: gpu_check_test.sh BUILD_DIR (ctest TreeCheck.GpuCheckShrunk)
set -euo pipefail
build=$1
cd "$(dirname "$0")/../.."
out=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_test.XXXXXX")
trap 'rm -rf "$out"' EXIT
fail() { echo "gpu_check_test: FAILED: $*" >&2; exit 1; }

OUT=$out BUILD=$build SKIP_BUILD=1 SKIP_TESTS=1 SKIP_MATRIX=1 BUDGET_S=600 TWIN_METHODS="ar sps eagle3 ngram pearl eagle3+svip ltd dflash+blockpilot medusa specbranch eagle3+specdecpp" \
  scripts/gpu_check --shrink >"$out/stdout" 2>&1 || { cat "$out/stdout"; fail "exit status $?"; }
md=$out/gpu_check.md
[ -s "$md" ] || fail "no $md"
for row in "| probe | passed" "| build | skipped (SKIP_BUILD=1)" "| attention | passed" \
  "| ops | passed" "| gate | passed" "| twin | passed" "| t1 | passed"; do
  grep -qF "$row" "$md" || { cat "$md"; fail "no row '$row'"; }
done
for db in gpu_gate.db twin8b.db; do [ -s "$out/$db" ] || fail "no $db"; done
"$build/specbed" summary --wide "$out/twin8b.db" >"$out/summary" || fail "summary of twin8b.db"
grep -q "sps(drafter=" "$out/summary" || fail "no SpS case in twin8b.db"
grep -q "eagle3(depth=7,head=.*twin8b-eagle3" "$out/summary" || fail "no EAGLE-3 case on its twin head"
grep -q "eagle3+svip(.*head=.*twin8b-eagle3" "$out/summary" || fail "no eagle3+svip case on the twin head"
grep -q "pearl(.*drafter=.*twin8b-draft" "$out/summary" || fail "no PEARL case on the draft twin"
grep -qE ' ngram[( ]' "$out/summary" || fail "no ngram case"
grep -q "ltd(.*head=.*twin8b-eagle3.*policy=.*ltd-twin" "$out/summary" || fail "no LTD case on the twin head"
grep -q "dflash+blockpilot(drafter=.*twin8b-dflash" "$out/summary" || fail "no BlockPilot case on the DFlash twin"
grep -q "medusa(.*head=.*twin8b-medusa" "$out/summary" || fail "no Medusa case on its twin heads"
grep -q "specbranch(.*predictor=.*twin8b-hrad" "$out/summary" || fail "no SpecBranch case on the H-RAD twin"
grep -q "eagle3+specdecpp(classifier=.*twin8b-ltd-baselines" "$out/summary" ||
  fail "no SpecDec++ case on the classifier twin"
[ "$(grep -c ' stories  1 ' "$out/summary")" -ge 2 ] || fail "no T = 1 cases in twin8b.db"
# The attention diagnosis has a row per setting; the op counts a decode row and verify rows.
[ "$(grep -cE '^\| (default|TORCH_CUDNN_SDPA_[A-Z_]+=1|SPECBED_ATTENTION=(bmm|fused)) \|' "$md")" = 5 ] ||
  fail "the attention diagnosis lacks a setting"
grep -qE '^\| ops \| .*twin8b \| float32 \| decode \| 1 \| 128 \| [0-9]+ \| 9\.0 \|' "$md" ||
  fail "no decode row of 9 launching ops per layer"
rc=0
scripts/gpu_check --bogus >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "an unknown argument gave exit $rc, expected 2"
echo "gpu_check_test: passed"
