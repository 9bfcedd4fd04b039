// Memory bandwidth, verify-width curve, roofline fraction and BLAS identity (see machine_bench.h).
#include "harness/engine/machine_bench.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <dlfcn.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>

#include "base/error.h"
#include "base/timer.h"
#include "models/device.h"
#include "models/weight_arena.h"

namespace specbed {
namespace {

// Restores the ATen thread count when the scope ends.
class ThreadScope {
 public:
  explicit ThreadScope(int threads) : saved_(at::get_num_threads()) {
    at::set_num_threads(threads);
  }
  ~ThreadScope() { at::set_num_threads(saved_); }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Static chunking: the same thread touches (first-touch) and streams the same part of an array.
template <typename F>
void ForChunks(int64_t n, int threads, const F& f) {
  const int64_t chunk = (n + threads - 1) / threads;
  at::parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t begin = std::min(n, t * chunk), end = std::min(n, (t + 1) * chunk);
      if (begin < end) f(begin, end);
    }
  });
}

}  // namespace

MemoryBandwidth MeasureMemoryBandwidth(int threads, int64_t array_bytes, int reps) {
  SPECBED_CHECK(threads >= 1, "MeasureMemoryBandwidth: threads must be >= 1, got ", threads);
  SPECBED_CHECK(array_bytes >= 1024, "MeasureMemoryBandwidth: array size must be >= 1 KiB, got ",
                array_bytes, " bytes");
  SPECBED_CHECK(reps >= 1, "MeasureMemoryBandwidth: reps must be >= 1, got ", reps);
  ThreadScope scope(threads);
  const int64_t n = array_bytes / static_cast<int64_t>(sizeof(double));
  // In 2 MiB pages when the weights are (models/weight_arena.h), so the roofline compares like
  // with like; else plain heap arrays.
  std::shared_ptr<char> a, b, c;
  for (std::shared_ptr<char>* array : {&a, &b, &c}) {
    const int64_t bytes = n * static_cast<int64_t>(sizeof(double));
    *array = WeightHugePagesEnabled()
                 ? HugePageBuffer(bytes)
                 : std::shared_ptr<char>(new char[bytes], std::default_delete<char[]>());
  }
  double* ap = reinterpret_cast<double*>(a.get());
  double* bp = reinterpret_cast<double*>(b.get());
  double* cp = reinterpret_cast<double*>(c.get());
  ForChunks(n, threads, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      ap[i] = 1.0;
      bp[i] = 2.0;
      cp[i] = 0.5;
    }
  });
  const double scalar = 3.0;
  double best_copy = std::numeric_limits<double>::infinity();
  double best_triad = std::numeric_limits<double>::infinity();
  for (int r = 0; r <= reps; ++r) {  // r = 0: untimed warmup
    int64_t t0 = NowNanos();
    ForChunks(n, threads, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) cp[i] = ap[i];
    });
    const double copy_s = (NowNanos() - t0) * 1e-9;
    t0 = NowNanos();
    ForChunks(n, threads, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) ap[i] = bp[i] + scalar * cp[i];
    });
    const double triad_s = (NowNanos() - t0) * 1e-9;
    if (r > 0) {
      best_copy = std::min(best_copy, copy_s);
      best_triad = std::min(best_triad, triad_s);
    }
  }
  // Keep the stores observable.
  volatile double sink = ap[n / 2] + cp[n - 1];
  (void)sink;
  MemoryBandwidth out;
  out.threads = threads;
  out.array_bytes = n * static_cast<int64_t>(sizeof(double));
  out.reps = reps;
  out.copy_gb_s = 2.0 * out.array_bytes / best_copy * 1e-9;
  out.triad_gb_s = 3.0 * out.array_bytes / best_triad * 1e-9;
  return out;
}

double MeasureDeviceCopyBandwidth(const at::Device& device, int64_t bytes, int reps) {
  SPECBED_CHECK(bytes >= 1024 && reps >= 1, "MeasureDeviceCopyBandwidth: bytes must be >= 1 KiB ",
                "and reps >= 1, got ", bytes, " and ", reps);
  const at::Tensor src = at::ones({bytes}, at::TensorOptions(at::kByte).device(device));
  at::Tensor dst = at::empty_like(src);
  dst.copy_(src);  // untimed: first touch, allocator, kernel load
  double best_s = std::numeric_limits<double>::infinity();
  for (int r = 0; r < reps; ++r) {
    const int64_t t0 = DeviceNowNanos(device);  // waits for the device first
    dst.copy_(src);
    best_s = std::min(best_s, (DeviceNowNanos(device) - t0) * 1e-9);
  }
  return 2.0 * static_cast<double>(bytes) / best_s * 1e-9;
}

