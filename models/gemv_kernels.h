// The per-instruction-set halves of SpecBed's small-row GEMV (models/gemv.h is the public API).
// models/gemv_kernels.inc holds the kernels once; each gemv_isa_*.cpp compiles it for one
// instruction set (its own -march flags, CMakeLists.txt) and returns its table here; gemv.cpp
// checks arguments, picks the table the CPU supports (or the one SetGemvIsa forces) and splits the
// output features across threads.
//
// This header is included by the per-ISA translation units, so it must stay free of inline code
// (no ATen, c10 or standard-library headers beyond <cstdint>): an inline function compiled there
// with AVX-512 enabled could be the copy the linker keeps for the whole program.
//
// Checked by: tests/models/gemv_test.cpp (every table this CPU supports against at::mm).
#pragma once

#include <cstdint>

namespace specbed::gemv {

// The instruction sets the kernels are compiled for, lowest first.
enum class Isa : int {
  kGeneric = 0,     // baseline x86-64 (SSE2) or any other CPU: 8-lane GCC vectors, no FMA
  kAvx2 = 1,        // x86-64-v3: AVX2 + FMA + F16C, 8 float lanes
  kAvx512 = 2,      // x86-64-v4: AVX-512 F/BW/DQ/VL, 16 float lanes
  kAvx512Bf16 = 3,  // x86-64-v4 + AVX512_BF16: bf16 x bf16 dot products (vdpbf16ps)
};
inline constexpr int kIsaCount = 4;

// Weight (and bias, out) storage.
enum class Storage : int { kFloat = 0, kBFloat16 = 1, kHalf = 2 };

struct Args {
  // [rows, in] activations: float32 for every kernel except bf16 weights on kAvx512Bf16, which
  // reads them as bfloat16 (the model's own activations, unconverted).
  const void* x;
  int64_t rows, in;
  const void* weight;  // [out_features, in], Storage
  const void* bias;    // [out_features], Storage, or nullptr
  void* out;           // [rows, out_features], Storage
  int64_t out_features;
  bool accumulate;
};

// out[:, j_begin .. j_end) for every row of `args`.
using RangeFn = void (*)(const Args& args, int64_t j_begin, int64_t j_end);

// One instruction set's kernels, indexed by Storage. `bf16_x` is true where the bfloat16 kernel
// reads bfloat16 activations.
struct Table {
  const char* name;  // "generic", "x86-64-v3", "x86-64-v4", "avx512bf16"
  RangeFn range[3];
  bool bf16_x;
};

// Whether this CPU (and OS) runs `isa`'s code (__builtin_cpu_supports; generic: always).
bool CpuHas(Isa isa);
// `isa`'s table, or nullptr when the CPU lacks it or the build has no such table.
const Table* TableOf(Isa isa);

// Defined in gemv_isa_generic.cpp / gemv_isa_avx2.cpp / gemv_isa_avx512.cpp /
// gemv_isa_avx512bf16.cpp. The x86 ones exist only on x86-64 builds (SPECBED_GEMV_X86).
const Table& GenericTable();
const Table& Avx2Table();
const Table& Avx512Table();
const Table& Avx512Bf16Table();

}  // namespace specbed::gemv
