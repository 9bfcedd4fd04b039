// The GEMV kernels (models/gemv_kernels.inc) compiled for x86-64-v4 (AVX-512 F/BW/DQ/VL);
// gemv.cpp picks this table when the CPU has it. Flags: models/CMakeLists.txt.
// Checked by: tests/models/gemv_test.cpp.
#define SPECBED_GEMV_TABLE Avx512Table
#define SPECBED_GEMV_NAME "x86-64-v4"
#include "models/gemv_kernels.inc"
