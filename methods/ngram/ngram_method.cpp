// Registration of `ngram`: prompt lookup decoding (NgramDrafter) on the default
// SpeculativeDecoder; `sample_follow` at T > 0 (the drafts are point masses, so it is lossless).
// Checked by: tests/methods/ngram_test.cpp.
#include "base/error.h"
#include "methods/common/registration_util.h"
#include "methods/method_registry.h"
#include "methods/ngram/ngram_drafter.h"

namespace specbed {

void RegisterNgramMethods(MethodRegistry& registry) {
  MethodInfo info = DescribeMethod(
      "ngram",
      "prompt lookup: drafts the tokens that followed an earlier occurrence of the context's "
      "final n-gram (prompt + generated text; the earliest with a full continuation, as the "
      "reference code and Spec-Bench's PLD); no drafter model",
      "Saxena 2023, prompt-lookup-decoding (github.com/apoorvumang/prompt-lookup-decoding)",
      SampleFollowTraits(/*tree=*/false),
      {
          {"draft_length",
           10,
           "most tokens drafted per step (Spec-Bench's PLD setting: 10)",
           1,
           64,
           {}},
          {"max_ngram",
           3,
           "longest suffix n-gram looked up, tried first (Spec-Bench: 3)",
           1,
           16,
           {}},
          {"min_ngram", 1, "shortest suffix n-gram looked up", 1, 16, {}},
          {"occurrence",
           "earliest",
           "which earlier occurrence drafts: earliest (the reference code, Spec-Bench) or latest",
           1,
           0,
           {"earliest", "latest"}},
          {"full_continuation",
           1,
           "1 = only an occurrence followed by draft_length tokens counts (the reference); 0 = a "
           "shorter continuation drafts what there is (Hugging Face)",
           0,
           1,
           {}},
      });
  info.validate = [](const nlohmann::json& knobs) {
    const int64_t lo = knobs.at("min_ngram").get<int64_t>();
    const int64_t hi = knobs.at("max_ngram").get<int64_t>();
    SPECBED_CHECK(lo <= hi, "ngram: min_ngram (", lo, ") must not exceed max_ngram (", hi, ")");
  };
  info.factory = [](MethodContext& context, const nlohmann::json& knobs) {
    NgramOptions ngram;
    ngram.min_n = knobs.at("min_ngram").get<int64_t>();
    ngram.max_n = knobs.at("max_ngram").get<int64_t>();
    ngram.rule.occurrence =
        ParseNgramOccurrence(knobs.at("occurrence").get<std::string>(), "ngram knob occurrence");
    ngram.rule.full_continuation = knobs.at("full_continuation").get<int>() != 0;
    const int64_t length = knobs.at("draft_length").get<int64_t>();
    return SampleFollowDecoder(context, std::make_unique<NgramDrafter>(ngram), {length, length});
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
