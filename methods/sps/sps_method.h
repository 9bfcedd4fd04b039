// What `sps` shares with the methods built on it (`sps+osd`): the decoder options of a gamma-token
// draft chain verified by chain rejection sampling.
// Checked by: tests/engine/speculative_test.cpp, tests/methods/osd_test.cpp.
#pragma once

#include <cstdint>

#include "harness/engine/speculative_decoder.h"

namespace specbed {

// Budget gamma nodes of depth gamma, chain rejection sampling at T > 0.
SpeculativeOptions SpsOptions(int64_t gamma);

}  // namespace specbed
