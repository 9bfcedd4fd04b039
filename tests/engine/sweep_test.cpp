// Tests of harness/runner/sweep.h: cartesian knob expansion, exclude/only (AR baselines kept for
// kept cases), repeats (AR not repeated, repeat 0 keeps the pre-sweep case key), batch sizes
// (skipped for methods without batch support), AR dedupe, the pass-through `paper`, and sharding
// (every case in exactly one shard, assignment independent of the other cases). Knob range strings
// and parse errors: tests/runner/sweep_config_test.cpp (no LibTorch).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/hash.h"
#include "harness/runner/sweep.h"
#include "methods/method_registry.h"
#include "tests/common/test_util.h"
#include "tests/engine/builtin_methods.h"

namespace specbed {
namespace {

using Json = nlohmann::json;
using testing::BuiltinMethods;
using testing::ErrorOf;

SweepExpansion Expand(const char* json, const MethodRegistry& methods = BuiltinMethods()) {
  return ExpandSweep(ParseSweepConfig(Json::parse(json), "sweep.json"), methods);
}

TEST(SweepExpand, KnobListsAndRangesAreCrossedWithinEachEntry) {
  const SweepExpansion x = Expand(R"({"methods":["ar",
      {"name":"sps","knobs":{"gamma":[1,"2-3"]}},
      {"name":"eagle3","knobs":{"top_k":"2-4+2","depth":[3,5],"total_tokens":16}}]})");
  ASSERT_EQ(x.cases.size(), 1u + 3u + 4u);
  EXPECT_TRUE(x.notes.empty());
  EXPECT_EQ(x.cases[0].method.name, "ar");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(x.cases[1 + i].method.name, "sps");
    EXPECT_EQ(x.cases[1 + i].method.knobs["gamma"], i + 1);
    EXPECT_EQ(x.cases[1 + i].method.knobs["drafter"], "stories260K-draft") << "knobs resolved";
  }
  // Knobs in key order, the first one outermost: depth x top_k.
  const std::vector<std::pair<int, int>> want = {{3, 2}, {3, 4}, {5, 2}, {5, 4}};
  for (size_t i = 0; i < want.size(); ++i) {
    const CaseConfig& c = x.cases[4 + i];
    EXPECT_EQ(c.method.name, "eagle3");
    EXPECT_EQ(c.method.knobs["depth"], want[i].first);
    EXPECT_EQ(c.method.knobs["top_k"], want[i].second);
    EXPECT_EQ(c.method.knobs["total_tokens"], 16);
  }
  // The same file expands the same way; keys are unique.
  const SweepExpansion y = Expand(R"({"methods":["ar",
      {"name":"sps","knobs":{"gamma":[1,"2-3"]}},
      {"name":"eagle3","knobs":{"top_k":"2-4+2","depth":[3,5],"total_tokens":16}}]})");
  std::set<std::string> keys;
  for (size_t i = 0; i < x.cases.size(); ++i) {
    EXPECT_EQ(x.cases[i].Key(), y.cases[i].Key());
    keys.insert(x.cases[i].Key());
  }
  EXPECT_EQ(keys.size(), x.cases.size());
  // Knob values out of the method's range fail naming the file.
  const std::string e =
      ErrorOf([] { Expand(R"({"methods":[{"name":"sps","knobs":{"gamma":"16-1024*2"}}]})"); });
  EXPECT_CONTAINS(e, "sweep.json: knob 'gamma' of method 'sps' must be in");
}

