// Op accounting (see op_trace.h).
#include "models/op_trace.h"

#include <ATen/core/Tensor.h>
#include <ATen/record_function.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <sstream>

#include "base/error.h"
#include "kernels/engine_counters.h"

namespace specbed {
namespace {

thread_local OpTrace* active_trace = nullptr;
thread_local int depth = 0;                     // nesting of recorded functions on this thread
thread_local int64_t allocations_at_start = 0;  // of the current top-level op
std::atomic<const AllocationCount*> live_count{nullptr};

OpArg ArgOf(const c10::IValue& v) {
  OpArg a;
  if (v.isTensor()) {
    a.tensor = true;
    const at::Tensor& t = v.toTensor();
    if (t.defined()) {
      a.sizes.assign(t.sizes().begin(), t.sizes().end());
      a.data = t.has_storage() ? t.data_ptr() : nullptr;
    }
  } else if (v.isInt()) {
    a.scalar = static_cast<double>(v.toInt());
  } else if (v.isDouble()) {
    a.scalar = v.toDouble();
  } else if (v.isBool()) {
    a.scalar = v.toBool() ? 1 : 0;
  } else if (v.isIntList()) {
    a.sizes = v.toIntVector();  // int lists (view sizes, dims) compare like shapes
  }
  return a;
}

constexpr std::string_view kMarkPrefix = "specbed::mark.";

bool IsMarker(std::string_view name) {
  return name.substr(0, kMarkPrefix.size()) == kMarkPrefix;
}

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction& fn) {
  if (fn.scope() == at::RecordScope::USER_SCOPE) {  // a marker: no ops below it
    if (depth == 0 && active_trace != nullptr) active_trace->Add(OpRecord{fn.name(), {}});
    return nullptr;
  }
  if (depth++ == 0 && active_trace != nullptr) {
    OpRecord r;
    r.name = fn.name();
    const char* overload = fn.overload_name();
    if (overload != nullptr && overload[0] != '\0') r.name += std::string(".") + overload;
    for (const c10::IValue& v : fn.inputs()) r.args.push_back(ArgOf(v));
    active_trace->Add(std::move(r));
    allocations_at_start = AllocationCount::Current();
  }
  return nullptr;
}

void OnEnd(const at::RecordFunction& fn, at::ObserverContext*) {
  if (fn.scope() == at::RecordScope::USER_SCOPE) return;
  if (--depth == 0 && active_trace != nullptr && allocations_at_start >= 0) {
    active_trace->SetLastAllocations(AllocationCount::Current() - allocations_at_start);
  }
}

bool StartsWithAny(std::string_view name, std::initializer_list<std::string_view> prefixes) {
  for (std::string_view p : prefixes) {
    if (name == p ||
        (name.size() > p.size() && name.substr(0, p.size()) == p && name[p.size()] == '.')) {
      return true;
    }
  }
  return false;
}

thread_local int count_depth = 0;  // nesting seen by OpCounting's global callback

std::unique_ptr<at::ObserverContext> OnCountStart(const at::RecordFunction& fn);

void OnCountEnd(const at::RecordFunction&, at::ObserverContext*) {
  --count_depth;
}

}  // namespace

void MarkOpTrace(const char* marker) {
  RECORD_USER_SCOPE(std::string(kMarkPrefix) + marker);
}

bool IsMetadataOp(std::string_view name) {
  if (IsMarker(name)) return true;
  return StartsWithAny(
      name, {"aten::as_strided", "aten::view",          "aten::_unsafe_view", "aten::narrow",
             "aten::select",     "aten::slice",         "aten::permute",      "aten::transpose",
             "aten::t",          "aten::unsqueeze",     "aten::squeeze",      "aten::expand",
             "aten::alias",      "aten::detach",        "aten::reshape",      "aten::view_as",
             "aten::empty",      "aten::empty_strided", "aten::empty_like",   "aten::lift_fresh"});
}

bool IsHostReadOp(std::string_view name) {
  return StartsWithAny(name, {"aten::item", "aten::_local_scalar_dense", "aten::nonzero",
                              "aten::equal", "aten::is_nonzero", "aten::allclose"});
}

OpTrace::OpTrace() {
  SPECBED_CHECK(active_trace == nullptr, "OpTrace: another trace is already recording");
  active_trace = this;
  depth = 0;
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(OnStart, OnEnd)
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
  active_ = true;
}

OpTrace::~OpTrace() {
  Stop();
}

void OpTrace::Stop() {
  if (!active_) return;
  at::removeCallback(handle_);
  active_trace = nullptr;
  active_ = false;
}

