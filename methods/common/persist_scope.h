// What a training-free drafter's learned state (suffix's global trie, Token Recycling's adjacency
// matrix) carries from one request of a case to the next, and the prompt key both use to keep a
// request from drafting from its own earlier run (the runner's warmup, repeats).
// Checked by: tests/methods/suffix_test.cpp, tests/methods/recycling_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"

namespace specbed {

enum class PersistScope {
  kNone,     // every request starts from nothing
  kDataset,  // state learned on the other prompts this case decoded (same dataset and knobs)
  kRun,      // also what earlier cases of this run (this process, same target) decoded
};

// "none" | "dataset" | "run"; anything else throws naming `context`.
inline PersistScope ParsePersistScope(const std::string& name, const std::string& context) {
  if (name == "none") return PersistScope::kNone;
  if (name == "dataset") return PersistScope::kDataset;
  if (name == "run") return PersistScope::kRun;
  throw Error(context + ": unknown scope '" + name + "' (expected none, dataset or run)");
}

// FNV-1a over the token ids and the length: the key of a prompt.
inline uint64_t HashTokens(const std::vector<int32_t>& tokens) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t t : tokens) {
    h ^= static_cast<uint32_t>(t);
    h *= 0x100000001b3ull;
  }
  return h ^ tokens.size();
}

}  // namespace specbed
