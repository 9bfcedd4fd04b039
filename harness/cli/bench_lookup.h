// `specbed bench --lookup-contexts`: the host cost of a step of the training-free lookup drafters
// (`ngram`'s index, `suffix`'s tries) as the context grows, on text the -t model generated.
// Checked by: tests/cli/cli_test.cpp (CliBench.LookupCostTable).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specbed::cli {

// For each context length: Begin over that many tokens of generated text, then `steps` Draft +
// Accept steps (one committed token each) of each lookup drafter at its default knobs; prints a
// Markdown table (µs per step, Begin ms). `model` generates the text (T = 1, seeded).
void RunLookupBench(const std::string& model, const std::vector<int64_t>& contexts, int64_t steps);

}  // namespace specbed::cli
