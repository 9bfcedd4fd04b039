// The ops of one decode step and of one verify step on the ATen forward path (issue 45, step 0):
// what `specbed bench --count-ops` prints and tests/engine/step_ops_test.cpp pins. Each step is
// recorded twice, at two committed lengths, after warm-up steps at both (so buffers are at their
// steady size): the counts come from the first, and trace identity (models/op_trace.h) compares
// the two — the CPU proof that the step could be captured once and replayed at any length.
// Checked by: tests/engine/step_ops_test.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "models/llama_model.h"
#include "models/op_trace.h"

namespace specbed {

struct StepOps {
  std::string step;                      // "decode" or "verify"
  int64_t width = 1;                     // new tokens the forward runs (verify: root + nodes)
  int64_t context_a = 0, context_b = 0;  // committed lengths of the two recorded steps
  int64_t n_layers = 0;
  OpCounts counts;              // of the step at context_a
  int64_t layer_launching = 0;  // launching ops inside the decoder layers (OpCounts::layers)
  int64_t allocations = 0;      // CPU tensor storage allocations in the step at context_a
  int64_t host_copies = 0;      // device-to-host copies of the decode path in that step
  std::string difference;       // TraceDifference of the two steps ("" = identical)
  double per_layer() const { return n_layers > 0 ? double(layer_launching) / n_layers : 0; }
  int64_t outside_layers() const { return counts.launching - layer_launching; }
};

// One AR decode step as ar_generate makes it on the ATen path: a forward of one token, then
// DeviceVerifier::SampleToken (greedy), after context_a and after context_b cached tokens.
// model: on ForwardPath::kAten (else specbed::Error); contexts >= 1 and fitting max_seq_len.
StepOps TraceDecodeStep(LlamaModel& model, int64_t context_a, int64_t context_b);

// One greedy verify step (TreeVerifier::Verify: forward over root + tree, acceptance, KV
// compaction) of a binary tree of `n_nodes` nodes (node i's parent is (i - 1) / 2; node 0 is the
// root's child) with seeded random tokens, after context_a and after context_b.
StepOps TraceVerifyStep(LlamaModel& model, int64_t n_nodes, int64_t context_a, int64_t context_b);

}  // namespace specbed