TEST(SweepExpand, PlainRunConfigKeepsItsCasesAndKeys) {
  const char* json = R"({"methods":["ar",{"name":"sps","knobs":{"gamma":2}}],
      "temperatures":[0,1],"seeds":[0,3],"datasets":[{"name":"stories","limit":2}]})";
  const SweepExpansion x = Expand(json);
  std::vector<CaseConfig> old = ExpandCases(ParseRunConfig(Json::parse(json), "sweep.json"));
  ASSERT_EQ(x.cases.size(), old.size());
  for (size_t i = 0; i < old.size(); ++i) {
    old[i].method.knobs =
        BuiltinMethods().ResolveKnobsFor(old[i].method.name, old[i].method.knobs, old[i].target);
    EXPECT_EQ(x.cases[i].Key(), old[i].Key()) << i;
    EXPECT_EQ(x.cases[i].Label(), old[i].Label());
  }
  // The key of a repeat-0, batch-1 case is the hash of the pre-sweep case config.
  const CaseConfig& c = x.cases[1];
  const Json legacy = {{"target", c.target},
                       {"method", c.method.name},
                       {"knobs", c.method.knobs},
                       {"dataset", c.dataset.name},
                       {"limit", c.dataset.limit},
                       {"categories", c.dataset.categories},
                       {"temperature", c.temperature},
                       {"seed", c.seed},
                       {"top_p", c.top_p},
                       {"top_k", c.top_k},
                       {"max_new_tokens", c.max_new_tokens},
                       {"dtype", c.dtype},
                       {"threads", c.threads},
                       {"stop_strings", c.stop_strings},
                       {"chat_template", c.chat_template},
                       {"system_prompt", c.system_prompt}};
  // With AR in the config the case is timed paired, which is part of its key; per_case keeps
  // the pre-sweep key.
  EXPECT_EQ(c.timing, "paired");
  Json paired = legacy;
  paired["timing"] = "paired";
  EXPECT_EQ(c.Key(), HashString(paired.dump()));
  CaseConfig per_case = c;
  per_case.timing = "per_case";
  EXPECT_EQ(per_case.Key(), HashString(legacy.dump()));
  EXPECT_EQ(c.ToJson()["repeat"], 0);
  EXPECT_EQ(c.ToJson()["batch_size"], 1);
  EXPECT_FALSE(c.ToJson().contains("paper"));
}

TEST(SweepExpand, TimingIsPairedWhenTheConfigHasArForTheWorkload) {
  // auto (default): sps is paired where an AR case of the same workload exists (T = 0 and 1;
  // synthetic acceptance and repeats do not change the workload); AR itself is per_case.
  const SweepExpansion x = Expand(R"({"methods":["ar",{"name":"sps","knobs":{"gamma":[1,2]}}],
      "temperatures":[0,1],"repeats":2,"synthetic_acceptance":[0.5]})");
  ASSERT_EQ(x.cases.size(), 2u + 8u);
  for (const CaseConfig& c : x.cases) {
    EXPECT_EQ(c.timing, c.method.name == "ar" ? "per_case" : "paired") << c.Label();
    EXPECT_EQ(c.ToJson()["timing"], c.timing);
    EXPECT_EQ(c.IdentityJson().contains("timing"), c.timing == "paired");
  }
  // No AR case for the workload: per_case; `only` keeps the AR baseline, so still paired.
  for (const CaseConfig& c : Expand(R"({"methods":[{"name":"sps","knobs":{"gamma":2}}]})").cases) {
    EXPECT_EQ(c.timing, "per_case");
  }
  for (const CaseConfig& c : Expand(R"({"methods":["ar",{"name":"sps","knobs":{"gamma":2}}],
      "only":[{"method":"sps"}]})")
                                 .cases) {
    EXPECT_EQ(c.timing, c.method.name == "ar" ? "per_case" : "paired");
  }
  // Synthetic acceptance is set on speculative cases only: `only` still keeps their AR baseline.
  const SweepExpansion synthetic = Expand(R"({"methods":["ar",{"name":"sps","knobs":{"gamma":2}}],
      "synthetic_acceptance":[0.5],"only":[{"method":"sps"}]})");
  ASSERT_EQ(synthetic.cases.size(), 2u);
  EXPECT_TRUE(synthetic.cases[0].IsArBaseline());
  EXPECT_EQ(synthetic.cases[1].timing, "paired");
  // Explicit modes.
  for (const CaseConfig& c : Expand(R"({"methods":["ar",{"name":"sps","knobs":{"gamma":2}}],
      "timing":"per_case"})")
                                 .cases) {
    EXPECT_EQ(c.timing, "per_case");
  }
  for (const CaseConfig& c :
       Expand(R"({"methods":[{"name":"sps","knobs":{"gamma":2}}],"timing":"paired"})").cases) {
    EXPECT_EQ(c.timing, "paired");
    EXPECT_CONTAINS(c.Label(), " paired");
  }
  EXPECT_CONTAINS(ErrorOf([] { Expand(R"({"timing":"pairs"})"); }),
                  "sweep.json: timing must be \"auto\", \"paired\" or \"per_case\"");
}

