// Per-step engine counters (see engine_counters.h).
#include "kernels/engine_counters.h"

namespace specbed {
namespace {

std::atomic<int64_t> g_launches{0}, g_host_reads{0}, g_replays{0}, g_captures{0}, g_h2d{0},
    g_d2h{0};
std::atomic<int> g_op_counting{0};
thread_local int t_transfer_depth = 0;

int64_t Load(const std::atomic<int64_t>& a) {
  return a.load(std::memory_order_relaxed);
}

int64_t Minus(int64_t now, int64_t before) {
  return now < 0 || before < 0 ? -1 : now - before;
}

}  // namespace

EngineCounters EngineCounters::Since(const EngineCounters& before) const {
  EngineCounters d;
  d.launches = Minus(launches, before.launches);
  d.host_reads = Minus(host_reads, before.host_reads);
  d.replays = replays - before.replays;
  d.captures = captures - before.captures;
  d.h2d = h2d - before.h2d;
  d.d2h = d2h - before.d2h;
  return d;
}

EngineCounters ReadEngineCounters() {
  EngineCounters c;
  const bool counting = g_op_counting.load(std::memory_order_relaxed) > 0;
  c.launches = counting ? Load(g_launches) : -1;
  c.host_reads = counting ? Load(g_host_reads) : -1;
  c.replays = Load(g_replays);
  c.captures = Load(g_captures);
  c.h2d = Load(g_h2d);
  c.d2h = Load(g_d2h);
  return c;
}

TransferScope::TransferScope(Transfer direction) {
  ++t_transfer_depth;
  engine_counters_detail::AddCopy(direction);
}

TransferScope::~TransferScope() {
  --t_transfer_depth;
}

bool TransferScope::Active() {
  return t_transfer_depth > 0;
}

namespace engine_counters_detail {

void AddLaunches(int64_t n) {
  g_launches.fetch_add(n, std::memory_order_relaxed);
}
void AddHostReads(int64_t n) {
  g_host_reads.fetch_add(n, std::memory_order_relaxed);
}
void AddCopy(Transfer direction) {
  (direction == Transfer::kHostToDevice ? g_h2d : g_d2h).fetch_add(1, std::memory_order_relaxed);
}
void AddReplay() {
  g_replays.fetch_add(1, std::memory_order_relaxed);
}
void AddCapture() {
  g_captures.fetch_add(1, std::memory_order_relaxed);
}
void SetOpCounting(bool on) {
  g_op_counting.fetch_add(on ? 1 : -1, std::memory_order_relaxed);
}

}  // namespace engine_counters_detail
}  // namespace specbed
