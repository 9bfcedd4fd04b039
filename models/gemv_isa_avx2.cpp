// The GEMV kernels (models/gemv_kernels.inc) compiled for x86-64-v3 (AVX2, FMA, F16C);
// gemv.cpp picks this table when the CPU has it. Flags: models/CMakeLists.txt.
// Checked by: tests/models/gemv_test.cpp.
#define SPECBED_GEMV_TABLE Avx2Table
#define SPECBED_GEMV_NAME "x86-64-v3"
#include "models/gemv_kernels.inc"
