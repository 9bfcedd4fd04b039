// BlockPilot vs fixed block sizes vs the per-prompt oracle on a results database (see
// blockpilot_oracle.h).
// Checked by: tests/methods/blockpilot_test.cpp.
#include "methods/blockpilot/blockpilot_oracle.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "base/error.h"
#include "results/store.h"

namespace specbed {
namespace {

using ojson = nlohmann::ordered_json;

struct PromptFigures {
  double tau = 0;
  double decode_ms = 0;
  int64_t tokens = 0;
};
using PromptKey = std::pair<std::string, int32_t>;
using PerPrompt = std::map<PromptKey, PromptFigures>;

PerPrompt Load(const ResultsStore& store, int64_t case_id) {
  PerPrompt out;
  for (const SampleRecord& s : store.LoadSamples(case_id)) {
    PromptFigures f;
    f.tokens = std::max<int64_t>(0, s.n_output_tokens - 1);
    f.tau = s.n_steps > 0 ? static_cast<double>(f.tokens) / s.n_steps : 1.0;
    f.decode_ms = s.decode_ms;
    out[{s.prompt_id, s.turn}] = f;
  }
  return out;
}

ojson Figures(const std::vector<const PerPrompt*>& chosen, const std::vector<PromptKey>& prompts) {
  double tau = 0, ms = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const PromptFigures& f = chosen[i]->at(prompts[i]);
    tau += f.tau;
    ms += f.decode_ms;
    tokens += f.tokens;
  }
  ojson j;
  j["mean_tau"] = prompts.empty() ? 0.0 : tau / static_cast<double>(prompts.size());
  j["tokens_per_s"] = ms > 0 ? tokens / ms * 1000.0 : 0.0;
  return j;
}

}  // namespace

nlohmann::ordered_json BlockPilotOracleFigures(const std::string& db_path,
                                               const std::vector<int64_t>& block_sizes) {
  StoreOptions options;
  options.read_only = true;
  const auto store = ResultsStore::Open(db_path, options);
  using Workload = std::tuple<std::string, std::string, double, uint64_t, int64_t, std::string,
                              std::string>;  // target, dataset, T, seed, max_new, dtype, drafter
  std::map<Workload, std::map<int64_t, int64_t>> fixed;              // -> block size -> case id
  std::map<Workload, std::vector<std::pair<int64_t, ojson>>> pilot;  // -> (case id, knobs)
  for (const ResultsStore::CaseRow& row : store->ListCases()) {
    const CaseRecord& c = row.record;
    if (c.method != "dflash" && c.method != "dflash+blockpilot") continue;
    const ojson knobs = ojson::parse(c.method_knobs_json, nullptr, false);
    if (!knobs.is_object() || !knobs.contains("drafter")) continue;
    const Workload w{c.target,
                     c.dataset,
                     c.temperature,
                     c.seed,
                     c.max_new_tokens,
                     c.dtype,
                     knobs["drafter"].get<std::string>()};
    if (c.method == "dflash") {
      const int64_t b = knobs.value("block_size", int64_t{0});
      const bool wanted = block_sizes.empty() ||
                          std::find(block_sizes.begin(), block_sizes.end(), b) != block_sizes.end();
      if (b > 0 && wanted) fixed[w][b] = row.case_id;
    } else {
      pilot[w].emplace_back(row.case_id, knobs);
    }
  }
  ojson out = ojson::array();
  for (const auto& [w, by_size] : fixed) {
    std::map<int64_t, PerPrompt> per;
    for (const auto& [b, id] : by_size) per[b] = Load(*store, id);
    std::vector<std::pair<ojson, PerPrompt>> pilots;
    for (const auto& [id, knobs] : pilot[w]) pilots.emplace_back(knobs, Load(*store, id));
    // Prompts every case answered.
    std::vector<PromptKey> prompts;
    for (const auto& [key, f] : per.begin()->second) {
      bool everywhere = true;
      for (const auto& [b, p] : per) everywhere = everywhere && p.count(key) > 0;
      for (const auto& [k, p] : pilots) everywhere = everywhere && p.count(key) > 0;
      if (everywhere) prompts.push_back(key);
    }
    ojson e;
    e["target"] = std::get<0>(w);
    e["dataset"] = std::get<1>(w);
    e["temperature"] = std::get<2>(w);
    e["seed"] = std::get<3>(w);
    e["max_new_tokens"] = std::get<4>(w);
    e["dtype"] = std::get<5>(w);
    e["drafter"] = std::get<6>(w);
    e["prompts"] = prompts.size();
    ojson fixed_rows = ojson::array();
    ojson best_tau, best_tps;
    for (const auto& [b, p] : per) {
      ojson f = Figures(std::vector<const PerPrompt*>(prompts.size(), &p), prompts);
      ojson row;
      row["block_size"] = b;
      row["mean_tau"] = f["mean_tau"];
      row["tokens_per_s"] = f["tokens_per_s"];
      // Ties keep the smaller block size (map order).
      if (best_tau.is_null() ||
          row["mean_tau"].get<double>() > best_tau["mean_tau"].get<double>()) {
        best_tau = row;
      }
      if (best_tps.is_null() ||
          row["tokens_per_s"].get<double>() > best_tps["tokens_per_s"].get<double>()) {
        best_tps = row;
      }
      fixed_rows.push_back(row);
    }
    e["fixed"] = fixed_rows;
    e["best_fixed_tau"] = best_tau;
    e["best_fixed_throughput"] = best_tps;
    std::vector<const PerPrompt*> by_tau, by_time;
    for (const PromptKey& key : prompts) {
      const PerPrompt* t = nullptr;
      const PerPrompt* s = nullptr;
      for (const auto& [b, p] : per) {
        if (t == nullptr || p.at(key).tau > t->at(key).tau) t = &p;
        if (s == nullptr || p.at(key).decode_ms < s->at(key).decode_ms) s = &p;
      }
      by_tau.push_back(t);
      by_time.push_back(s);
    }
    e["oracle_tau"] = Figures(by_tau, prompts);
    e["oracle_throughput"] = Figures(by_time, prompts);
    ojson bp = ojson::array();
    for (const auto& [knobs, p] : pilots) {
      ojson f = Figures(std::vector<const PerPrompt*>(prompts.size(), &p), prompts);
      f["knobs"] = knobs;
      bp.push_back(f);
    }
    e["blockpilot"] = bp;
    out.push_back(e);
  }
  return out;
}

}  // namespace specbed
