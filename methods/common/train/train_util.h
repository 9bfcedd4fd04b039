// Small helpers shared by the drafter trainers and their data tools (draft_lm_trainer, regen,
// target_features): seed derivation, atomic file writes, the target weight fingerprint and the
// flag name of a settings key.
// Checked by: tests/train/train_test.cpp (resume and mismatch checks that rely on them) and
// tests/train/regen_test.cpp (per-sequence seeds, fingerprints in provenance and manifests).
#pragma once

#include <cstdint>
#include <string>

#include "base/mapped_file.h"  // WriteFileAtomically
#include "models/llama_model.h"

namespace specbed {

// Deterministic 64-bit seed from (seed, index, salt): FNV-1a over the three words.
uint64_t DeriveSeed(uint64_t seed, uint64_t index, uint64_t salt);

// 16 hex digits identifying the model's weights: FNV-1a over the bytes of the embedding, the
// final norm, the first layer's q/k/v, the last layer's down projection and an untied head.
std::string TargetFingerprint(const LlamaModel& model);

// The command-line flag of a settings key: "n_sequences" -> "--n-sequences".
std::string FlagName(const std::string& key);

}  // namespace specbed
