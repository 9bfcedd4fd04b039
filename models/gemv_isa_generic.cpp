// The GEMV kernels (models/gemv_kernels.inc) compiled for the baseline instruction set (SSE2 on
// x86-64; any CPU), and the choice among the tables by what the CPU supports (CpuHas, TableOf):
// baseline code, so it runs everywhere. Flags: models/CMakeLists.txt.
// Checked by: tests/models/gemv_kernels_test.cpp (no LibTorch; also under ASan + UBSan) and
// tests/models/gemv_test.cpp.
#define SPECBED_GEMV_TABLE GenericTable
#define SPECBED_GEMV_NAME "generic"
#include "models/gemv_kernels.inc"

namespace specbed::gemv {

// The x86-64 levels by their defining features (clang 14 does not know the level names; every CPU
// with AVX2, FMA and BMI2 also has the level's F16C, LZCNT and MOVBE), read once: TableOf runs
// on every GemvRows call.
bool CpuHas(Isa isa) {
#if defined(SPECBED_GEMV_X86)
  struct Levels {
    bool v3, v4, bf16;
  };
  static const Levels levels = [] {
    __builtin_cpu_init();
    Levels l{};
    l.v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
    l.v4 = l.v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd");
    l.bf16 = l.v4 && __builtin_cpu_supports("avx512bf16");
    return l;
  }();
  switch (isa) {
    case Isa::kGeneric:
      return true;
    case Isa::kAvx2:
      return levels.v3;
    case Isa::kAvx512:
      return levels.v4;
    case Isa::kAvx512Bf16:
      return levels.bf16;
  }
  return false;
#else
  return isa == Isa::kGeneric;
#endif
}

const Table* TableOf(Isa isa) {
  if (!CpuHas(isa)) return nullptr;
  switch (isa) {
#if defined(SPECBED_GEMV_X86)
    case Isa::kAvx512Bf16:
      return &Avx512Bf16Table();
    case Isa::kAvx512:
      return &Avx512Table();
    case Isa::kAvx2:
      return &Avx2Table();
#endif
    case Isa::kGeneric:
      return &GenericTable();
    default:
      return nullptr;
  }
}

}  // namespace specbed::gemv