std::vector<VerifyWidthPoint> MeasureVerifyWidthCurve(LlamaModel& model, int64_t context,
                                                      const std::vector<int64_t>& widths,
                                                      int64_t reps) {
  SPECBED_CHECK(context >= 0, "verify-width curve: context must be >= 0, got ", context);
  SPECBED_CHECK(reps >= 1, "verify-width curve: reps must be >= 1, got ", reps);
  SPECBED_CHECK(!widths.empty(), "verify-width curve: no widths given");
  std::vector<int64_t> ns;
  for (int64_t w : widths) {
    SPECBED_CHECK(w >= 1, "verify-width curve: every width must be >= 1, got ", w);
    if (std::find(ns.begin(), ns.end(), w) == ns.end()) ns.push_back(w);
  }
  if (std::find(ns.begin(), ns.end(), 1) == ns.end()) ns.insert(ns.begin(), 1);
  const int64_t max_n = *std::max_element(ns.begin(), ns.end());
  const int64_t prefill = std::max<int64_t>(1, context);
  SPECBED_CHECK(prefill + max_n <= model.config().max_seq_len, "verify-width curve: context ",
                prefill, " + width ", max_n, " exceeds the model's max_seq_len ",
                model.config().max_seq_len);
  const int64_t vocab = model.config().vocab_size;
  std::mt19937_64 rng(42);
  auto random_ids = [&](int64_t n) {
    at::Tensor ids = at::empty({1, n}, at::kLong);
    int64_t* p = ids.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      p[i] = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
    return ids;
  };
  // With captured steps on, a verify of n tokens runs the padded width the verifier would run
  // (StepBucket(n) rows where the cache has room; kernels/step_graph.h), after two warm-ups (the
  // eager run and the capture).
  const bool graphs = model.graph_mode() == GraphMode::kOn;
  const int64_t room = graphs ? StepBucket(max_n) : max_n;
  KvCache cache = model.NewCache(1, std::min(prefill + room, model.config().max_seq_len));
  auto rows_for = [&](int64_t n) {
    const int64_t bucket = StepBucket(n);
    return model.ReplaysSteps(bucket) && prefill + bucket <= cache.max_len() ? bucket : n;
  };
  ForwardOptions no_logits;
  no_logits.logits = LogitsMode::kNone;
  model.Forward(random_ids(prefill), cache, no_logits);
  ForwardOptions all;
  all.logits = LogitsMode::kAll;
  std::vector<VerifyWidthPoint> out;
  for (int64_t n : ns) {
    const at::Tensor ids = random_ids(rows_for(n));
    std::vector<double> ms;
    const int64_t warmups = graphs ? 2 : 1;
    for (int64_t r = 0; r < warmups + reps; ++r) {
      cache.Truncate(prefill);
      const int64_t t0 = DeviceNowNanos(model.device());
      model.Forward(ids, cache, all);
      if (r >= warmups) ms.push_back((DeviceNowNanos(model.device()) - t0) * 1e-6);
    }
    cache.Truncate(prefill);
    VerifyWidthPoint p;
    p.n_query = n;
    p.forward_ms = Median(ms);
    out.push_back(p);
  }
  double one_ms = 0;
  for (const auto& p : out)
    if (p.n_query == 1) one_ms = p.forward_ms;
  for (auto& p : out) p.ratio_to_one = p.forward_ms / one_ms;
  return out;
}

int64_t DecodeWeightBytes(const LlamaModel& model) {
  const LlamaWeights& w = model.weights();
  int64_t bytes = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  };
  for (const LlamaLayerWeights& layer : w.layers) {
    add(layer.wqkv);
    add(layer.bqkv);
    add(layer.wo);
    add(layer.w_gate_up);
    add(layer.w_down);
  }
  add(w.lm_head);
  return bytes;
}

double RooflineFraction(int64_t weight_bytes, double bandwidth_gb_s, double forward_ms) {
  if (!(bandwidth_gb_s > 0) || !(forward_ms > 0) || weight_bytes < 0) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  const double ideal_ms = static_cast<double>(weight_bytes) / (bandwidth_gb_s * 1e9) * 1e3;
  return ideal_ms / forward_ms;
}

namespace {

// The value after `key` in LibTorch's build configuration (at::show_config()), up to the next
// comma or line end; "" when absent.
std::string TorchConfigValue(const std::string& key) {
  const std::string config = at::show_config();
  const size_t at = config.find(key);
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size();
  const size_t end = config.find_first_of(",\n", begin);
  return config.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// OpenBLAS's core name when OpenBLAS is loaded, else nullptr.
const char* OpenBlasCoreName() {
  using CharFn = char* (*)();
  auto fn = reinterpret_cast<CharFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return fn != nullptr ? fn() : nullptr;
}

}  // namespace

std::string BlasCoreName() {
  if (const char* name = OpenBlasCoreName()) return name;
  const std::string blas = TorchConfigValue("BLAS_INFO="),
                    isa = TorchConfigValue("CPU capability usage: ");
  if (blas.empty()) return "unknown";
  return isa.empty() ? blas : StrCat(blas, "/", isa);
}

std::string BlasCoreDescription() {
  if (OpenBlasCoreName() == nullptr) {
    return StrCat(BlasCoreName(), " (LibTorch ", TORCH_VERSION, "'s BLAS_INFO and CPU capability)");
  }
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  std::string out = StrCat("OpenBLAS core ", BlasCoreName());
  out += StrCat(" (OPENBLAS_CORETYPE=", env != nullptr && *env != '\0' ? env : "unset");
  using CharFn = char* (*)();
  auto config = reinterpret_cast<CharFn>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  if (config != nullptr && config() != nullptr) out += StrCat("; ", config());
  out += ")";
  return out;
}

}  // namespace specbed
