// `specbed bench`: AR decode speed of a model over context lengths x batch sizes x threads x
// dtypes, with the time per decode step split into model forward vs. everything else (sampling,
// bookkeeping), and AR's fraction of the memory roofline (weight bytes per step / the STREAM triad
// bandwidth measured at the same thread count, or on a GPU its device copy bandwidth, over the
// forward time). Optionally the
// verify-width curve (--verify-widths: forward time of n new tokens after the context, median of
// reps, and its ratio to n = 1). Each row is written to the results store (tables bench,
// bench_verify, bench_bandwidth) as soon as it is measured and printed as Markdown, so an
// interrupted bench keeps its rows. Every combination (context + tokens and verify widths within
// each model's max_seq_len, batch >= 1, context >= 0, known dtypes) is validated before the first
// measurement. A progress display (one unit per measured row) goes to stderr unless -q.
// --lookup-contexts measures the lookup drafters' step cost instead (bench_lookup.h); --count-ops
// counts the ATen ops of a decode and a verify step (bench_ops.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <utility>

#include "base/error.h"
#include "base/names.h"
#include "base/progress.h"
#include "base/timer.h"
#include "harness/cli/bench_lookup.h"
#include "harness/cli/bench_ops.h"
#include "harness/cli/bench_output.h"
#include "harness/cli/cli_flags.h"
#include "harness/cli/commands.h"
#include "harness/engine/machine_bench.h"
#include "harness/engine/sampler.h"
#include "harness/runner/environment.h"
#include "models/device.h"
#include "models/gemv.h"
#include "models/model_registry.h"
#include "models/weight_arena.h"
#include "results/store.h"

