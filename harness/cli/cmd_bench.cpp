// `specbed bench`: AR decode speed of a model over context lengths x batch sizes x threads x
// dtypes, with the time per decode step split into model forward vs. everything else (sampling,
// bookkeeping). Rows go to the `bench` table of the results store and are printed as Markdown.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "harness/base/error.h"
#include "harness/base/timer.h"
#include "harness/cli/commands.h"
#include "harness/runner/environment.h"
#include "harness/engine/sampler.h"
#include "models/model_registry.h"
#include "results/store.h"

namespace specbed::cli {
namespace {

struct BenchOptions {
  std::vector<std::string> models = {"stories260K"};
  std::vector<std::string> dtypes = {"float32"};
  std::vector<int> threads = {1};
  std::vector<int64_t> batches = {1};
  std::vector<int64_t> contexts = {0};
  int64_t tokens = 256;
  int64_t reps = 3;
  std::string output = "results/bench.db";
};

struct Timing {
  double total_s = 0, forward_s = 0;
};

// Decodes `n_tokens` greedy steps for `batch` sequences after a random context of `context`
// tokens (at least one). Returns wall time and the part spent in Forward.
Timing DecodeOnce(LlamaModel& model, KvCache& cache, const at::Tensor& context_ids,
                  int64_t n_tokens) {
  const int64_t batch = cache.batch();
  const int64_t vocab = model.config().vocab_size;
  cache.Truncate(0);
  ForwardOutput out = model.Forward(context_ids, cache);
  at::Tensor step = at::empty({batch, 1}, at::kLong);
  int64_t* sp = step.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b)
    sp[b] = Argmax(out.logits.data_ptr<float>() + b * vocab, vocab);
  Timing t;
  int64_t forward_ns = 0;
  const int64_t start = NowNanos();
  for (int64_t i = 0; i < n_tokens; ++i) {
    const int64_t f0 = NowNanos();
    out = model.Forward(step, cache);
    forward_ns += NowNanos() - f0;
    const float* logits = out.logits.data_ptr<float>();
    for (int64_t b = 0; b < batch; ++b) sp[b] = Argmax(logits + b * vocab, vocab);
  }
  t.total_s = (NowNanos() - start) * 1e-9;
  t.forward_s = forward_ns * 1e-9;
  return t;
}

void RunBench(const BenchOptions& o) {
  SPECBED_CHECK(o.tokens >= 1 && o.reps >= 1, "bench needs --tokens >= 1 and --reps >= 1");
  std::vector<BenchRecord> rows;
  std::printf(
      "| model | dtype | threads | batch | context | tokens | tok/s | ± | ms/step | forward ms | "
      "other ms | other %% |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& model_name : o.models) {
    for (const auto& dtype_name : o.dtypes) {
      LoadedTarget target = LoadModel(model_name, ParseDtype(dtype_name));
      LlamaModel& model = *target.model;
      for (int threads : o.threads) {
        at::set_num_threads(threads);
        for (int64_t batch : o.batches) {
          for (int64_t context : o.contexts) {
            SPECBED_CHECK(batch >= 1 && context >= 0, "bench: batch must be >= 1 and context >= 0");
            const int64_t prefill = std::max<int64_t>(1, context);
            const int64_t max_len = prefill + o.tokens + 1;
            SPECBED_CHECK(max_len <= model.config().max_seq_len, "bench: context ", context, " + ",
                          o.tokens, " tokens exceed ", model_name, "'s max_seq_len ",
                          model.config().max_seq_len);
            KvCache cache = model.NewCache(batch, max_len);
            std::mt19937_64 rng(42);
            at::Tensor ids = at::empty({batch, prefill}, at::kLong);
            int64_t* ip = ids.data_ptr<int64_t>();
            for (int64_t i = 0; i < batch * prefill; ++i) {
              ip[i] =
                  static_cast<int64_t>(rng() % static_cast<uint64_t>(model.config().vocab_size));
            }
            if (target.tokenizer && target.tokenizer->bos_id() >= 0) {
              for (int64_t b = 0; b < batch; ++b) ip[b * prefill] = target.tokenizer->bos_id();
            }
            DecodeOnce(model, cache, ids, std::min<int64_t>(o.tokens, 16));  // warmup
            std::vector<double> tps;
            double total = 0, forward = 0;
            for (int64_t r = 0; r < o.reps; ++r) {
              const Timing t = DecodeOnce(model, cache, ids, o.tokens);
              tps.push_back(batch * o.tokens / t.total_s);
              total += t.total_s;
              forward += t.forward_s;
            }
            double mean = 0, var = 0;
            for (double v : tps) mean += v / tps.size();
            for (double v : tps)
              var += (v - mean) * (v - mean) / std::max<size_t>(1, tps.size() - 1);
            BenchRecord row;
            row.model = target.spec.name;
            row.dtype = DtypeName(model.dtype());
            row.threads = threads;
            row.batch_size = batch;
            row.context_len = context;
            row.n_tokens = o.tokens;
            row.reps = o.reps;
            row.tokens_per_s = mean;
            row.tokens_per_s_std = std::sqrt(var);
            const double steps = static_cast<double>(o.tokens * o.reps);
            row.ms_per_step = total / steps * 1e3;
            row.forward_ms_per_step = forward / steps * 1e3;
            row.other_ms_per_step = (total - forward) / steps * 1e3;
            row.n_params = model.config().ParameterCount();
            rows.push_back(row);
            std::printf(
                "| %s | %s | %d | %lld | %lld | %lld | %.1f | %.1f | %.4f | %.4f | %.4f | %.2f |\n",
                row.model.c_str(), row.dtype.c_str(), threads, static_cast<long long>(batch),
                static_cast<long long>(context), static_cast<long long>(o.tokens), row.tokens_per_s,
                row.tokens_per_s_std, row.ms_per_step, row.forward_ms_per_step,
                row.other_ms_per_step, 100.0 * row.other_ms_per_step / row.ms_per_step);
            std::fflush(stdout);
          }
        }
      }
    }
  }
  if (!o.output.empty()) {
    auto store = ResultsStore::Open(o.output);
    RunInfo info = CurrentEnvironment();
    info.repro_command = CommandLine();
    info.config_json = nlohmann::json({{"command", "bench"},
                                       {"models", o.models},
                                       {"dtypes", o.dtypes},
                                       {"threads", o.threads},
                                       {"batches", o.batches},
                                       {"contexts", o.contexts},
                                       {"tokens", o.tokens},
                                       {"reps", o.reps}})
                           .dump();
    const int64_t run_id = store->BeginRun(info);
    store->WriteBench(run_id, rows);
    std::fprintf(stderr, "specbed bench: %zu rows -> %s (run %lld)\n", rows.size(),
                 o.output.c_str(), static_cast<long long>(run_id));
  }
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd =
      app.add_subcommand("bench", "AR decode speed (tokens/s; forward vs. other time) -> SQLite");
  cmd->add_option("-m,--model", o->models, "Models (comma-separated or repeated)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtypes, "Dtypes: float32, bfloat16")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "Thread counts")->delimiter(',')->capture_default_str();
  cmd->add_option("-b,--batch", o->batches, "Batch sizes (>= 1)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-c,--context", o->contexts, "Context lengths already in the KV cache")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-n,--tokens", o->tokens, "Decode steps per measurement")->capture_default_str();
  cmd->add_option("-r,--reps", o->reps, "Repetitions (after one warmup)")->capture_default_str();
  cmd->add_option("-o,--output", o->output, "Results database (\"\" = do not store)")
      ->capture_default_str();
  cmd->callback([o] { RunBench(*o); });
}

}  // namespace specbed::cli