TEST(SweepExpand, RepeatsRunSpeculativeCasesRepeatedlyAndArOnce) {
  const SweepExpansion x = Expand(R"({"methods":["ar",{"name":"sps","knobs":{"gamma":[1,2]}}],
      "temperatures":[0,1],"repeats":3})");
  int64_t ar = 0;
  std::map<int64_t, int64_t> sps_by_repeat;
  std::set<std::string> keys;
  for (const CaseConfig& c : x.cases) {
    keys.insert(c.Key());
    if (c.method.name == "ar") {
      ++ar;
      EXPECT_EQ(c.repeat, 0);
    } else {
      ++sps_by_repeat[c.repeat];
    }
    EXPECT_EQ(c.ToJson()["repeat"], c.repeat);
    if (c.repeat > 0) {
      EXPECT_CONTAINS(c.Label(), " repeat=" + std::to_string(c.repeat));
    }
  }
  EXPECT_EQ(ar, 2) << "one AR case per temperature, not per repeat";
  EXPECT_EQ(sps_by_repeat, (std::map<int64_t, int64_t>{{0, 4}, {1, 4}, {2, 4}}));
  EXPECT_EQ(keys.size(), x.cases.size()) << "repeats have distinct keys";
  // Repeat 0 first: the first pass is the plain sweep.
  EXPECT_EQ(x.cases.size(), 2u + 12u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(x.cases[i].repeat, 0);
}

TEST(SweepExpand, BatchSizesSkipMethodsWithoutBatchSupport) {
  const SweepExpansion x = Expand(R"({"methods":["ar",{"name":"sps","knobs":{"gamma":[1,2]}}],
      "batch_sizes":[1,2,4]})");
  ASSERT_EQ(x.cases.size(), 3u);
  for (const CaseConfig& c : x.cases) EXPECT_EQ(c.batch_size, 1);
  ASSERT_EQ(x.notes.size(), 2u);
  EXPECT_EQ(x.notes[0],
            "skipped: method ar at batch > 1 (2 cases): run and sweep decode one request at a "
            "time; batches are specbed serve");
  EXPECT_EQ(x.notes[1],
            "skipped: method sps at batch > 1 (4 cases): run and sweep decode one request at a "
            "time; batches are specbed serve");

  // A method that supports batches gets every batch size, each a distinct case.
  MethodRegistry methods;
  RegisterBuiltinMethods(methods);
  MethodInfo batched;
  batched.name = "batched";
  batched.traits.speculative = true;
  batched.traits.supports_batch = true;
  batched.knobs = {{"width", 2, "test knob", 1, 8, {}}};
  batched.factory = [](MethodContext&, const Json&) -> std::unique_ptr<Decoder> {
    Fail("the test method 'batched' is never built");
  };
  methods.Register(batched);
  const SweepExpansion b = Expand(R"({"methods":["ar","batched"],"batch_sizes":[1,2,4],
      "repeats":2})",
                                  methods);
  std::vector<std::pair<std::string, int64_t>> got;
  for (const CaseConfig& c : b.cases) got.emplace_back(c.method.name, c.batch_size);
  // Even a method that supports batches runs at batch 1 here (batches are `specbed serve`).
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"ar", 1}, {"batched", 1}, {"batched", 1}};
  EXPECT_EQ(got, want);
  ASSERT_EQ(b.notes.size(), 2u);
}

TEST(SweepExpand, ArIsDeduplicated) {
  const SweepExpansion x = Expand(R"({"methods":["ar",{"name":"ar","knobs":{}},"ar",
      {"name":"sps","knobs":{"gamma":2}},{"name":"sps","knobs":{"gamma":[2,3]}}],
      "temperatures":[0,1]})");
  std::map<std::string, int64_t> per_method;
  for (const CaseConfig& c : x.cases) ++per_method[c.method.name];
  EXPECT_EQ(per_method["ar"], 2);
  EXPECT_EQ(per_method["sps"], 4);
  ASSERT_EQ(x.notes.size(), 1u);
  EXPECT_CONTAINS(x.notes[0], "dropped 6 duplicate cases");
}