namespace specbed::cli {
namespace {

std::string Fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

struct BenchOptions {
  std::vector<std::string> models = {"stories260K"};
  std::vector<std::string> dtypes = {"float32"};
  std::vector<int> threads = {1};
  std::vector<int64_t> batches = {1};
  std::vector<int64_t> contexts = {0};
  int64_t tokens = 256;
  int64_t reps = 3;
  std::string output = "results/bench.db";
  std::vector<int64_t> verify_widths;                         // empty = no verify-width curve
  int64_t bandwidth_mib = kDefaultBandwidthArrayBytes >> 20;  // per array; 0 = skip
  int64_t gemv_max_rows = -1;            // -1 = models/gemv.h defaults; 0 = ATen/BLAS only
  std::vector<std::string> gemv_isas;    // A/B caps (models/gemv.h); empty = SPECBED_GEMV_ISA/auto
  std::vector<std::string> huge_pages;   // on | off (models/weight_arena.h); empty = environment
  std::vector<std::string> graphs;       // on | off (SPECBED_GRAPHS); empty = environment
  bool quiet = false;                    // no progress display on stderr
  std::string device = "cpu";            // cpu | cuda | cuda:N
  std::string forward = "auto";          // auto | rows | aten (models/llama_model.h ForwardPath)
  std::vector<int64_t> lookup_contexts;  // non-empty: the lookup drafters' cost instead
  bool count_ops = false;                // the ATen ops per step instead (bench_ops.h)
  int64_t lookup_steps = 256;
  std::vector<int64_t> prompt_tokens = {64};  // pp rows (prompt processing); 0 = none
  std::string format = "md";                  // md | csv | json (bench_output.h)
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
  const at::Device device = model.device();
  cache.Truncate(0);
  ForwardOutput out = model.Forward(context_ids, cache);
  at::Tensor step = at::empty({batch, 1}, at::kLong);
  int64_t* sp = step.data_ptr<int64_t>();
  // The next ids: on the CPU an argmax over the host rows; on a device the argmax stays there
  // (the ids feed the next forward without a host round trip).
  auto next_ids = [&] {
    if (!device.is_cpu()) {
      step = out.logits.view({batch, vocab}).argmax(-1).view({batch, 1});
      return;
    }
    const float* logits = out.logits.data_ptr<float>();
    for (int64_t b = 0; b < batch; ++b) sp[b] = Argmax(logits + b * vocab, vocab);
  };
  next_ids();
  Timing t;
  int64_t forward_ns = 0;
  const int64_t start = DeviceNowNanos(device);
  for (int64_t i = 0; i < n_tokens; ++i) {
    const int64_t f0 = DeviceNowNanos(device);
    out = model.Forward(step, cache);
    forward_ns += DeviceNowNanos(device) - f0;
    next_ids();
  }
  t.total_s = (DeviceNowNanos(device) - start) * 1e-9;
  t.forward_s = forward_ns * 1e-9;
  return t;
}

// The cost of one phase-boundary synchronization on `device` with nothing queued (what every
// DeviceNowNanos adds to a step; 0 on the CPU), printed once per bench.
void PrintSyncCost(const at::Device& device, FILE* out) {
  constexpr int kCalls = 1000;
  SynchronizeDevice(device);
  const int64_t t0 = NowNanos();
  for (int i = 0; i < kCalls; ++i) DeviceNowNanos(device);
  const double us = (NowNanos() - t0) * 1e-3 / kCalls;
  std::fprintf(out, "phase-boundary sync on %s: %.2f us per call (idle device)\n",
               DeviceName(device).c_str(), us);
}

// Every combination is checked before anything is measured: a context that cannot fit a model
// fails now, naming every such combination, instead of after the first rows.
void ValidateBench(const BenchOptions& o) {
  SPECBED_CHECK(o.tokens >= 1 && o.reps >= 1,
                "bench needs -n/--max-new-tokens >= 1 and -r/--reps >= 1");
  for (int64_t w : o.verify_widths) {
    SPECBED_CHECK(w >= 1, "bench: --verify-widths must all be >= 1 (new tokens per forward), got ",
                  w);
  }
  for (int t : o.threads) SPECBED_CHECK(t >= 1, "bench: --threads must be >= 1, got ", t);
  SPECBED_CHECK(o.bandwidth_mib >= 0, "bench: --bandwidth-mib must be >= 0 (0 = skip), got ",
                o.bandwidth_mib);
  for (const auto& isa : o.gemv_isas) ValidateGemvIsa(isa, "bench --gemv-isa");
  SPECBED_CHECK(o.graphs.empty() || o.forward == "aten" || ParseDevice(o.device, "bench").is_cuda(),
                "bench --graphs: captured steps run on the ATen forward path: add --forward aten "
                "on the CPU (the row kernels capture nothing)");
  std::vector<std::string> bad;
  for (const auto& d : o.dtypes) ParseDtype(d);  // an unknown dtype fails naming it
  for (int64_t b : o.batches) {
    if (b < 1) bad.push_back(StrCat("batch ", b, " (must be >= 1)"));
  }
  for (int64_t c : o.contexts) {
    if (c < 0) bad.push_back(StrCat("context ", c, " (must be >= 0)"));
  }
  int64_t max_width = 1;
  for (int64_t w : o.verify_widths) max_width = std::max(max_width, w);
  for (const auto& model_name : o.models) {
    WarnLargeTargetOnCpu("bench", model_name, o.device);
    const LoadedTarget probe =
        LoadModel(model_name, ParseDtype(o.dtypes.front()), "", ParseDevice(o.device, "bench"));
    const int64_t max_seq = probe.model->config().max_seq_len;
    for (int64_t p : o.prompt_tokens) {
      if (p < 0 || p + 1 > max_seq) {
        bad.push_back(StrCat(model_name, " --prompt-tokens ", p,
                             " (must be >= 0 and + 1 <= ", "max_seq_len ", max_seq, ")"));
      }
    }
    for (int64_t context : o.contexts) {
      const int64_t prefill = std::max<int64_t>(1, context);
      if (prefill + o.tokens + 1 > max_seq) {
        bad.push_back(StrCat(model_name, " context ", context, ": ", prefill, " + ", o.tokens,
                             " tokens + 1 > max_seq_len ", max_seq));
      }
      if (!o.verify_widths.empty() && prefill + max_width > max_seq) {
        bad.push_back(StrCat(model_name, " context ", context, ": ", prefill, " + verify width ",
                             max_width, " > max_seq_len ", max_seq));
      }
    }
  }
  SPECBED_CHECK(bad.empty(), "bench: ", bad.size(),
                " combination(s) cannot run (nothing was measured): ", Join(bad, "; "));
}

// The results store the rows go to as soon as each is measured (an interrupted bench keeps what
// it did), with the run that holds them; null when --output is empty.
std::unique_ptr<ResultsStore> OpenBenchStore(const BenchOptions& o, int64_t& run_id) {
  run_id = -1;
  if (o.output.empty()) return nullptr;
  std::unique_ptr<ResultsStore> store = ResultsStore::Open(o.output);
  RunInfo info = CurrentEnvironment();
  info.repro_command = CommandLine();
  info.config_json = nlohmann::json({{"command", "bench"},
                                     {"models", o.models},
                                     {"dtypes", o.dtypes},
                                     {"threads", o.threads},
                                     {"batches", o.batches},
                                     {"contexts", o.contexts},
                                     {"tokens", o.tokens},
                                     {"reps", o.reps},
                                     {"verify_widths", o.verify_widths},
                                     {"bandwidth_mib", o.bandwidth_mib},
                                     {"gemv_max_rows", o.gemv_max_rows},
                                     {"blas_core", BlasCoreDescription()},
                                     {"gemv_isa", GemvIsaName()}})
                         .dump();
  run_id = store->BeginRun(info);
  return store;
}

// The roofline bandwidth per bench thread count: on an accelerator its copy bandwidth (two buffers
// of --bandwidth-mib); on the CPU the STREAM triad at 1 thread and at every bench thread count
// (rows of bench_bandwidth). Empty when --bandwidth-mib is 0.
std::map<int, double> MeasureBandwidths(const BenchOptions& o, const at::Device& device,
                                        ResultsStore* store, int64_t run_id, FILE* out) {
  std::map<int, double> by_threads;
  if (o.bandwidth_mib <= 0) return by_threads;
  if (!device.is_cpu()) {
    const double gb_s = MeasureDeviceCopyBandwidth(device, o.bandwidth_mib << 20);
    std::fprintf(out, "\n| memory bandwidth | device | buffer MiB | copy GB/s (read + write) |\n");
    std::fprintf(out, "|---|---|---:|---:|\n| device copy (best of 10) | %s | %lld | %.1f |\n",
                 DeviceName(device).c_str(), static_cast<long long>(o.bandwidth_mib), gb_s);
    for (int t : o.threads) by_threads[t] = gb_s;
    return by_threads;
  }
  std::vector<int> counts = {1};
  for (int t : o.threads)
    if (std::find(counts.begin(), counts.end(), t) == counts.end()) counts.push_back(t);
  std::fprintf(out, "\nSTREAM arrays in %s (as the CPU row kernels' weights: SPECBED_HUGE_PAGES)\n",
               WeightHugePagesEnabled() ? "2 MiB pages" : "default (4 KiB) pages");
  std::fprintf(out, "| memory bandwidth | threads | array MiB | copy GB/s | triad GB/s |\n");
  std::fprintf(out, "|---|---:|---:|---:|---:|\n");
  for (int t : counts) {
    const MemoryBandwidth bw = MeasureMemoryBandwidth(t, o.bandwidth_mib << 20);
    by_threads[t] = bw.triad_gb_s;
    std::fprintf(out, "| STREAM (best of %d) | %d | %lld | %.2f | %.2f |\n", bw.reps, t,
                 static_cast<long long>(o.bandwidth_mib), bw.copy_gb_s, bw.triad_gb_s);
    std::fflush(out);
    if (store) {
      // threads, array_bytes, reps, copy_gb_s, triad_gb_s.
      const BenchBandwidthRecord rec{t, bw.array_bytes, bw.reps, bw.copy_gb_s, bw.triad_gb_s};
      store->WriteBenchBandwidth(run_id, {rec});
    }
  }
  return by_threads;
}

// Seeded random context ids [batch, prefill] for `model`, each sequence starting with BOS when
// the tokenizer has one.
at::Tensor RandomContext(const LoadedTarget& target, int64_t batch, int64_t prefill) {
  std::mt19937_64 rng(42);
  at::Tensor ids = at::empty({batch, prefill}, at::kLong);
  int64_t* ip = ids.data_ptr<int64_t>();
  const auto vocab = static_cast<uint64_t>(target.model->config().vocab_size);
  for (int64_t i = 0; i < batch * prefill; ++i) ip[i] = static_cast<int64_t>(rng() % vocab);
  if (target.tokenizer && target.tokenizer->bos_id() >= 0) {
    for (int64_t b = 0; b < batch; ++b) ip[b * prefill] = target.tokenizer->bos_id();
  }
  return ids;
}

// The fields every row of `target` shares (name with its forward path, dtype, threads, batch,
// sizes, the CPU kernels in use).
BenchRecord RowFor(const BenchOptions& o, LoadedTarget& target, int threads, int64_t batch) {
  LlamaModel& model = *target.model;
  BenchRecord row;
  // A forward path other than the device's default is part of the row's name.
  row.model = target.spec.name;
  if (model.device().is_cpu() && model.forward_path() == ForwardPath::kAten) row.model += " [aten]";
  if (model.graph_mode() == GraphMode::kOn) row.model += " [graphs]";  // SPECBED_GRAPHS=on
  row.dtype = DtypeName(model.dtype());
  row.threads = threads;
  row.batch_size = batch;
  row.reps = o.reps;
  row.n_params = model.config().ParameterCount();
  row.weight_bytes = DecodeWeightBytes(model);
  row.blas_core = BlasCoreName();
  if (model.device().is_cpu() && model.forward_path() == ForwardPath::kRowKernels) {
    row.gemv_kernel = GemvKernelName(model.dtype());
  }
  if (model.weight_arena().bytes > 0) row.huge_page_bytes = model.weight_arena().huge_page_bytes;
  return row;
}

// Mean and sample standard deviation.
std::pair<double, double> MeanStd(const std::vector<double>& v) {
  double mean = 0, var = 0;
  for (double x : v) mean += x / v.size();
  for (double x : v) var += (x - mean) * (x - mean) / std::max<size_t>(1, v.size() - 1);
  return {mean, std::sqrt(var)};
}

// A prompt-processing row (llama-bench's ppN): after a warmup, --reps forwards of `n_prompt`
// random tokens per sequence into an emptied cache; tok/s = batch x n_prompt / forward time.
BenchRecord MeasurePromptRow(const BenchOptions& o, LoadedTarget& target, int threads,
                             int64_t batch, int64_t n_prompt) {
  LlamaModel& model = *target.model;
  KvCache cache = model.NewCache(batch, n_prompt + 1);
  const at::Tensor ids = RandomContext(target, batch, n_prompt);
  const at::Device device = model.device();
  std::vector<double> tps;
  double total_s = 0;
  for (int64_t r = -1; r < o.reps; ++r) {  // r = -1: the warmup
    cache.Truncate(0);
    const int64_t start = DeviceNowNanos(device);
    model.Forward(ids, cache);
    const double s = (DeviceNowNanos(device) - start) * 1e-9;
    if (r < 0) continue;
    tps.push_back(batch * n_prompt / s);
    total_s += s;
  }
  BenchRecord row = RowFor(o, target, threads, batch);
  row.test = "pp";
  row.n_tokens = n_prompt;
  std::tie(row.tokens_per_s, row.tokens_per_s_std) = MeanStd(tps);
  row.ms_per_step = row.forward_ms_per_step = total_s / o.reps * 1e3;
  row.other_ms_per_step = 0;
  return row;
}

// A decode row (llama-bench's tgN): a warmup, then --reps decodes of --max-new-tokens after
// `context`.
BenchRecord MeasureRow(const BenchOptions& o, LoadedTarget& target, int threads, int64_t batch,
                       int64_t context, const std::map<int, double>& bandwidths) {
  LlamaModel& model = *target.model;
  SPECBED_CHECK(batch >= 1 && context >= 0, "bench: batch must be >= 1 and context >= 0");
  const int64_t prefill = std::max<int64_t>(1, context);
  const int64_t max_len = prefill + o.tokens + 1;
  SPECBED_CHECK(max_len <= model.config().max_seq_len, "bench: context ", context, " + ", o.tokens,
                " tokens exceed ", target.spec.name, "'s max_seq_len ", model.config().max_seq_len);
  KvCache cache = model.NewCache(batch, max_len);
  const at::Tensor ids = RandomContext(target, batch, prefill);
  DecodeOnce(model, cache, ids, std::min<int64_t>(o.tokens, 16));  // warmup (and graph capture)
  const int64_t captures_before = model.graph_stats().captures;
  std::vector<double> tps;
  double total = 0, forward = 0;
  for (int64_t r = 0; r < o.reps; ++r) {
    const Timing t = DecodeOnce(model, cache, ids, o.tokens);
    tps.push_back(batch * o.tokens / t.total_s);
    total += t.total_s;
    forward += t.forward_s;
  }
  BenchRecord row = RowFor(o, target, threads, batch);
  if (model.graph_stats().captures != captures_before) {  // a capture inside the timed reps
    std::fprintf(stderr, "bench: WARNING: %lld CUDA graph capture(s) inside the timed reps of %s\n",
                 static_cast<long long>(model.graph_stats().captures - captures_before),
                 row.model.c_str());
  }
  row.test = "tg";
  row.context_len = context;
  row.n_tokens = o.tokens;
  std::tie(row.tokens_per_s, row.tokens_per_s_std) = MeanStd(tps);
  const double steps = static_cast<double>(o.tokens * o.reps);
  row.ms_per_step = total / steps * 1e3;
  row.forward_ms_per_step = forward / steps * 1e3;
  row.other_ms_per_step = (total - forward) / steps * 1e3;
  const auto bw = bandwidths.find(threads);
  if (bw != bandwidths.end()) {
    row.bandwidth_gb_s = bw->second;
    row.roofline_fraction =
        RooflineFraction(row.weight_bytes, row.bandwidth_gb_s, row.forward_ms_per_step);
  }
  return row;
}

// The verify-width curve after `row`'s context (batch 1 rows only).
std::vector<BenchVerifyRecord> MeasureVerifyRows(const BenchOptions& o, LlamaModel& model,
                                                 const BenchRecord& row) {
  // Each point of the curve sets n_query, forward_ms and ratio_to_one.
  BenchVerifyRecord v{/*model=*/row.model,
                      /*dtype=*/row.dtype,
                      /*threads=*/row.threads,
                      /*batch_size=*/1,
                      /*context_len=*/row.context_len,
                      /*n_query=*/1,
                      /*reps=*/o.reps,
                      /*forward_ms=*/0,
                      /*ratio_to_one=*/0,
                      /*gemv_max_rows=*/GemvMaxRows(model.dtype()),
                      /*blas_core=*/row.blas_core,
                      /*gemv_kernel=*/row.gemv_kernel};
  std::vector<BenchVerifyRecord> recs;
  for (const VerifyWidthPoint& p :
       MeasureVerifyWidthCurve(model, row.context_len, o.verify_widths, o.reps)) {
    v.n_query = p.n_query;
    v.forward_ms = p.forward_ms;
    v.ratio_to_one = p.ratio_to_one;
    recs.push_back(v);
  }
  return recs;
}

// A list option's settings, or one empty setting ("leave the process default") when not given.
std::vector<std::string> Settings(const std::vector<std::string>& given) {
  return given.empty() ? std::vector<std::string>{""} : given;
}

// Where measured rows go: the store (as soon as each is measured), the printer and the progress
// display.
struct BenchSink {
  ResultsStore* store = nullptr;
  int64_t run_id = -1, n_stored = 0;
  ProgressBar* progress = nullptr;
  BenchPrinter* printer = nullptr;
  int64_t n_verify = 0;

