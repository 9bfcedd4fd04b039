// vLLM's speculative-decoding metric names computed from SpecBed's per-case aggregates, so a vLLM
// user reads the figures they know (vllm/v1/spec_decode/metrics.py: num_drafts, num_draft_tokens,
// num_accepted_tokens, num_accepted_tokens_per_pos):
//   acceptance_rate        = accepted draft tokens / drafted tokens (= 1 - rollback_rate);
//   mean_acceptance_length = 1 + accepted draft tokens / verify steps (vLLM counts the bonus
//                            token; SpecBed's τ = emitted / steps differs only where an answer
//                            stops inside a step);
//   per_position_acceptance_rate[i] = steps whose draft was accepted up to position i+1 / all
//                            steps (vLLM's unconditional per-position rate; SpecBed's r_i divides
//                            by the steps that drafted that deep instead).
// Tree methods count every drafted node as a draft token, as vLLM does for its tree drafters.
// Documented in reports/README.md ("vLLM names"). Checked by: tests/reports/summary_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "metrics/metrics.h"

namespace specbed {

struct VllmMetrics {
  double acceptance_rate = kNoValue;
  double mean_acceptance_length = kNoValue;
  std::vector<double> per_position_acceptance_rate;
};

inline VllmMetrics VllmCompatibleMetrics(const CaseMetrics& m) {
  VllmMetrics v;
  if (m.drafted > 0) v.acceptance_rate = static_cast<double>(m.accepted) / m.drafted;
  if (m.n_steps > 0) {
    v.mean_acceptance_length = 1.0 + static_cast<double>(m.accepted) / m.n_steps;
    for (int64_t n : m.positions.n_accepted) {
      v.per_position_acceptance_rate.push_back(static_cast<double>(n) / m.n_steps);
    }
  }
  return v;
}

}  // namespace specbed
