// Op accounting for the ATen forward path (issue 45, step 0): which dispatcher ops a step makes,
// with their argument shapes, data pointers and scalars, and how many storage allocations it
// makes. The CPU proof that a step could be captured in a CUDA graph is trace identity: two steps
// at different context lengths give the same op sequence, shapes, pointers and scalars (a graph
// freezes exactly those).
//
// OpTrace records the top-level ATen calls made on its thread while it is alive (at::RecordFunction
// thread-local callbacks; ops called from inside another op are that op's business). SpecBed's
// fused kernels (kernels/*.h) announce themselves with RECORD_FUNCTION ("specbed::<name>"), so
// they count as one launching op each. AllocationCount counts CPU tensor storage allocations.
// OpCounting feeds the per-step counters of kernels/engine_counters.h.
// Checked by: tests/engine/step_ops_test.cpp (counts per decode / verify step on stories260K,
// trace identity and its negative control, the view and host-read classification; OpCounting's
// launches equal OpTrace's, a stray copy counted).
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace specbed {

// One argument of a recorded op: a tensor (sizes and data pointer; an undefined tensor has
// neither) or a scalar (int, float or bool, as a double).
struct OpArg {
  bool tensor = false;
  std::vector<int64_t> sizes;
  const void* data = nullptr;
  double scalar = 0;
  bool operator==(const OpArg& o) const {
    return tensor == o.tensor && sizes == o.sizes && data == o.data && scalar == o.scalar;
  }
};

struct OpRecord {
  std::string name;  // "aten::mm.out", "specbed::rms_norm"
  std::vector<OpArg> args;
  // CPU storage allocations inside the op (counted while an AllocationCount is alive; not part
  // of the identity: a fresh address shows in the next op's pointers).
  int64_t allocations = 0;
  bool operator==(const OpRecord& o) const { return name == o.name && args == o.args; }
};

// Ops that only make a view or an empty tensor (no kernel on any device), and markers.
bool IsMetadataOp(std::string_view name);
// Marks a point of the step in the trace of this thread (a no-op when nothing records):
// AtenForward marks "layer" before each decoder layer and "layers_end" after the last, so
// CountOps can tell the ops of the layers from the rest.
void MarkOpTrace(const char* marker);
// Ops that read device data on the host (a synchronizing read inside a step).
bool IsHostReadOp(std::string_view name);

// The top-level ATen calls of this thread while alive. One trace at a time per thread.
class OpTrace {
 public:
  OpTrace();
  ~OpTrace();
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

  // Stops recording (the destructor does it too); ops() stays readable.
  void Stop();
  const std::vector<OpRecord>& ops() const { return ops_; }

  // Called by the recorder's callbacks.
  void Add(OpRecord record) { ops_.push_back(std::move(record)); }
  void SetLastAllocations(int64_t n) {
    if (!ops_.empty()) ops_.back().allocations = n;
  }

 private:
  std::vector<OpRecord> ops_;
  uint64_t handle_ = 0;
  bool active_ = false;
};

// A recorded step summarized: launching ops (everything but metadata ops and markers), those
// between the first "layer" marker and "layers_end", metadata ops, host reads, and the launching
// ops by name.
struct OpCounts {
  int64_t launching = 0, in_layers = 0, metadata = 0, host_reads = 0;
  std::map<std::string, int64_t> by_name;      // launching ops only
  std::map<std::string, int64_t> allocations;  // ops that allocated: allocations by op name
};
OpCounts CountOps(const std::vector<OpRecord>& ops);

// The first difference between two traces ("op 17 of 210: aten::mm.out arg 0 sizes [1, 64] vs
// [2, 64]"), or "" when they are identical.
std::string TraceDifference(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b);

// One op as text: name(sizes@pointer-offset, scalar, ...), pointers shown relative to `base`.
std::string OpToString(const OpRecord& op);

// SPECBED_COUNT_OPS: "on" | "off" | unset (= off); anything else throws naming the variable.
bool ResolveCountOps();

// While alive (and SPECBED_COUNT_OPS=on, or `force`), counts into the process's engine counters
// (kernels/engine_counters.h) the launching top-level dispatcher calls of every thread, their host
// reads, and cross-device copies made outside an announced transfer. A global at::RecordFunction
// callback, so every op of the process pays for it: the runner turns it on for a case only when
// asked, and records that it did. Nests.
class OpCounting {
 public:
  explicit OpCounting(bool force = false);
  ~OpCounting();
  OpCounting(const OpCounting&) = delete;
  OpCounting& operator=(const OpCounting&) = delete;
  bool active() const { return handle_ != 0; }

 private:
  uint64_t handle_ = 0;
};

// Counts CPU tensor storage allocations while alive (it wraps the current CPU allocator at the
// highest priority and restores the previous one on destruction). One at a time per process.
class AllocationCount {
 public:
  AllocationCount();
  ~AllocationCount();
  AllocationCount(const AllocationCount&) = delete;
  AllocationCount& operator=(const AllocationCount&) = delete;
  int64_t count() const { return counting_.count(); }
  // The live count's reading, or -1 when none is alive (for the op recorder).
  static int64_t Current();

 private:
  class Counting final : public c10::Allocator {
   public:
    explicit Counting(c10::Allocator* base) : base_(base) {}
    c10::DataPtr allocate(size_t n) override {
      ++count_;
      return base_->allocate(n);
    }
    void copy_data(void* dest, const void* src, std::size_t count) const override {
      default_copy_data(dest, src, count);
    }
    c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }
    int64_t count() const { return count_.load(); }

   private:
    c10::Allocator* base_;
    std::atomic<int64_t> count_{0};
  };
  c10::Allocator* base_;
  Counting counting_;
};

}  // namespace specbed
