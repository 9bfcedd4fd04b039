// `specbed bench --lookup-contexts`: the host cost of a step of the training-free lookup drafters
// (`ngram`'s index, `suffix`'s tries) as the context grows, and what they draft, on text the -t
// model generated and on that text repeated.
// Checked by: tests/cli/cli_test.cpp (CliBench.LookupCostTable).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specbed::cli {

// For each text (`sampled`: stories `model` generates at T = 1, seeded, concatenated;
// `repeated`: the first 100 of those tokens over and over) and context length: Begin over that
// many tokens, then `steps` Draft + Accept steps (one committed token each) of each lookup drafter
// at its default knobs; prints a Markdown table (µs per step, drafted and matched tokens per
// step — matched: the longest draft path the text's next tokens follow — and Begin ms).
void RunLookupBench(const std::string& model, const std::vector<int64_t>& contexts, int64_t steps);

}  // namespace specbed::cli
