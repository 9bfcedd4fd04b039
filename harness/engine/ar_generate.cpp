// AR generation loop (see ar_generate.h).
#include "harness/engine/ar_generate.h"

#include <ATen/ATen.h>

#include "base/error.h"
#include "base/timer.h"
#include "harness/engine/device_sampling.h"
#include "harness/engine/method.h"
#include "models/device.h"

namespace specbed {

float TopTwoMargin(const float* logits, int64_t vocab) {
  if (vocab < 2) return 0.f;
  float a = logits[0], b = logits[1];
  if (b > a) std::swap(a, b);
  for (int64_t i = 2; i < vocab; ++i) {
    const float v = logits[i];
    if (v > a) {
      b = a;
      a = v;
    } else if (v > b) {
      b = v;
    }
  }
  return a - b;
}

int32_t SampleNext(Sampler& sampler, const at::Tensor& logits, DeviceVerifier* on_device) {
  if (on_device != nullptr) return on_device->SampleToken(logits, sampler);
  return sampler.Sample(logits.data_ptr<float>(), logits.size(-1));
}

GenerationResult GenerateAr(LlamaModel& model, const Tokenizer* tokenizer,
                            const std::vector<int32_t>& prompt, const GenerationConfig& config,
                            KvCache& cache) {
  SPECBED_CHECK(!prompt.empty(), "AR generation needs a non-empty prompt (add BOS)");
  SPECBED_CHECK(cache.batch() == 1, "AR generation uses a batch-1 cache");
  SPECBED_CHECK(static_cast<int64_t>(prompt.size()) < cache.max_len(), "prompt of ", prompt.size(),
                " tokens does not fit the context (", cache.max_len(), " positions)");
  const int64_t vocab = model.config().vocab_size;
  Sampler sampler(config.sampling, config.seed);
  StopChecker stop(config.stop, tokenizer, prompt.back());
  GenerationResult result;
  DeviceVerifier device_verifier;
  DeviceVerifier* on_device =
      model.forward_path() == ForwardPath::kAten ? &device_verifier : nullptr;
  cache.Truncate(0);

  const int64_t t_start = DeviceNowNanos(model.device());
  at::Tensor prompt_ids = at::empty({1, static_cast<int64_t>(prompt.size())}, at::kLong);
  int64_t* pp = prompt_ids.data_ptr<int64_t>();
  for (size_t i = 0; i < prompt.size(); ++i) pp[i] = prompt[i];
  ForwardOutput out = model.Forward(prompt_ids, cache);
  int32_t token = SampleNext(sampler, out.logits, on_device);
  const int64_t t_prefill_end = DeviceNowNanos(model.device());
  // The top-2 margins are a measurement aid, not decoding: their O(V) scans are timed apart and
  // left out of decode_ms, so an AR case that records them is timed like one that does not.
  int64_t margin_ns = 0;
  auto record_margin = [&] {
    const int64_t m0 = NowNanos();  // host scan: no device work
    result.token_margins.push_back(TopTwoMargin(CopyToHost(out.logits).data_ptr<float>(), vocab));
    margin_ns += NowNanos() - m0;
  };
  if (config.record_margins) record_margin();
  stop.Push(token);

  at::Tensor step_ids = at::empty({1, 1}, at::kLong);
  int64_t* step_ptr = step_ids.data_ptr<int64_t>();
  int64_t forward_ns = 0;
  while (!stop.stopped()) {
    if (cache.length() >= cache.max_len()) {
      stop.StopForContext();
      break;
    }
    step_ptr[0] = token;
    const int64_t f0 = DeviceNowNanos(model.device());
    out = model.Forward(step_ids, cache);
    forward_ns += DeviceNowNanos(model.device()) - f0;
    token = SampleNext(sampler, out.logits, on_device);
    ++result.n_steps;
    if (config.record_margins) record_margin();
    stop.Push(token);
  }
  const int64_t t_end = DeviceNowNanos(model.device());
  result.tokens = stop.tokens();
  if (result.token_margins.size() > result.tokens.size())  // the EOS token is not emitted
    result.token_margins.resize(result.tokens.size());
  result.text = stop.text();
  result.stop_reason = stop.reason();
  result.prefill_ms = (t_prefill_end - t_start) * 1e-6;
  result.decode_ms = (t_end - t_prefill_end - margin_ns) * 1e-6;
  result.forward_ms = forward_ns * 1e-6;
  return result;
}

void ArDecoder::Generate(const std::vector<int32_t>& prompt, const GenerationConfig& config,
                         KvCache& cache, DecodeResult& result) {
  result.steps.clear();
  result.generation = GenerateAr(model_, tokenizer_, prompt, config, cache);
}

void ArDecoder::Start(const std::vector<int32_t>& prompt, const GenerationConfig& config,
                      KvCache& cache) {
  SPECBED_CHECK(!prompt.empty(), "AR generation needs a non-empty prompt (add BOS)");
  SPECBED_CHECK(cache.batch() == 1, "AR generation uses a batch-1 cache");
  SPECBED_CHECK(static_cast<int64_t>(prompt.size()) < cache.max_len(), "prompt of ", prompt.size(),
                " tokens does not fit the context (", cache.max_len(), " positions)");
  sampler_.emplace(config.sampling, config.seed);
  stop_.emplace(config.stop, tokenizer_, prompt.back());
  cache_ = &cache;
  cache.Truncate(0);
  n_steps_ = 0;
  if (!row_.defined()) row_ = at::empty({1, 1}, at::kLong);
  at::Tensor prompt_ids = at::empty({1, static_cast<int64_t>(prompt.size())}, at::kLong);
  std::copy(prompt.begin(), prompt.end(), prompt_ids.data_ptr<int64_t>());
  const ForwardOutput out = model_.Forward(prompt_ids, cache);
  token_ = SampleNext(*sampler_, CopyToHost(out.logits), nullptr);
  stop_->Push(token_);
}

bool ArDecoder::PlanDraft(int64_t /*max_nodes*/, DraftJob& job) {
  job = DraftJob();  // nothing to draft
  if (cache_->length() >= cache_->max_len()) {
    stop_->StopForContext();
    return false;
  }
  return true;
}

SeqChunk ArDecoder::PlanVerify() {
  row_.data_ptr<int64_t>()[0] = token_;
  SeqChunk chunk;
  chunk.cache = cache_;
  chunk.tokens = row_;
  return chunk;
}

StepStats ArDecoder::Conclude(const at::Tensor& logits, const std::vector<at::Tensor>& /*hidden*/) {
  const int64_t t0 = NowNanos();
  const at::Tensor host = CopyToHost(logits);
  const size_t before = stop_->tokens().size();
  token_ = sampler_->Sample(host.data_ptr<float>(), host.size(-1));
  stop_->Push(token_);
  ++n_steps_;
  StepStats stats;
  stats.n_emitted = static_cast<int64_t>(stop_->tokens().size() - before);
  stats.n_target_forwards = 1;
  stats.t_verify_us = (NowNanos() - t0) * 1e-3;
  return stats;
}

double ArDecoder::Finish(DecodeResult& result) {
  result.steps.clear();
  GenerationResult& gen = result.generation;
  gen = GenerationResult();
  gen.tokens = stop_->tokens();
  gen.text = stop_->text();
  gen.stop_reason = stop_->reason();
  gen.n_steps = n_steps_;
  return 0;
}

}  // namespace specbed