TEST(SweepExpand, ExcludeAndOnly) {
  const char* base = R"({"methods":["ar",{"name":"sps","knobs":{"gamma":[1,2,3]}},
      {"name":"eagle3","knobs":{"depth":[3,5]}}],"temperatures":[0,1],)";
  auto expand = [&](const std::string& tail) { return Expand((base + tail + "}").c_str()); };
  auto labels = [](const SweepExpansion& x) {
    std::vector<std::string> out;
    for (const CaseConfig& c : x.cases) {
      out.push_back(c.method.name +
                    (c.method.knobs.contains("gamma")   ? c.method.knobs["gamma"].dump()
                     : c.method.knobs.contains("depth") ? "d" + c.method.knobs["depth"].dump()
                                                        : "") +
                    (c.temperature == 0 ? "@0" : "@1"));
    }
    return out;
  };
  // Every given field must match; knobs match as a subset; a list matches any element.
  SweepExpansion x = expand(R"("exclude":[{"method":"sps","knobs":{"gamma":[1,3]},"temperature":1},
      {"method":"eagle3","knobs":{"depth":5}}])");
  EXPECT_EQ(labels(x), (std::vector<std::string>{"ar@0", "sps1@0", "sps2@0", "sps3@0", "eagle3d3@0",
                                                 "ar@1", "sps2@1", "eagle3d3@1"}));
  EXPECT_EQ(x.notes, (std::vector<std::string>{"exclude: dropped 4 cases"}));

  // `only`: a case must match an entry; the AR baseline of a kept case stays.
  x = expand(R"("only":[{"method":"sps","knobs":{"gamma":2},"temperature":1}])");
  EXPECT_EQ(labels(x), (std::vector<std::string>{"ar@1", "sps2@1"}));
  EXPECT_EQ(x.notes, (std::vector<std::string>{"only: dropped 10 cases matching no entry"}));
  // ...unless it is excluded, and an entry matching nothing is reported.
  x = expand(R"("only":[{"method":"eagle3","temperature":0},{"dataset":"mt_bench"}],
      "exclude":[{"method":"ar"}])");
  EXPECT_EQ(labels(x), (std::vector<std::string>{"eagle3d3@0", "eagle3d5@0"}));
  EXPECT_EQ(x.notes, (std::vector<std::string>{
                         "exclude: dropped 2 cases", "only: dropped 8 cases matching no entry",
                         "only[1] {\"dataset\":\"mt_bench\"} matched no case"}));

  // Matchers naming unknown methods or knobs fail instead of matching nothing.
  std::string e = ErrorOf([&] { expand(R"("exclude":[{"method":"eagle"}])"); });
  EXPECT_CONTAINS(e, "sweep.json: exclude[0]");
  EXPECT_CONTAINS(e, "unknown method 'eagle'");
  e = ErrorOf([&] { expand(R"("only":[{"method":"sps","knobs":{"gama":2}}])"); });
  EXPECT_CONTAINS(e, "sweep.json: only[0]");
  EXPECT_CONTAINS(e, "did you mean 'gamma'?");
}

TEST(SweepExpand, PaperIsPassedThroughButNotPartOfTheKey) {
  const char* plain = R"({"methods":["ar",{"name":"sps","knobs":{"gamma":2}}]})";
  const char* with_paper = R"({"methods":["ar",{"name":"sps","knobs":{"gamma":2}}],
      "paper":{"reference":"configs/papers/reference/x.json","table":"Table 2"}})";
  const SweepConfig config = ParseSweepConfig(Json::parse(with_paper), "p.json");
  EXPECT_EQ(config.paper["table"], "Table 2");
  EXPECT_EQ(config.ToJson()["paper"], config.paper);
  const SweepExpansion a = Expand(plain), b = ExpandSweep(config, BuiltinMethods());
  ASSERT_EQ(a.cases.size(), b.cases.size());
  for (size_t i = 0; i < a.cases.size(); ++i) {
    EXPECT_EQ(a.cases[i].Key(), b.cases[i].Key());
    EXPECT_EQ(b.cases[i].paper, config.paper);
    EXPECT_EQ(b.cases[i].ToJson()["paper"]["reference"], "configs/papers/reference/x.json");
  }
}

