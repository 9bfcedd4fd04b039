// LTD adaptation probe and summary (see ltd_adaptation_probe.h).
// Checked by: tests/methods/ltd_adaptation_probe_test.cpp.
#include "methods/ltd/ltd_adaptation_probe.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/runner/runner.h"
#include "methods/common/json_fields.h"
#include "methods/ltd/ltd_method.h"
#include "methods/method_registry.h"
#include "models/model_registry.h"

namespace specbed {

double PearsonCorrelation(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = std::min(x.size(), y.size());
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx <= 0 || syy <= 0) return std::numeric_limits<double>::quiet_NaN();
  return sxy / std::sqrt(sxx * syy);
}

namespace {

LtdSpread Spread(const std::vector<double>& v, const std::vector<double>& top,
                 const std::vector<double>& context) {
  LtdSpread s;
  s.n = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  s.distinct = static_cast<int64_t>(std::set<double>(v.begin(), v.end()).size());
  double sum = 0, sq = 0;
  for (double x : v) {
    sum += x;
    sq += x * x;
  }
  s.mean = sum / static_cast<double>(s.n);
  s.sd = std::sqrt(std::max(0.0, sq / static_cast<double>(s.n) - s.mean * s.mean));
  s.min = static_cast<int64_t>(*std::min_element(v.begin(), v.end()));
  s.max = static_cast<int64_t>(*std::max_element(v.begin(), v.end()));
  s.corr_top_score = PearsonCorrelation(v, top);
  s.corr_context = PearsonCorrelation(v, context);
  return s;
}

// A number, or null for NaN (JSON has no NaN).
nlohmann::ordered_json Number(double x) {
  return std::isnan(x) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(x);
}

nlohmann::ordered_json SpreadJson(const LtdSpread& s) {
  nlohmann::ordered_json j;
  SPECBED_JSON_PUT(j, s, n, distinct, mean, sd, min, max);
  j["corr_top_score"] = Number(s.corr_top_score);
  j["corr_context"] = Number(s.corr_context);
  return j;
}

}  // namespace

nlohmann::ordered_json LtdAdaptationSummary::ToJson() const {
  return {{"size_per_step", SpreadJson(size)},
          {"depth_per_step", SpreadJson(depth)},
          {"depth_calls", depth_calls},
          {"continue_rate", continue_rate},
          {"corr_continue_top_score", Number(corr_continue_top_score)},
          {"adapts", adapts()}};
}

LtdAdaptationSummary SummarizeLtdDecisions(const std::vector<LtdDecision>& log) {
  std::vector<double> v, d, step_top, step_context, go, round_top;
  for (const LtdDecision& x : log) {
    if (x.kind == 'V') {
      v.push_back(static_cast<double>(x.value));
      d.push_back(static_cast<double>(x.rounds));
      step_top.push_back(x.top_score);
      step_context.push_back(static_cast<double>(x.context_len));
    } else {
      go.push_back(static_cast<double>(x.value));
      round_top.push_back(x.top_score);
    }
  }
  LtdAdaptationSummary s;
  s.size = Spread(v, step_top, step_context);
  s.depth = Spread(d, step_top, step_context);
  s.depth_calls = static_cast<int64_t>(go.size());
  double continues = 0;
  for (double g : go) continues += g;
  s.continue_rate = go.empty() ? 0.0 : continues / static_cast<double>(go.size());
  s.corr_continue_top_score = PearsonCorrelation(go, round_top);
  return s;
}

LtdProbeResult ProbeLtdDecisions(const LtdProbeConfig& c) {
  SPECBED_CHECK(c.limit >= 1 && c.max_new_tokens >= 1 && c.temperature >= 0 && c.threads >= 1,
                "ltd-adaptation: --limit, -n and --threads must be >= 1 and -T >= 0");
  at::set_num_threads(c.threads);
  LoadedTarget target = LoadModel(c.target, at::kFloat);
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context;
  context.target = &target;
  context.dtype = at::kFloat;
  context.load_model = [](const std::string& name) -> LoadedTarget& {
    Fail("ltd-adaptation: needs no other model (asked for '", name, "')");
  };
  const nlohmann::json knobs = registry.ResolveKnobsFor(
      "ltd", {{"policy", c.policy}, {"policies", c.policies}}, target.spec.name);
  LtdController* controller = nullptr;
  std::unique_ptr<SpeculativeDecoder> decoder = MakeLtdDecoder(context, knobs, &controller);
  LtdProbeResult out;
  controller->set_decision_log(&out.log);
  const std::vector<Prompt> prompts = LoadDataset(c.prompts, {});
  const int64_t n = std::min<int64_t>(c.limit, static_cast<int64_t>(prompts.size()));
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int32_t> ids = BuildPromptIds(target, {{"user", prompts[i].turns[0]}});
    GenerationConfig g;
    g.sampling.temperature = c.temperature;
    g.seed = c.seed + static_cast<uint64_t>(i);
    g.stop = StopConfigFor(target, c.max_new_tokens, {});
    KvCache cache =
        target.model->NewCache(1, CacheLengthFor(*target.model, static_cast<int64_t>(ids.size()),
                                                 c.max_new_tokens, *decoder));
    const size_t first = out.log.size();
    DecodeResult r;
    decoder->Generate(ids, g, cache, r);
    for (size_t k = first; k < out.log.size(); ++k) out.log[k].prompt = i;
    for (const StepStats& s : r.steps) out.step_verified.push_back(s.n_drafted);
    out.steps += static_cast<int64_t>(r.steps.size());
  }
  controller->set_decision_log(nullptr);
  return out;
}

}  // namespace specbed