namespace {

// A cross-device copy_ (at any depth) not made inside an announced transfer.
void CountStrayCopy(const at::RecordFunction& fn) {
  if (TransferScope::Active() || std::string_view(fn.name()) != "aten::copy_") return;
  const auto inputs = fn.inputs();
  if (inputs.size() < 2 || !inputs[0].isTensor() || !inputs[1].isTensor()) return;
  const at::Tensor& dst = inputs[0].toTensor();
  const at::Tensor& src = inputs[1].toTensor();
  if (!dst.defined() || !src.defined() || dst.device() == src.device()) return;
  engine_counters_detail::AddCopy(src.device().is_cpu() ? Transfer::kHostToDevice
                                                        : Transfer::kDeviceToHost);
}

std::unique_ptr<at::ObserverContext> OnCountStart(const at::RecordFunction& fn) {
  CountStrayCopy(fn);
  if (count_depth++ != 0) return nullptr;
  std::string name = fn.name();
  const char* overload = fn.overload_name();
  if (overload != nullptr && overload[0] != '\0') name += std::string(".") + overload;
  if (IsHostReadOp(name)) engine_counters_detail::AddHostReads(1);
  if (!IsMetadataOp(name)) engine_counters_detail::AddLaunches(1);
  return nullptr;
}

}  // namespace

bool ResolveCountOps() {
  const char* env = std::getenv("SPECBED_COUNT_OPS");
  const std::string value = env == nullptr ? "" : env;
  if (value.empty() || value == "off") return false;
  if (value == "on") return true;
  throw Error(StrCat("SPECBED_COUNT_OPS=", value, ": expected on or off"));
}

OpCounting::OpCounting(bool force) {
  if (!force && !ResolveCountOps()) return;
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(OnCountStart, OnCountEnd)
                                      .needsInputs(true)
                                      .scopes({at::RecordScope::FUNCTION}));
  engine_counters_detail::SetOpCounting(true);
}

OpCounting::~OpCounting() {
  if (handle_ == 0) return;
  at::removeCallback(handle_);
  engine_counters_detail::SetOpCounting(false);
}

OpCounts CountOps(const std::vector<OpRecord>& ops) {
  OpCounts c;
  int in_layers = 0;  // 1 between the first layer marker and layers_end
  for (const OpRecord& op : ops) {
    if (IsMarker(op.name)) {
      if (op.name == StrCat(kMarkPrefix, "layer")) in_layers = 1;
      if (op.name == StrCat(kMarkPrefix, "layers_end")) in_layers = 0;
      continue;
    }
    if (IsMetadataOp(op.name)) {
      ++c.metadata;
      continue;
    }
    ++c.launching;
    c.in_layers += in_layers;
    if (op.allocations > 0) c.allocations[op.name] += op.allocations;
    ++c.by_name[op.name];
    if (IsHostReadOp(op.name)) ++c.host_reads;
  }
  return c;
}

std::string OpToString(const OpRecord& op) {
  std::ostringstream s;
  s << op.name << "(";
  for (size_t i = 0; i < op.args.size(); ++i) {
    const OpArg& a = op.args[i];
    if (i > 0) s << ", ";
    if (a.tensor || !a.sizes.empty()) {
      s << "[";
      for (size_t j = 0; j < a.sizes.size(); ++j) s << (j ? ", " : "") << a.sizes[j];
      s << "]";
      if (a.data != nullptr) s << "@" << a.data;
    } else {
      s << a.scalar;
    }
  }
  s << ")";
  return s.str();
}

std::string TraceDifference(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;
    return StrCat("op ", i, " of ", a.size(), ": ", OpToString(a[i]), " vs ", OpToString(b[i]));
  }
  if (a.size() != b.size()) {
    return StrCat(a.size(), " ops vs ", b.size(), " (the first ", n, " identical)");
  }
  return "";
}

// c10 replaces an allocator only at a priority >= the current one: both directions use the
// highest, so a second count in the same process installs too (checked: a count that is not
// installed would read 0 and pass anything).
AllocationCount::AllocationCount() : base_(c10::GetCPUAllocator()), counting_(base_) {
  constexpr uint8_t kPriority = 255;
  c10::SetCPUAllocator(&counting_, kPriority);
  SPECBED_CHECK(c10::GetCPUAllocator() == &counting_,
                "AllocationCount: the counting allocator was not installed");
  live_count.store(this);
}

AllocationCount::~AllocationCount() {
  live_count.store(nullptr);
  c10::SetCPUAllocator(base_, 255);
}

int64_t AllocationCount::Current() {
  const AllocationCount* live = live_count.load();
  return live != nullptr ? live->count() : -1;
}

}  // namespace specbed
