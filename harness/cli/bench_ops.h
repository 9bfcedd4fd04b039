// `specbed bench --count-ops`: the ATen ops of one decode step and of one verify step per width
// (issue 45, step 0; harness/engine/step_ops.h): launching ops in all and per decoder layer,
// metadata ops (views), CPU storage allocations, device-to-host copies, host reads of device data,
// and whether the step's trace (op, shapes, data pointers, scalars) is identical at two context
// lengths — the CPU proof that the step could be captured in a CUDA graph.
// Checked by: tests/cli/cli_test.cpp (CliBench.CountOpsTable).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specbed::cli {

struct OpCountOptions {
  std::vector<std::string> models, dtypes;
  std::string device = "cpu";
  std::vector<int64_t> contexts;  // each row's first context (>= 1); the second is 37 more
  std::vector<int64_t> widths;    // verify steps of w - 1 nodes for each w >= 2
};

// Prints one Markdown row per model x dtype x context x step (decode, then verify per width) and
// the launching ops of the first decode step by name. The ATen path is forced on the CPU.
void RunOpCountBench(const OpCountOptions& o);

}  // namespace specbed::cli
