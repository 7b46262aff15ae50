#include "common/device/bf16_gemm.h"

#include <algorithm>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#define AQ_BF16_TARGET \
  __attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl")))
#endif

namespace aqueduct {

namespace {

constexpr int kRows = 8;   // Rows of C per micro-kernel call.
constexpr int kCols = 32;  // Columns (two vectors of 16).

// op(X)[i][j] of a row-major X with leading dimension ld.
inline float At(const float* x, int64_t ld, bool trans, int64_t i, int64_t j) {
  return trans ? x[j * ld + i] : x[i * ld + j];
}

// The fallback: A and B rounded to bf16, as floats, through `gemm`.
void RoundedGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float beta, float* c, int64_t ldc,
                 Fp32Gemm gemm) {
  thread_local std::vector<float> ra, rb;
  ra.resize(m * k);
  rb.resize(k * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      ra[i * k + p] = FromBf16(ToBf16(At(a, lda, trans_a, i, p)));
    }
  }
  for (int64_t p = 0; p < k; ++p) {
    for (int64_t j = 0; j < n; ++j) {
      rb[p * n + j] = FromBf16(ToBf16(At(b, ldb, trans_b, p, j)));
    }
  }
  gemm(false, false, m, n, k, alpha, ra.data(), k, rb.data(), n, beta, c, ldc);
}

#if defined(__x86_64__)

// B packed for the kernel: per block of 32 columns, per pair of k, 16
// (b[2p][j], b[2p+1][j]) pairs for each of the block's two vectors; k and
// n padded with zeros.
void PackB(bool trans_b, int64_t n, int64_t k, const float* b, int64_t ldb,
           std::vector<uint16_t>* out) {
  const int64_t pairs = (k + 1) / 2, blocks = (n + kCols - 1) / kCols;
  out->assign(blocks * pairs * kCols * 2, 0);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    uint16_t* dst = out->data() + blk * pairs * kCols * 2;
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t jj = 0; jj < kCols && blk * kCols + jj < n; ++jj) {
        const int64_t j = blk * kCols + jj;
        dst[(p / 2) * kCols * 2 + jj * 2 + p % 2] =
            ToBf16(At(b, ldb, trans_b, p, j));
      }
    }
  }
}

// Rows [i0, i1) of op(A) as bf16, each padded to an even k.
void PackA(bool trans_a, int64_t i0, int64_t i1, int64_t k, const float* a,
           int64_t lda, std::vector<uint16_t>* out) {
  const int64_t kk = (k + 1) / 2 * 2;
  out->assign((i1 - i0) * kk, 0);
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      (*out)[(i - i0) * kk + p] = ToBf16(At(a, lda, trans_a, i, p));
    }
  }
}

// C[R x 32] (columns beyond `cols` left alone) from R packed rows of A
// and one packed block of B.
template <int R>
AQ_BF16_TARGET void Kernel(int64_t pairs, const uint32_t* a, const uint16_t* b,
                           float alpha, float beta, float* c, int64_t ldc,
                           int cols) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512i b0 = _mm512_loadu_si512(b + p * kCols * 2);
    const __m512i b1 = _mm512_loadu_si512(b + p * kCols * 2 + 32);
    for (int r = 0; r < R; ++r) {
      const __m512i x = _mm512_set1_epi32(static_cast<int>(a[r * pairs + p]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)x, (__m512bh)b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)x, (__m512bh)b1);
    }
  }
  const __mmask16 m0 = cols >= 16 ? 0xffff : (1u << cols) - 1;
  const __mmask16 m1 =
      cols >= 32 ? 0xffff : (cols <= 16 ? 0 : (1u << (cols - 16)) - 1);
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int r = 0; r < R; ++r) {
    float* row = c + r * ldc;
    const __mmask16 masks[2] = {m0, m1};
    for (int h = 0; h < 2; ++h) {
      __m512 v = _mm512_mul_ps(acc[r][h], va);
      if (beta != 0) {
        v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(masks[h], row + 16 * h),
                            v);
      }
      _mm512_mask_storeu_ps(row + 16 * h, masks[h], v);
    }
  }
}

// Rows [i0, i1) of C against the packed B.
void Band(bool trans_a, int64_t i0, int64_t i1, int64_t n, int64_t k,
          float alpha, const float* a, int64_t lda, const uint16_t* packed_b,
          float beta, float* c, int64_t ldc) {
  thread_local std::vector<uint16_t> packed_a;
  PackA(trans_a, i0, i1, k, a, lda, &packed_a);
  const int64_t pairs = (k + 1) / 2;
  const auto* rows_a = reinterpret_cast<const uint32_t*>(packed_a.data());
  for (int64_t blk = 0; blk * kCols < n; ++blk) {
    const uint16_t* block = packed_b + blk * pairs * kCols * 2;
    const int cols =
        static_cast<int>(std::min<int64_t>(kCols, n - blk * kCols));
    int64_t i = i0;
    for (; i + kRows <= i1; i += kRows) {
      Kernel<kRows>(pairs, rows_a + (i - i0) * pairs, block, alpha, beta,
                    c + i * ldc + blk * kCols, ldc, cols);
    }
    for (; i < i1; ++i) {
      Kernel<1>(pairs, rows_a + (i - i0) * pairs, block, alpha, beta,
                c + i * ldc + blk * kCols, ldc, cols);
    }
  }
}

#endif  // defined(__x86_64__)

}  // namespace

void Bf16GemmRounded(bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, float alpha, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc, Fp32Gemm fallback) {
  RoundedGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
              fallback);
}

bool CpuHasBf16() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512bf16") &&
                          __builtin_cpu_supports("avx512bw");
  return has;
#else
  return false;
#endif
}

void Bf16Gemm(ParallelPool* pool, bool trans_a, bool trans_b, int64_t m,
              int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
              Fp32Gemm fallback) {
  if (m == 0 || n == 0) return;
  if (k == 0 || !CpuHasBf16()) {
    RoundedGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                fallback);
    return;
  }
#if defined(__x86_64__)
  thread_local std::vector<uint16_t> packed_b;
  PackB(trans_b, n, k, b, ldb, &packed_b);
  const uint16_t* pb = packed_b.data();
  auto band = [&](int64_t i0, int64_t i1) {
    Band(trans_a, i0, i1, n, k, alpha, a, lda, pb, beta, c, ldc);
  };
  const int64_t grain = std::max<int64_t>(kRows, (int64_t{1} << 18) / (n * k));
  if (pool == nullptr) {
    band(0, m);
  } else {
    pool->For(m, grain, kRows, band);
  }
#endif
}

}  // namespace aqueduct
