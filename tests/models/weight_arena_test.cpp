// models/weight_arena.h: packing a model's streamed matrices into one huge-page arena keeps every
// value, dtype and shape, aligns each tensor, keeps the arena alive through its views, is switched
// off by SetWeightHugePages(false) (and for weights under 2 MiB), and leaves a model's logits bit
// for bit unchanged; the huge-page byte count is read back from /proc/self/smaps.
#include "models/weight_arena.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "models/llama_model.h"
#include "models/llama_weights.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

struct RestoreHugePages {
  ~RestoreHugePages() { SetWeightHugePages(true); }
};

TEST(WeightArena, PacksValuesAlignedAndKeepsTheArenaAlive) {
  at::manual_seed(11);
  at::Tensor a = at::randn({300, 70});
  at::Tensor b = at::randn({5, 3}).to(at::kBFloat16);
  at::Tensor c = at::randn({64, 9}).t();  // not contiguous: packed contiguous
  at::Tensor undefined;
  const at::Tensor a0 = a.clone(), b0 = b.clone(), c0 = c.clone();
  at::Tensor small = at::randn({4});
  EXPECT_EQ(PackIntoHugePages({&small}).bytes, 0);  // under kWeightArenaMinBytes: left alone
  const WeightArenaStats stats = PackIntoHugePages({&a, &b, &c, &undefined}, /*min_bytes=*/0);
  EXPECT_FALSE(undefined.defined());
  EXPECT_GE(stats.bytes, a0.nbytes() + b0.nbytes() + c0.nbytes());
  EXPECT_GE(stats.huge_page_bytes, 0) << "/proc/self/smaps did not show the arena";
  for (const auto& [packed, original] :
       std::vector<std::pair<at::Tensor, at::Tensor>>{{a, a0}, {b, b0}, {c, c0}}) {
    EXPECT_TRUE(packed.is_contiguous());
    EXPECT_EQ(packed.scalar_type(), original.scalar_type());
    EXPECT_TRUE(at::equal(packed, original));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(packed.data_ptr()) % 4096, 0u);
  }
  EXPECT_NE(a.data_ptr(), a0.data_ptr());
  // The arena outlives the other views: b and c freed, a still reads its values.
  b = at::Tensor();
  c = at::Tensor();
  EXPECT_TRUE(at::equal(a, a0));
}

TEST(WeightArena, ModelLogitsUnchangedAndSwitchOff) {
  RestoreHugePages restore;
  LlamaConfig config = testing_util::SmallLlama3Config();
  config.hidden_dim = 8192;  // w_gate_up alone is 4 MiB: over kWeightArenaMinBytes
  const LlamaWeights weights = RandomLlamaWeights(config, 3, at::kFloat);
  const at::Tensor ids = at::tensor(std::vector<int64_t>{1, 5, 9, 2}, at::kLong).view({1, 4});
  auto logits = [&](LlamaModel& model) {
    KvCache cache = model.NewCache(1, 8);
    ForwardOptions options;
    options.logits = LogitsMode::kAll;
    return model.Forward(ids, cache, options).logits.clone();
  };
  SetWeightHugePages(true);
  LlamaModel packed(config, weights);
  SetWeightHugePages(false);
  LlamaModel plain(config, weights);
  EXPECT_GT(packed.weight_arena().bytes, 0);
  EXPECT_EQ(plain.weight_arena().bytes, 0);
  EXPECT_NE(packed.weights().layers[0].wqkv.data_ptr(), weights.layers[0].wqkv.data_ptr());
  EXPECT_TRUE(at::equal(logits(packed), logits(plain)));
}

TEST(WeightArena, HugePageBytesOfUnmappedMemoryIsUnknown) {
  // An address no mapping holds (the second page, never mapped): not found -> -1.
  EXPECT_EQ(HugePageBytesOf(reinterpret_cast<void*>(uintptr_t{4096}), 4096), -1);
  const std::shared_ptr<char> buffer = HugePageBuffer(int64_t{4} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.get()) % (uintptr_t{2} << 20), 0u);
  EXPECT_GE(HugePageBytesOf(buffer.get(), int64_t{4} << 20), 0);
}

}  // namespace
}  // namespace specbed