  void Add(const BenchRecord& row) {
    printer->Row(row);
    if (store) {
      store->WriteBench(run_id, {row});
      ++n_stored;
    }
    if (progress) {
      progress->Advance(1, StrCat(row.model, " ", row.dtype, " t=", row.threads, " b=",
                                  row.batch_size, " ", BenchTestName(row), " ctx=", row.context_len,
                                  ": ", Fixed1(row.tokens_per_s), " tok/s"));
    }
  }
};

// Every threads x batch row of one loaded target: its prompt-processing rows, then its decode rows
// per context (with their verify-width curves).
void MeasureTarget(const BenchOptions& o, LoadedTarget& target,
                   const std::map<int, double>& bandwidths, BenchSink& sink) {
  for (int threads : o.threads) {
    at::set_num_threads(threads);
    for (int64_t batch : o.batches) {
      for (int64_t n_prompt : o.prompt_tokens) {
        if (n_prompt > 0) sink.Add(MeasurePromptRow(o, target, threads, batch, n_prompt));
      }
      for (int64_t context : o.contexts) {
        const BenchRecord row = MeasureRow(o, target, threads, batch, context, bandwidths);
        sink.Add(row);
        if (o.verify_widths.empty() || batch != 1) continue;
        const std::vector<BenchVerifyRecord> recs = MeasureVerifyRows(o, *target.model, row);
        if (sink.store) sink.store->WriteBenchVerify(sink.run_id, recs);
        sink.printer->VerifyRows(recs);
        sink.n_verify += static_cast<int64_t>(recs.size());
      }
    }
  }
}

void PrintKernelLine(FILE* out) {
  std::fprintf(out, "BLAS: %s\n", BlasCoreDescription().c_str());
  std::fprintf(
      out,
      "GEMV: %s (CPU supports %s); used for <= %lld rows (fp32) / <= %lld (bf16) / <= %lld "
      "(fp16)\n",
      GemvIsaName().c_str(), Join(SupportedGemvIsas(), ", ").c_str(),
      static_cast<long long>(GemvMaxRows(at::kFloat)),
      static_cast<long long>(GemvMaxRows(at::kBFloat16)),
      static_cast<long long>(GemvMaxRows(at::kHalf)));
}

// Rows the bench will measure (one progress unit each).
int64_t CountRows(const BenchOptions& o) {
  int64_t per_batch = static_cast<int64_t>(o.contexts.size());
  for (int64_t p : o.prompt_tokens) per_batch += p > 0;
  return static_cast<int64_t>(o.models.size() * o.dtypes.size() * Settings(o.huge_pages).size() *
                              Settings(o.graphs).size() * Settings(o.gemv_isas).size() *
                              o.threads.size() * o.batches.size()) *
         per_batch;
}

// Every model x dtype x huge-pages x graphs x GEMV-cap setting. The weights are packed (or not)
// and the captured steps set up when a model loads, so --huge-pages and --graphs reload it;
// --gemv-isa only switches kernels.
void MeasureAll(const BenchOptions& o, const at::Device& device,
                const std::map<int, double>& bandwidths, BenchSink& sink) {
  for (const auto& model_name : o.models) {
    for (const auto& dtype_name : o.dtypes) {
      for (const std::string& pages : Settings(o.huge_pages)) {
        if (!pages.empty()) SetWeightHugePages(pages == "on");
        for (const std::string& graphs : Settings(o.graphs)) {
          if (!graphs.empty()) setenv("SPECBED_GRAPHS", graphs.c_str(), 1);  // read at load
          LoadedTarget target = LoadModel(model_name, ParseDtype(dtype_name), "", device);
          for (const std::string& isa : Settings(o.gemv_isas)) {
            if (!isa.empty()) SetGemvIsa(isa, "bench --gemv-isa");
            MeasureTarget(o, target, bandwidths, sink);
          }
        }
      }
    }
  }
}

void RunBench(const BenchOptions& o) {
  if (!o.lookup_contexts.empty()) {
    RunLookupBench(o.models.front(), o.lookup_contexts, o.lookup_steps);
    return;
  }
  if (o.count_ops) {
    OpCountOptions ops{o.models, o.dtypes, o.device, {}, o.verify_widths};
    for (int64_t c : o.contexts) ops.contexts.push_back(std::max<int64_t>(1, c));
    if (ops.widths.empty()) ops.widths = {2, 4, 8, 16, 32, 64};
    RunOpCountBench(ops);
    return;
  }
  BenchPrinter printer(ParseBenchFormat(o.format));
  ValidateBench(o);
  SetGemvMaxRows(o.gemv_max_rows);
  SetCpuForwardPathOverride(ParseForwardPath(o.forward, "bench --forward"));
  const at::Device device = ParseDevice(o.device, "bench --device");
  printer.Build(BuildInfoLine());
  PrintSyncCost(device, printer.notes());
  BenchSink sink;
  sink.printer = &printer;
  std::unique_ptr<ResultsStore> store = OpenBenchStore(o, sink.run_id);
  sink.store = store.get();
  PrintKernelLine(printer.notes());
  const std::map<int, double> bandwidths =
      MeasureBandwidths(o, device, store.get(), sink.run_id, printer.notes());
  // Progress on stderr (the table goes to stdout): one unit per measured row.
  std::unique_ptr<ProgressBar> progress;
  if (!o.quiet) {
    progress = std::make_unique<ProgressBar>("bench", CountRows(o), "row");
    sink.progress = progress.get();
  }
  MeasureAll(o, device, bandwidths, sink);
  if (progress) progress->Finish();
  printer.Finish();
  if (store) {
    std::fprintf(stderr, "specbed bench: %lld rows, %lld verify-width rows -> %s (run %lld)\n",
                 static_cast<long long>(sink.n_stored), static_cast<long long>(sink.n_verify),
                 o.output.c_str(), static_cast<long long>(sink.run_id));
  }
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  auto [cmd, o] = AddSubcommand(&app, "bench", RunBench,
                                "AR decode speed (tokens/s; forward vs. other time) -> SQLite");
  OldSpellings(cmd,
               cmd->add_option("-t,--target", o->models, "Models (comma-separated or repeated)")
                   ->delimiter(',')
                   ->capture_default_str(),
               {"-m", "--model"});
  AddListFlags(cmd, {{"--dtype", o->dtypes, "Dtypes: float32, bfloat16, float16"}});
  cmd->add_option("--device", o->device, "Device: cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--forward", o->forward,
                  "Forward path: auto (row kernels on the CPU, ATen elsewhere), rows, aten")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "rows", "aten"}));
  AddListFlags(cmd, {{"--threads", o->threads, "Thread counts"},
                     {"-b,--batch", o->batches, "Batch sizes (>= 1)"},
                     {"-c,--context", o->contexts, "Context lengths already in the KV cache"}});
  OldSpellings(cmd,
               cmd->add_option("-n,--max-new-tokens", o->tokens, "Decode steps per measurement")
                   ->capture_default_str(),
               {"--tokens"});
  AddListFlags(cmd, {{"-p,--prompt-tokens", o->prompt_tokens,
                      "Prompt-processing rows (llama-bench's ppN): one forward of N random tokens "
                      "into an empty cache per rep, per threads x batch (0 = none)"}});
  cmd->add_option("--format", o->format,
                  "stdout format: md (Markdown rows as measured), csv or json (the rows at the "
                  "end; the notes around them go to stderr)")
      ->capture_default_str()
      ->check(CLI::IsMember({"md", "csv", "json"}));
  AddShownFlags(cmd, {{"-r,--reps", o->reps, "Repetitions (after one warmup)"},
                      {"-o,--output", o->output, "Results database (\"\" = do not store)"}});
  AddListFlags(cmd, {{"--verify-widths", o->verify_widths,
                      "Verify-width curve: forward time of n new tokens (each >= 1) after each "
                      "context, median of --reps, and its ratio to n = 1 (batch 1 rows only), "
                      "e.g. 1,2,4,8,16,32,64"}});
  AddShownFlags(
      cmd, {{"--bandwidth-mib", o->bandwidth_mib,
             "STREAM copy/triad array size in MiB (three arrays; 0 = skip the bandwidth and "
             "roofline)"},
            {"--gemv-max-rows", o->gemv_max_rows,
             "A/B: use SpecBed's GEMV for forwards of <= this many rows (0 = ATen/BLAS only; -1 = "
             "the defaults of models/gemv.h)"}});
  AddListFlags(cmd, {{"--gemv-isa", o->gemv_isas,
                      "A/B: cap the CPU GEMV kernels at these instruction sets, each measured in "
                      "turn (auto, avx512bf16, x86-64-v4, x86-64-v3, generic; default: "
                      "SPECBED_GEMV_ISA or auto)"}});
  cmd->add_option("--huge-pages", o->huge_pages,
                  "A/B: CPU row-kernel weights in 2 MiB pages, on and/or off, each measured in "
                  "turn (default: SPECBED_HUGE_PAGES or on)")
      ->delimiter(',')
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--graphs", o->graphs,
                  "A/B: captured step programs (SPECBED_GRAPHS; CUDA graphs on a GPU, the same "
                  "programs run eagerly on the CPU) on and/or off, each measured in turn with its "
                  "verify-width curve; needs the ATen path (default: SPECBED_GRAPHS or off)")
      ->delimiter(',')
      ->check(CLI::IsMember({"on", "off"}));
  AddListFlags(cmd, {{"--lookup-contexts", o->lookup_contexts,
                      "Instead of the model rows: the host cost of a step of the lookup drafters "
                      "(ngram, suffix) after these context lengths of text the first -t model "
                      "samples, e.g. 64,256,1024,4096"}});
  cmd->add_flag("--count-ops", o->count_ops,
                "Instead of timing: the ATen ops of one decode step and of one verify step per "
                "--verify-widths entry >= 2 (default 2,4,...,64) after each context (>= 1) and "
                "37 tokens later: launching ops, per layer, views, allocations, device-to-host "
                "copies, and whether the two steps' traces are identical (CUDA-graph "
                "capturable). Forces the ATen forward path");
  cmd->add_option("--lookup-steps", o->lookup_steps, "Steps timed per --lookup-contexts row")
      ->capture_default_str();
  OldSpellings(cmd, cmd->add_flag("-q,--quiet", o->quiet, "No progress display on stderr"),
               {"--no-progress"});
}

}  // namespace specbed::cli
