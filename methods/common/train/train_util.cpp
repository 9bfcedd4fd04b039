// Shared trainer helpers (see train_util.h).
// Checked by: tests/train/train_test.cpp and tests/train/regen_test.cpp.
#include "methods/common/train/train_util.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/error.h"
#include "base/hash.h"

namespace specbed {

uint64_t DeriveSeed(uint64_t seed, uint64_t index, uint64_t salt) {
  const uint64_t words[3] = {seed, index, salt};
  return Fnv1a64(words, sizeof(words));
}

std::string TargetFingerprint(const LlamaModel& model) {
  const LlamaWeights& w = model.weights();
  std::vector<at::Tensor> parts = {w.tok_embeddings, w.final_norm, w.layers.front().wqkv,
                                   w.layers.back().w_down};
  if (!w.lm_head.is_same(w.tok_embeddings)) parts.push_back(w.lm_head);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const at::Tensor& t : parts) {
    const at::Tensor c = t.contiguous().cpu();  // hashes bytes: a device's weights come to the host
    h = Fnv1a64(c.data_ptr(), c.numel() * c.element_size(), h);
  }
  return Hex64(h);
}

std::string FlagName(const std::string& key) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

}  // namespace specbed
