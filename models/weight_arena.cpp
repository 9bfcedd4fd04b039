// Weights in 2 MiB pages for the CPU row kernels (see weight_arena.h).
#include "models/weight_arena.h"

#include <ATen/ATen.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "base/error.h"

namespace specbed {
namespace {

constexpr int64_t kHugePage = int64_t{2} << 20;
constexpr int64_t kTensorAlign = 4096;

// -1 = not set (environment), 0 = off, 1 = on.
std::atomic<int> g_huge_pages{-1};

int64_t RoundUp(int64_t n, int64_t to) {
  return (n + to - 1) / to * to;
}

// One 2 MiB-aligned anonymous mapping, advised for huge pages before anything touches it.
class Arena {
 public:
  explicit Arena(int64_t bytes) : size_(RoundUp(std::max<int64_t>(bytes, 1), kHugePage)) {
    // Over-map by one huge page and trim, so the start is 2 MiB-aligned.
    const size_t mapped = static_cast<size_t>(size_ + kHugePage);
    void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    SPECBED_CHECK(raw != MAP_FAILED, "weight arena: could not map ", mapped, " bytes (",
                  std::strerror(errno), ")");
    const auto start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
    if (aligned > start) munmap(raw, aligned - start);
    const uintptr_t end = start + mapped, used_end = aligned + static_cast<uintptr_t>(size_);
    if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
    data_ = reinterpret_cast<char*>(aligned);
#ifdef MADV_HUGEPAGE
    madvise(data_, static_cast<size_t>(size_), MADV_HUGEPAGE);  // advisory: failure = 4 KiB pages
#endif
  }
  ~Arena() {
    munmap(data_, static_cast<size_t>(size_));
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  char* data() const {
    return data_;
  }
  int64_t size() const {
    return size_;
  }

 private:
  int64_t size_;
  char* data_ = nullptr;
};

bool Eligible(const at::Tensor* t) {
  return t != nullptr && t->defined() && t->device().is_cpu() && t->numel() > 0;
}

}  // namespace

bool WeightHugePagesEnabled() {
  const int set = g_huge_pages.load(std::memory_order_relaxed);
  if (set >= 0) return set == 1;
  const char* env = std::getenv("SPECBED_HUGE_PAGES");
  if (env == nullptr || *env == 0) return true;
  const std::string v = env;
  SPECBED_CHECK(v == "0" || v == "1" || v == "off" || v == "on",
                "environment variable SPECBED_HUGE_PAGES: expected 0, 1, off or on, got '", v, "'");
  return v == "1" || v == "on";
}

void SetWeightHugePages(bool enabled) {
  g_huge_pages.store(enabled ? 1 : 0, std::memory_order_relaxed);
}

WeightArenaStats PackIntoHugePages(const std::vector<at::Tensor*>& tensors, int64_t min_bytes) {
  int64_t total = 0;
  for (const at::Tensor* t : tensors) {
    if (Eligible(t)) total += RoundUp(t->numel() * t->element_size(), kTensorAlign);
  }
  WeightArenaStats stats;
  if (total == 0 || total < min_bytes) return stats;
  auto arena = std::make_shared<Arena>(total);
  int64_t offset = 0;
  for (at::Tensor* t : tensors) {
    if (!Eligible(t)) continue;
    const at::Tensor src = t->contiguous();
    const int64_t bytes = src.numel() * src.element_size();
    char* dst = arena->data() + offset;
    std::memcpy(dst, src.data_ptr(), static_cast<size_t>(bytes));
    *t = at::from_blob(
        dst, src.sizes(), [arena](void*) {}, src.options());
    offset += RoundUp(bytes, kTensorAlign);
  }
  stats.bytes = offset;
  stats.huge_page_bytes = HugePageBytesOf(arena->data(), arena->size());
  return stats;
}

std::shared_ptr<char> HugePageBuffer(int64_t bytes) {
  auto arena = std::make_shared<Arena>(bytes);
  return std::shared_ptr<char>(arena, arena->data());
}

int64_t HugePageBytesOf(const void* data, int64_t bytes) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return -1;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = begin + static_cast<uintptr_t>(bytes);
  int64_t huge_kib = 0;
  bool inside = false, found = false;
  std::string line;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    // A mapping header: "lo-hi perms offset dev inode [path]".
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < line.find(' ')) {
      inside = lo < end && begin < hi;
      found = found || inside;
      continue;
    }
    long long kib = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %lld kB", &kib) == 1) huge_kib += kib;
  }
  return found ? huge_kib * 1024 : -1;
}

}  // namespace specbed
