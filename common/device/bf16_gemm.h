// GEMM with bfloat16 inputs and fp32 accumulation on the CPU, for mixed
// precision (JobSpec.precision.compute "bf16"): C = alpha op(A) op(B) +
// beta C with A and B rounded to bfloat16 (to nearest, ties to even), every
// product and sum in fp32, C in fp32.
//
// With AVX512-BF16 (checked at run time) A and B are packed as bf16 pairs
// along k and multiplied by vdpbf16ps, 8 rows x 32 columns of C at a time,
// bands of rows on the pool's threads. Without it the rounded values go
// through the fp32 GEMM (the same products, exact in fp32; sums in another
// order). Debian's OpenBLAS is built without its sbgemm, so this is
// Aqueduct's own kernel.
//
// Thread-safety: as the pool's Run (one caller at a time); the packing
// buffers are per thread and kept between calls.
#ifndef AQUEDUCT_COMMON_DEVICE_BF16_GEMM_H_
#define AQUEDUCT_COMMON_DEVICE_BF16_GEMM_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "common/device/bf16.h"
#include "common/device/parallel_pool.h"

namespace aqueduct {

// Whether this CPU multiplies bf16 pairs (AVX512-BF16).
bool CpuHasBf16();

// The fp32 GEMM the fallback calls (row-major, as cblas_sgemm).
using Fp32Gemm = absl::FunctionRef<void(
    bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
    const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
    float* c, int64_t ldc)>;

// Row-major C (m x n, ldc) = alpha op(A) op(B) + beta C in bf16 x bf16 ->
// fp32, on `pool` (nullptr: the calling thread alone).
void Bf16Gemm(ParallelPool* pool, bool trans_a, bool trans_b, int64_t m,
              int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
              Fp32Gemm fallback);

// The path without AVX512-BF16 (what Bf16Gemm runs on such a CPU), for
// tests on any CPU.
void Bf16GemmRounded(bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, float alpha, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc, Fp32Gemm fallback);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_BF16_GEMM_H_
