// `specbed bench --count-ops` (see bench_ops.h).
#include "harness/cli/bench_ops.h"

#include <algorithm>
#include <cstdio>

#include "base/error.h"
#include "base/names.h"
#include "harness/engine/step_ops.h"
#include "models/device.h"
#include "models/model_registry.h"

namespace specbed::cli {
namespace {

// The second context of each row: a length the first never equals, not a power of two.
constexpr int64_t kSecondContextOffset = 37;

void PrintRow(const std::string& model, const std::string& dtype, const StepOps& s) {
  std::printf(
      "| ops | %s | %s | %s | %lld | %lld | %lld | %.1f | %lld | %lld | %lld | %lld | %lld "
      "| %s |\n",
      model.c_str(), dtype.c_str(), s.step.c_str(), static_cast<long long>(s.width),
      static_cast<long long>(s.context_a), static_cast<long long>(s.counts.launching),
      s.per_layer(), static_cast<long long>(s.outside_layers()),
      static_cast<long long>(s.counts.metadata), static_cast<long long>(s.allocations),
      static_cast<long long>(s.host_copies), static_cast<long long>(s.counts.host_reads),
      s.difference.empty() ? StrCat("yes (", s.context_b, ")").c_str()
                           : StrCat("no (", s.context_b, "): ", s.difference).c_str());
  std::fflush(stdout);
}

void PrintByName(const StepOps& s) {
  std::vector<std::pair<int64_t, std::string>> ops;
  for (const auto& [name, n] : s.counts.by_name) ops.emplace_back(-n, name);
  std::sort(ops.begin(), ops.end());
  std::printf("\n%s step's launching ops by name:", s.step.c_str());
  for (const auto& [n, name] : ops)
    std::printf(" %s x%lld;", name.c_str(), static_cast<long long>(-n));
  std::printf("\n");
  if (s.counts.allocations.empty()) return;
  std::printf("%s step's CPU allocations by op:", s.step.c_str());
  for (const auto& [name, n] : s.counts.allocations) {
    std::printf(" %s %lld;", name.c_str(), static_cast<long long>(n));
  }
  std::printf("\n");
}

}  // namespace

void RunOpCountBench(const OpCountOptions& o) {
  const at::Device device = ParseDevice(o.device, "bench --device");
  SetCpuForwardPathOverride(ForwardPath::kAten);
  std::vector<int64_t> widths;
  for (int64_t w : o.widths) {
    SPECBED_CHECK(w >= 1, "bench --count-ops: --verify-widths must all be >= 1, got ", w);
    if (w >= 2) widths.push_back(w);
  }
  std::printf(
      "| ops per step | model | dtype | step | new tokens | context | launching | per layer | "
      "outside layers | metadata | allocations | D2H copies | host reads | same trace at context "
      "|\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  StepOps first_decode;
  for (const std::string& model_name : o.models) {
    for (const std::string& dtype : o.dtypes) {
      LoadedTarget target = LoadModel(model_name, ParseDtype(dtype), "", device);
      for (int64_t c : o.contexts) {
        SPECBED_CHECK(c >= 1, "bench --count-ops: contexts must be >= 1, got ", c);
        const StepOps decode = TraceDecodeStep(*target.model, c, c + kSecondContextOffset);
        PrintRow(target.spec.name, dtype, decode);
        for (int64_t w : widths) {
          PrintRow(target.spec.name, dtype,
                   TraceVerifyStep(*target.model, w - 1, c, c + kSecondContextOffset));
        }
        if (first_decode.step.empty()) first_decode = decode;
      }
    }
  }
  if (!first_decode.step.empty()) PrintByName(first_decode);
}

}  // namespace specbed::cli