TEST(ShardCases, EveryMethodCaseInExactlyOneShardWithTheArCasesItNeeds) {
  const SweepExpansion x = Expand(R"({"methods":["ar",{"name":"sps","knobs":{"gamma":"1-8"}},
      {"name":"eagle3","knobs":{"depth":"2-6","top_k":[2,4]}}],"temperatures":[0,0.5,1],
      "seeds":[0,1],"repeats":2})");
  ASSERT_GT(x.cases.size(), 100u);
  size_t n_ar = 0;
  for (const CaseConfig& c : x.cases) n_ar += c.IsArBaseline() ? 1 : 0;
  ASSERT_EQ(n_ar, 6u);  // one per T x seed
  // One shard: the sweep as it is, untagged.
  const std::vector<CaseConfig> whole = ShardCases(x.cases, 0, 1);
  ASSERT_EQ(whole.size(), x.cases.size());
  for (size_t k = 0; k < whole.size(); ++k) EXPECT_EQ(whole[k].Key(), x.cases[k].Key());
  for (int64_t n = 2; n <= 4; ++n) {
    std::map<std::string, int64_t> shard_of;  // method case key -> shard
    size_t total_methods = 0;
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<CaseConfig> shard = ShardCases(x.cases, i, n);
      EXPECT_FALSE(shard.empty()) << i << "/" << n;
      // Same shard on a second call, and the sweep order is kept (AR cases compared untagged).
      const std::vector<CaseConfig> again = ShardCases(x.cases, i, n);
      ASSERT_EQ(again.size(), shard.size());
      size_t pos = 0;
      std::set<std::string> method_workloads, ar_workloads;
      for (size_t k = 0; k < shard.size(); ++k) {
        EXPECT_EQ(again[k].Key(), shard[k].Key());
        CaseConfig untagged = shard[k];
        untagged.shard.clear();
        while (pos < x.cases.size() && x.cases[pos].Key() != untagged.Key()) ++pos;
        EXPECT_LT(pos, x.cases.size()) << "shard order differs from the sweep order";
        if (shard[k].IsArBaseline()) {
          EXPECT_EQ(shard[k].shard, StrCat(i, "/", n));
          EXPECT_NE(shard[k].Key(), untagged.Key()) << "the shard tag is part of the key";
          EXPECT_NE(shard[k].Label().find(" shard=" + shard[k].shard), std::string::npos);
          EXPECT_EQ(WorkloadKey(shard[k]), WorkloadKey(untagged));
          EXPECT_TRUE(ar_workloads.insert(WorkloadKey(shard[k])).second);
        } else {
          EXPECT_TRUE(shard[k].shard.empty());
          EXPECT_TRUE(shard_of.emplace(shard[k].Key(), i).second) << "a case in two shards";
          method_workloads.insert(WorkloadKey(shard[k]));
          ++total_methods;
        }
      }
      // Every method case has its AR case in its own shard, and no AR case runs for nothing.
      EXPECT_EQ(ar_workloads, method_workloads) << i << "/" << n;
    }
    EXPECT_EQ(total_methods, x.cases.size() - n_ar) << n;
    // The assignment of a method case depends on the case alone: the odd cases shard the same way.
    std::vector<CaseConfig> odd;
    for (size_t k = 1; k < x.cases.size(); k += 2) odd.push_back(x.cases[k]);
    for (int64_t i = 0; i < n; ++i) {
      for (const CaseConfig& c : ShardCases(odd, i, n)) {
        if (!c.IsArBaseline()) {
          EXPECT_EQ(shard_of[c.Key()], i);
        }
      }
    }
  }
  // An AR case without method cases (a T only AR runs at) still runs, in exactly one shard.
  const SweepExpansion only_ar = Expand(R"({"methods":["ar"],"temperatures":[0,1]})");
  size_t placed = 0;
  for (int64_t i = 0; i < 3; ++i) placed += ShardCases(only_ar.cases, i, 3).size();
  EXPECT_EQ(placed, only_ar.cases.size());
  EXPECT_CONTAINS(ErrorOf([&] { ShardCases(x.cases, 2, 2); }), "shard index must be in [0, 1]");
  EXPECT_CONTAINS(ErrorOf([&] { ShardCases(x.cases, 0, 0); }), "shard count must be >= 1");
}

}  // namespace
}  // namespace specbed
