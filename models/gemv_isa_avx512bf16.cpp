// The GEMV kernels (models/gemv_kernels.inc) compiled for x86-64-v4 + AVX512_BF16 (vdpbf16ps for
// bfloat16 weights); gemv.cpp picks this table when the CPU has it. Flags: models/CMakeLists.txt.
// Checked by: tests/models/gemv_test.cpp.
#define SPECBED_GEMV_TABLE Avx512Bf16Table
#define SPECBED_GEMV_NAME "avx512bf16"
#include "models/gemv_kernels.inc"
