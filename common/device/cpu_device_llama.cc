// CpuDevice's kernels of the LLaMA block: RMSNorm, rotary embeddings and
// SwiGLU. Each result is independent of the thread count (rows, elements
// or bands of columns per thread, each summed in order).
#include <algorithm>
#include <cmath>

#include "common/device/cpu_device.h"
#include "common/device/cpu_math.h"

namespace aqueduct {

namespace {

// Columns per band of the column sums: enough work per band for a thread.
int64_t ColumnGrain(int64_t rows) {
  return std::max<int64_t>(16, 16384 / std::max<int64_t>(1, rows));
}

float Sigmoid(float x) { return 1.0f / (1.0f + ExpF(-x)); }

}  // namespace

void CpuDevice::RmsNorm(const float* x, const float* gamma, int64_t rows,
                        int64_t cols, float eps, float* y, float* rstd) {
  Rows(rows, cols, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      float sq = 0;
      for (int64_t c = 0; c < cols; ++c) sq += xr[c] * xr[c];
      const float rs = 1.0f / std::sqrt(sq / static_cast<float>(cols) + eps);
      for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * rs * gamma[c];
      rstd[r] = rs;
    }
  });
}

void CpuDevice::RmsNormBackward(const float* dy, const float* x,
                                const float* gamma, const float* rstd,
                                int64_t rows, int64_t cols, float* dx,
                                float* dgamma, bool accumulate) {
  // dx_c = rs * (g_c dy_c - x_c rs^2 mean(g dy x)); dgamma by bands of
  // columns, each summed over the rows in order.
  const float inv_cols = 1.0f / static_cast<float>(cols);
  if (dx != nullptr) {
    Rows(rows, cols, [=](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * cols;
        const float* dyr = dy + r * cols;
        const float rs = rstd[r];
        float dot = 0;
        for (int64_t c = 0; c < cols; ++c) dot += dyr[c] * gamma[c] * xr[c];
        const float k = dot * inv_cols * rs * rs;
        float* dxr = dx + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
          dxr[c] = rs * (dyr[c] * gamma[c] - xr[c] * k);
        }
      }
    });
  }
  pool_.For(cols, ColumnGrain(rows), 16, [=](int64_t c0, int64_t c1) {
    if (!accumulate) std::fill(dgamma + c0, dgamma + c1, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols;
      const float* dyr = dy + r * cols;
      const float rs = rstd[r];
      for (int64_t c = c0; c < c1; ++c) dgamma[c] += dyr[c] * (xr[c] * rs);
    }
  });
}

void CpuDevice::Rope(float* x, int64_t rows, int64_t positions, int64_t heads,
                     int64_t head_dim, const float* cos, const float* sin,
                     bool inverse) {
  const int64_t half = head_dim / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  Rows(rows, heads * head_dim, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t p = r % positions;
      const float* c = cos + p * half;
      const float* s = sin + p * half;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (r * heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half], si = sign * s[i];
          v[i] = a * c[i] - b * si;
          v[i + half] = b * c[i] + a * si;
        }
      }
    }
  });
}

void CpuDevice::SwiGlu(const float* gate, const float* up, float* out,
                       int64_t n) {
  Each(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      out[i] = gate[i] * Sigmoid(gate[i]) * up[i];
    }
  });
}

void CpuDevice::SwiGluBackward(const float* gate, const float* up,
                               const float* dout, float* dgate, float* dup,
                               int64_t n) {
  Each(n, [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float g = gate[i], sig = Sigmoid(g);
      const float silu = g * sig;
      dgate[i] = dout[i] * up[i] * (sig * (1.0f + g * (1.0f - sig)));
      dup[i] = dout[i] * silu;
    }
  });
}

}  // namespace aqueduct
