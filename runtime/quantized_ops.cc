#include "runtime/quantized_ops.h"

#include <Eigen/Core>

#include <cmath>
#include <vector>

#include "formats/error.h"
#include "runtime/cpu_ops.h"

namespace ssdq {
namespace {

using RowMatrixI = Eigen::Matrix<int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void quantize_rows(const float* x, int64_t rows, int64_t cols, float scale, std::vector<int8_t>& q) {
  q.resize(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) q[i] = quantize_value(x[i], scale, QuantBits::kInt8);
}

}  // namespace

void apply_activation_format(const ActQuant& format, float* data, int64_t rows, int64_t width, int64_t stride) {
  switch (format.format) {
    case ActFormat::kFloat32:
      return;
    case ActFormat::kFloat16:
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < width; ++c) data[r * stride + c] = round_to_fp16(data[r * stride + c]);
      return;
    case ActFormat::kInt8: {
      std::vector<float> scales(width);
      for (int64_t c = 0; c < width; ++c) scales[c] = format.scale(c);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < width; ++c) {
          float& v = data[r * stride + c];
          v = dequantize_value(quantize_value(v, scales[c], QuantBits::kInt8), scales[c]);
        }
      return;
    }
  }
}

void apply_state_format(const ActQuant& format, float* state, int64_t channels, int64_t inner) {
  if (format.format != ActFormat::kInt8) {
    apply_activation_format(format, state, channels, inner, inner);
    return;
  }
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t n = 0; n < inner; ++n) {
      const float scale = format.scale(c, format.inner == 1 ? 0 : n);
      float& v = state[c * inner + n];
      v = dequantize_value(quantize_value(v, scale, QuantBits::kInt8), scale);
    }
}

void gemm_s8s8_s32(const int8_t* a, int64_t lda, const int8_t* b, int64_t ldb, int32_t* c, int64_t m, int64_t k,
                   int64_t n) {
  // Each block of at most kExactK columns is multiplied in fp32: every product and partial sum is
  // an integer below 127²·1040 < 2^24, which fp32 holds exactly in any summation order, so the
  // block results are exact integers; the blocks are then added in int32.
  constexpr int64_t kExactK = 1024;
  Eigen::Map<RowMatrixI> C(c, m, n);
  C.setZero();
  RowMatrixF A, B, block;
  for (int64_t k0 = 0; k0 < k; k0 += kExactK) {
    const int64_t width = std::min(kExactK, k - k0);
    A.resize(m, width);
    B.resize(n, width);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < width; ++j) A(i, j) = a[i * lda + k0 + j];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < width; ++j) B(i, j) = b[i * ldb + k0 + j];
    block.noalias() = A * B.transpose();
    C += block.cast<int32_t>();
  }
}

void linear_forward(const WeightMatrix& w, const ActQuant& input, const float* x, int64_t rows, float* y,
                    Communicator* across) {
  const int64_t K = w.cols, Nout = w.rows;
  if (input.is_int8() && w.is_quantized()) {
    if (!input.per_tensor()) fail("internal: an integer GEMM input needs one scale");
    const float s_x = input.scales[0];
    std::vector<int8_t> qx;
    quantize_rows(x, rows, K, s_x, qx);
    const QuantizedMatrix& qw = w.quantized;
    const int64_t groups = qw.groups_per_row();
    // A rank's int32 products are summed across the ranks before scaling only where a row's scale is
    // the same on every rank (per channel or per tensor); int4 groups carry each rank's own scales,
    // so their scaled fp32 outputs are summed (even where the rank holds one group a row).
    const bool sum_integers = across && qw.granularity != Granularity::kPerGroup;
    std::vector<int32_t> acc(rows * Nout);
    Eigen::Map<RowMatrixF> Y(y, rows, Nout);
    Y.setZero();
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t k0 = g * qw.group_size, width = std::min(qw.group_size, K - k0);
      gemm_s8s8_s32(qx.data() + k0, K, qw.values.data() + k0, K, acc.data(), rows, width, Nout);
      if (sum_integers) across->all_reduce_sum(acc.data(), rows * Nout);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t n = 0; n < Nout; ++n)
          y[r * Nout + n] = std::fma(static_cast<float>(acc[r * Nout + n]), qw.scales[n * groups + g], y[r * Nout + n]);
    }
    if (across && !sum_integers) across->all_reduce_sum(y, rows * Nout);
    for (int64_t i = 0; i < rows * Nout; ++i) y[i] *= s_x;
    return;
  }
  if (w.is_quantized()) {
    const std::vector<float> dense = w.to_float();
    cpu::matmul_wt(x, dense.data(), y, rows, K, Nout);
  } else {
    cpu::matmul_wt(x, w.dense.data(), y, rows, K, Nout);
  }
  if (across) across->all_reduce_sum(y, rows * Nout);
}

}  // namespace ssdq
