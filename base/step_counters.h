// The counters and phase times of one verify step, as the decoder loop measures them
// (harness/engine: StepStats) and as the results store keeps them (results/store.h: StepRecord
// adds the answer and the step index). One struct for both, so a new step counter is declared
// once; its column is one line of results/record_schema.cpp. The defaults here are the decoder's;
// StepRecord starts its "not recorded" fields at -1. Plain data, no LibTorch.
// Checked by: tests/results/record_schema_test.cpp (every field stored, exported and read back).
#pragma once

#include <cstdint>

namespace specbed {

struct StepCounters {
  int64_t n_drafted = 0;    // drafted nodes (root excluded)
  int64_t n_accepted = 0;   // accepted draft tokens (path length)
  int64_t n_emitted = 0;    // tokens appended to the output this step (<= n_accepted + 1; fewer
                            // only when a stop rule fired inside the step)
  int64_t draft_depth = 0;  // deepest drafted node
  int64_t n_rollback_events = 0;
  double t_draft_us = 0, t_verify_us = 0, t_other_us = 0;
  double t_adapt_us = 0;  // online adaptation run in this step (included in t_draft_us)
  // Per-side busy time: how long each side computed in this step. For a sequential decoder these
  // equal t_draft_us / t_verify_us. A decoder that overlaps drafting with verification (PEARL,
  // SpecBranch) still makes t_draft + t_verify + t_other tile the step's wall time (t_verify = the
  // target side's critical path, t_draft = draft time NOT hidden behind it), and reports here
  // what each side really computed, so busy_draft + busy_verify > wall when they overlapped.
  double t_draft_busy_us = 0, t_verify_busy_us = 0;
  int64_t n_target_forwards = 1;  // target forwards run in this step (verification passes)
  // Rollback tokens (specs/specbranch.md 1.4, 5): draft tokens discarded because a draft token
  // was rejected -- the rejected token, every token drafted after it, and tokens drafted
  // concurrently that assumed it (parallel work); not the siblings a tree or branch selection
  // drops. Divided by n_drafted (every drafted token, discarded parallel work included) it gives
  // the rollback rate.
  int64_t n_rolled_back = 0;
  // Draft tokens the drafter generated in this step, whether offered to the verifier or not (=
  // n_drafted for a sequential decoder; a parallel decoder also drafts the next chunk). A parallel
  // decoder counts each drafted position once (methods/common/draft_ledger.h).
  int64_t n_draft_generated = 0;
  // Draft positions the draft side discarded itself, with no target rejection (SpecBranch's
  // posterior H-RAD trimming, a chunk cut at the context limit); waste in the rollback rate.
  int64_t n_trimmed = 0;
  // The drafter's catch-up over the prompt (Drafter::Begin + Prefill), first step only; already
  // included in t_draft_us (speedups do not change), reported beside T_D% as its own phase.
  double t_draft_prefill_us = 0;
  // Schema v12 (issue 45, step 6), -1 = not measured (decoders that do not, rows before v12):
  // the phases' device time (CUDA timing events around each phase, read once per step; on the
  // CPU the host clock, whose ops are synchronous: then equal to the t_*_us above). The drafter's
  // Begin, which the first step's t_draft_us includes, is not part of its device time.
  double t_draft_device_us = -1, t_verify_device_us = -1, t_other_device_us = -1;
  // Engine counters of the step (kernels/engine_counters.h): launching dispatcher calls and host
  // reads (only under SPECBED_COUNT_OPS=on), captured-step replays and captures (every model of
  // the process), copies host -> device and device -> host at the engine's transfer points (and
  // any cross-device copy while ops are counted).
  int64_t n_launches = -1, n_host_reads = -1, n_graph_replays = -1, n_graph_captures = -1;
  int64_t n_h2d_copies = -1, n_d2h_copies = -1;
};

}  // namespace specbed
