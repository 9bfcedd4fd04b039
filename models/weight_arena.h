// Weights in 2 MiB pages for the CPU row kernels: one anonymous mapping, 2 MiB-aligned and
// madvise(MADV_HUGEPAGE)'d before it is touched, into which a model's streamed matrices are copied.
//
// Why: a decode step streams every weight matrix once. On 4 KiB pages each page costs a TLB miss
// and stops the hardware prefetcher at its edge: on this 2-core Zen 4 VM one thread read a 187 MB
// fp32 array at 16.5 GB/s on 4 KiB pages and at 26 GB/s in 2 MiB pages. Transparent huge pages
// in "madvise" mode (Debian's default) give 2 MiB pages only where asked; with "never" the arena
// is plain memory and HugePageBytes says 0.
//
// Knobs: SetWeightHugePages(false), the environment variable SPECBED_HUGE_PAGES=0, and
// `specbed bench --huge-pages off` turn it off for A/B runs.
//
// Checked by: tests/models/weight_arena_test.cpp (values and dtypes unchanged, views alias the
// arena, alignment, the off switch, the huge-page count read back from /proc/self/smaps).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace specbed {

// Whether new CPU row-kernel models pack their weights into huge pages: SetWeightHugePages if
// called, else SPECBED_HUGE_PAGES ("0"/"off" = no, "1"/"on" = yes, unset = yes).
bool WeightHugePagesEnabled();
void SetWeightHugePages(bool enabled);

struct WeightArenaStats {
  int64_t bytes = 0;  // bytes of the packed tensors (0 = nothing packed)
  int64_t huge_page_bytes =
      -1;  // of the arena, bytes the kernel backs with huge pages (-1 = unknown)
};

// Copies each defined CPU tensor of `tensors` (contiguous after the copy) into one huge-page
// arena, each at a 4 KiB-aligned offset, and points the tensor at its copy (same shape, dtype and
// values; the arena lives until the last of them is freed). Undefined or non-CPU tensors are
// left alone. Nothing is packed (bytes = 0) when they hold fewer than `min_bytes`: a model that
// fits in cache gains nothing, and each arena takes at least one 2 MiB page. Returns what was
// packed.
inline constexpr int64_t kWeightArenaMinBytes = int64_t{2} << 20;
WeightArenaStats PackIntoHugePages(const std::vector<at::Tensor*>& tensors,
                                   int64_t min_bytes = kWeightArenaMinBytes);

// `bytes` of zeroed memory in its own 2 MiB-aligned mapping advised for huge pages, freed with the
// last copy of the pointer (the STREAM arrays use it, so the roofline is measured on the pages
// the weights sit in).
std::shared_ptr<char> HugePageBuffer(int64_t bytes);

// Bytes of [data, data + bytes) that /proc/self/smaps reports as AnonHugePages (-1 when it cannot
// be read, e.g. off Linux).
int64_t HugePageBytesOf(const void* data, int64_t bytes);

}  // namespace specbed
