// GPTQ: the Hessian accumulator, agreement with RTN when the Hessian is diagonal, dead columns,
// option checks, and lower output error than RTN on a real layer (in_proj of layer 0 of the
// bundled model, inputs from 512 real WikiText-2 tokens).
#include "quant/gptq.h"
#include "runtime/parallel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "formats/checkpoint.h"
#include "formats/error.h"
#include "formats/safetensors.h"
#include "model/checkpoint_weights.h"
#include "runtime/cpu_ops.h"
#include "tests/support/test_models.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;

std::vector<float> random_values(int64_t count, uint32_t seed) { return testing_models::random_normals(count, seed); }

// H of `samples` random normal input rows of `cols` values.
std::vector<double> hessian_of_random_inputs(int64_t cols, int64_t samples, uint32_t seed) {
  HessianAccumulator acc(cols);
  acc.add_rows(random_values(samples * cols, seed).data(), samples);
  return acc.hessian();
}

std::vector<double> identity(int64_t n) {
  std::vector<double> h(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i) h[i * n + i] = 1.0;
  return h;
}

TEST(HessianAccumulator, IsTwiceTheMeanOuterProduct) {
  const int64_t dim = 5, first = 7, second = 300;  // the second batch crosses the internal chunking
  const std::vector<float> x = random_values((first + second) * dim, 1);
  HessianAccumulator acc(dim);
  acc.add_rows(x.data(), first);
  acc.add_rows(x.data() + first * dim, second);
  EXPECT_EQ(acc.samples(), first + second);
  const std::vector<double> h = acc.hessian();
  for (int64_t i = 0; i < dim; ++i)
    for (int64_t j = 0; j < dim; ++j) {
      double expected = 0;
      for (int64_t r = 0; r < first + second; ++r) expected += double(x[r * dim + i]) * x[r * dim + j];
      expected *= 2.0 / (first + second);
      EXPECT_NEAR(h[i * dim + j], expected, 1e-12 * std::abs(expected) + 1e-12) << i << "," << j;
    }
}

TEST(HessianAccumulator, RejectsBadInput) {
  HessianAccumulator acc(3);
  EXPECT_THAT([&] { acc.hessian(); }, ::testing::ThrowsMessage<Error>(HasSubstr("no input rows were added")));
  const std::vector<float> x = {1, 2, 3, 4, INFINITY, 6};
  EXPECT_THAT([&] { acc.add_rows(x.data(), 2); },
              ::testing::ThrowsMessage<Error>(HasSubstr("non-finite value inf at row 1, column 1")));
  EXPECT_THAT([] { HessianAccumulator bad(0); }, ::testing::ThrowsMessage<Error>(HasSubstr("dimension 0")));
}

// With a diagonal Hessian no error is fed forward, so GPTQ must equal RTN in the same layout.
TEST(Gptq, DiagonalHessianGivesRtn) {
  const int64_t rows = 8, cols = 300;  // groups of 128, 128 and 44
  const std::vector<float> w = random_values(rows * cols, 2);
  GptqOptions o;
  const QuantizedMatrix grouped = gptq_quantize(w.data(), rows, cols, identity(cols), o);
  const QuantizedMatrix rtn_grouped = quantize_per_group(w.data(), rows, cols, QuantBits::kInt4, 128);
  EXPECT_EQ(grouped.granularity, Granularity::kPerGroup);
  EXPECT_EQ(grouped.group_size, 128);
  EXPECT_EQ(grouped.scales, rtn_grouped.scales);
  EXPECT_EQ(grouped.values, rtn_grouped.values);

  // Act-order with a diagonal of distinct values: a real permutation, undone in the output.
  std::vector<double> diagonal = identity(cols);
  for (int64_t i = 0; i < cols; ++i) diagonal[i * cols + i] = 1.0 + (i * 37 % 101);
  o.act_order = o.static_groups = true;
  const QuantizedMatrix act_order = gptq_quantize(w.data(), rows, cols, diagonal, o);
  EXPECT_EQ(act_order.scales, rtn_grouped.scales);
  EXPECT_EQ(act_order.values, rtn_grouped.values);

  o = GptqOptions{};
  o.bits = QuantBits::kInt8;
  o.group_size = 0;
  const QuantizedMatrix channel = gptq_quantize(w.data(), rows, cols, identity(cols), o);
  const QuantizedMatrix rtn_channel = quantize_per_channel(w.data(), rows, cols, QuantBits::kInt8);
  EXPECT_EQ(channel.granularity, Granularity::kPerChannel);
  EXPECT_EQ(channel.scales, rtn_channel.scales);
  EXPECT_EQ(channel.values, rtn_channel.values);
}

// The textbook column-by-column form (Frantar et al., eq. 2-3; OBQ updates of the full inverse
// Hessian in fp64) in `layout`'s groups; static: the scales of `layout`, dynamic: each group's
// scales from its updated columns when it is reached. GPTQ's Cholesky form with lazy batches must
// make the same choices.
std::vector<int8_t> textbook_gptq(std::vector<double> w, int64_t rows, int64_t cols, std::vector<double> h,
                                  QuantizedMatrix layout, bool dynamic) {
  double mean_diagonal = 0;
  for (int64_t i = 0; i < cols; ++i) mean_diagonal += h[i * cols + i] / cols;
  for (int64_t i = 0; i < cols; ++i) h[i * cols + i] += 0.01 * mean_diagonal;
  // Gauss-Jordan inverse (small, well conditioned).
  std::vector<double> inv = identity(cols);
  for (int64_t p = 0; p < cols; ++p) {
    const double pivot = h[p * cols + p];
    for (int64_t k = 0; k < cols; ++k) {
      h[p * cols + k] /= pivot;
      inv[p * cols + k] /= pivot;
    }
    for (int64_t r = 0; r < cols; ++r) {
      if (r == p) continue;
      const double f = h[r * cols + p];
      for (int64_t k = 0; k < cols; ++k) {
        h[r * cols + k] -= f * h[p * cols + k];
        inv[r * cols + k] -= f * inv[p * cols + k];
      }
    }
  }
  std::vector<int8_t> values(rows * cols);
  for (int64_t j = 0; j < cols; ++j) {
    const double d = inv[j * cols + j];
    if (dynamic && j % layout.group_size == 0)
      for (int64_t r = 0; r < rows; ++r) {
        float absmax = 0;
        for (int64_t k = j; k < std::min(cols, j + layout.group_size); ++k)
          absmax = std::max(absmax, std::abs(static_cast<float>(w[r * cols + k])));
        layout.scales[layout.scale_index(r, j)] = scale_from_absmax(absmax, layout.bits);
      }
    for (int64_t r = 0; r < rows; ++r) {
      const float scale = layout.scales[layout.scale_index(r, j)];
      const int8_t q = quantize_value(static_cast<float>(w[r * cols + j]), scale, layout.bits);
      values[r * cols + j] = q;
      const double err = (w[r * cols + j] - double(q) * scale) / d;
      for (int64_t k = j + 1; k < cols; ++k) w[r * cols + k] -= err * inv[j * cols + k];
    }
    for (int64_t a = j + 1; a < cols; ++a)
      for (int64_t b = j + 1; b < cols; ++b) inv[a * cols + b] -= inv[a * cols + j] * inv[j * cols + b] / d;
  }
  return values;
}

TEST(Gptq, MatchesTheTextbookColumnByColumnForm) {
  const int64_t rows = 16, cols = 48, samples = 400;
  // Correlated inputs, so that the error feedback matters.
  const std::vector<float> z = random_values(samples * cols, 6), mix = random_values(cols * cols, 7);
  std::vector<float> x(samples * cols, 0.0f);
  for (int64_t s = 0; s < samples; ++s)
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t k = 0; k < cols; ++k) x[s * cols + i] += z[s * cols + k] * mix[k * cols + i] * (k == i ? 3.0f : 0.3f);
  HessianAccumulator acc(cols);
  acc.add_rows(x.data(), samples);
  const std::vector<double> hessian = acc.hessian();
  const std::vector<float> w = random_values(rows * cols, 8);
  const QuantizedMatrix rtn = quantize_per_group(w.data(), rows, cols, QuantBits::kInt4, 16);
  struct Case {
    bool static_groups;
    int64_t block_size;
  };
  for (const Case c : {Case{true, 1}, Case{true, 5}, Case{true, 128}, Case{false, 16}, Case{false, 32}}) {
    GptqOptions o;
    o.group_size = 16;
    o.static_groups = c.static_groups;
    o.block_size = c.block_size;
    const QuantizedMatrix q = gptq_quantize(w.data(), rows, cols, hessian, o);
    const std::vector<int8_t> expected =
        textbook_gptq(std::vector<double>(w.begin(), w.end()), rows, cols, hessian, rtn, !c.static_groups);
    int64_t same = 0, changed_from_rtn = 0;
    for (int64_t i = 0; i < rows * cols; ++i) {
      same += q.values[i] == expected[i];
      changed_from_rtn += q.values[i] != rtn.values[i];
    }
    if (c.static_groups) {
      EXPECT_EQ(q.scales, rtn.scales);  // the original weight's scales
    }
    // fp32 updates against fp64 may flip a value sitting on a rounding boundary, rarely.
    EXPECT_GE(same, rows * cols - 2) << "static " << c.static_groups << ", block size " << c.block_size;
    EXPECT_GT(changed_from_rtn, rows * cols / 10) << "static " << c.static_groups << ", block size " << c.block_size;
  }
}

TEST(Gptq, DeadInputColumnsQuantizeToZero) {
  const int64_t rows = 6, cols = 40, samples = 200;
  std::vector<float> x = random_values(samples * cols, 3);
  for (int64_t r = 0; r < samples; ++r) x[r * cols + 5] = x[r * cols + 31] = 0.0f;
  HessianAccumulator acc(cols);
  acc.add_rows(x.data(), samples);
  const std::vector<float> w = random_values(rows * cols, 4);
  GptqOptions o;
  o.group_size = 16;
  o.block_size = 32;
  const QuantizedMatrix q = gptq_quantize(w.data(), rows, cols, acc.hessian(), o);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(q.values[r * cols + 5], 0);
    EXPECT_EQ(q.values[r * cols + 31], 0);
  }
  EXPECT_EQ(q.scales.size(), static_cast<size_t>(rows * 3));  // groups of 16, 16 and 8
  for (int8_t v : q.values) {
    ASSERT_GE(v, -8);
    ASSERT_LE(v, 7);
  }
}

TEST(Gptq, RejectsBadOptionsAndInputs) {
  const int64_t rows = 2, cols = 8;
  const std::vector<float> w = random_values(rows * cols, 5);
  GptqOptions o;
  o.group_size = 4;
  o.act_order = true;
  EXPECT_THAT([&] { gptq_quantize(w.data(), rows, cols, identity(cols), o); },
              ::testing::ThrowsMessage<Error>(HasSubstr("act-order with groups needs static groups")));
  o = GptqOptions{};
  o.group_size = 3;
  o.block_size = 4;
  EXPECT_THAT([&] { gptq_quantize(w.data(), rows, cols, identity(cols), o); },
              ::testing::ThrowsMessage<Error>(HasSubstr("block size 4 must be a multiple of group size 3")));
  o = GptqOptions{};
  EXPECT_THAT([&] { gptq_quantize(w.data(), rows, cols, identity(cols - 1), o); },
              ::testing::ThrowsMessage<Error>(HasSubstr("Hessian has 49 values, expected 8² = 64")));
  std::vector<double> h = identity(cols);
  h[9] = NAN;
  EXPECT_THAT([&] { gptq_quantize(w.data(), rows, cols, h, o); },
              ::testing::ThrowsMessage<Error>(HasSubstr("Hessian entry (1, 1) is nan")));
  h = identity(cols);
  h[0] = -5;  // not positive definite
  EXPECT_THAT([&] { gptq_quantize(w.data(), rows, cols, h, o); },
              ::testing::ThrowsMessage<Error>(HasSubstr("not positive definite")));
}

// ‖X·Wᵀ − X·Ŵᵀ‖_F / ‖X·Wᵀ‖_F.
double output_error(const std::vector<float>& x, int64_t samples, const std::vector<float>& w,
                    const std::vector<float>& w_hat, int64_t rows, int64_t cols) {
  std::vector<float> ref(samples * rows), out(samples * rows);
  cpu::matmul_wt(x.data(), w.data(), ref.data(), samples, cols, rows);
  cpu::matmul_wt(x.data(), w_hat.data(), out.data(), samples, cols, rows);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    norm += double(ref[i]) * ref[i];
  }
  return std::sqrt(diff / norm);
}

TEST(Gptq, BeatsRtnOnARealLayer) {
  const ModelWeights weights = load_fp32_weights(load_checkpoint("examples/mamba2-tiny"));
  const SafetensorsFile golden = read_safetensors("tests/fixtures/golden/golden-wikitext2-first512.safetensors");
  const Tensor& tokens = golden.tensors.at("tokens");
  const int64_t D = weights.config.d_model, rows = weights.config.d_in_proj(), samples = tokens.numel();
  ASSERT_EQ(samples, 512);
  // in_proj's input in layer 0: rmsnorm(embedding row) · γ.
  std::vector<float> residual(samples * D), x(samples * D);
  for (int64_t t = 0; t < samples; ++t)
    std::copy_n(weights.embedding.begin() + tokens.as<int32_t>()[t] * D, D, residual.begin() + t * D);
  cpu::rmsnorm(residual.data(), weights.layers[0].norm.data(), x.data(), samples, D,
               static_cast<float>(weights.config.norm_eps));
  const std::vector<float>& w = weights.layers[0].in_proj;
  // Calibrate on the first 384 tokens; the last 128 are held out.
  const int64_t calibration = 384, held_out = samples - calibration;
  HessianAccumulator acc(D);
  acc.add_rows(x.data(), calibration);
  const std::vector<double> hessian = acc.hessian();
  const std::vector<float> x_cal(x.begin(), x.begin() + calibration * D), x_held(x.begin() + calibration * D, x.end());

  struct Case {
    const char* name;
    GptqOptions options;
    QuantizedMatrix rtn;
  };
  GptqOptions int4, int4_act_order, int8;
  int4_act_order.act_order = int4_act_order.static_groups = true;
  int8.bits = QuantBits::kInt8;
  int8.group_size = 0;
  const Case cases[] = {
      {"int4 g128", int4, quantize_per_group(w.data(), rows, D, QuantBits::kInt4, 128)},
      {"int4 g128 act-order", int4_act_order, quantize_per_group(w.data(), rows, D, QuantBits::kInt4, 128)},
      {"int8 per-channel", int8, quantize_per_channel(w.data(), rows, D, QuantBits::kInt8)},
  };
  for (const Case& c : cases) {
    const QuantizedMatrix q = gptq_quantize(w.data(), rows, D, hessian, c.options);
    EXPECT_EQ(q.scales.size(), c.rtn.scales.size()) << c.name;
    const std::vector<float> w_gptq = dequantize(q), w_rtn = dequantize(c.rtn);
    const double gptq_cal = output_error(x_cal, calibration, w, w_gptq, rows, D);
    const double rtn_cal = output_error(x_cal, calibration, w, w_rtn, rows, D);
    const double gptq_held = output_error(x_held, held_out, w, w_gptq, rows, D);
    const double rtn_held = output_error(x_held, held_out, w, w_rtn, rows, D);
    std::printf("%-20s relative output error: calibration GPTQ %.5f vs RTN %.5f; held-out GPTQ %.5f vs RTN %.5f\n",
                c.name, gptq_cal, rtn_cal, gptq_held, rtn_held);
    EXPECT_LT(gptq_cal, rtn_cal) << c.name;
    EXPECT_LT(gptq_held, rtn_held) << c.name;
  }
}

}  // namespace
}  // namespace ssdq

namespace ssdq {
namespace {

// Slices of rows and of U's columns on several threads give the bits of one thread, for every
// scale mode (a shape with a short last slice both ways).
TEST(Gptq, ThreadsDoNotChangeTheResult) {
  const int64_t rows = 200, cols = 150, samples = 400;
  const std::vector<double> hessian = hessian_of_random_inputs(cols, samples, 21);
  const std::vector<float> w = random_values(rows * cols, 22);
  struct Case {
    int64_t group_size;
    bool act_order;
  };
  for (const Case c : {Case{0, false}, Case{32, false}, Case{32, true}}) {
    GptqOptions o;
    o.group_size = c.group_size;
    o.act_order = c.act_order;
    o.static_groups = c.act_order;
    o.block_size = 64;
    const QuantizedMatrix one = gptq_quantize(w.data(), rows, cols, hessian, o);
    const int threads = thread_count();
    set_thread_count(3);
    o.parallel_for = parallel_for;
    const QuantizedMatrix many = gptq_quantize(w.data(), rows, cols, hessian, o);
    set_thread_count(threads);
    EXPECT_EQ(one.values, many.values) << "groups " << c.group_size << ", act-order " << c.act_order;
    EXPECT_EQ(one.scales, many.scales) << "groups " << c.group_size << ", act-order " << c.act_order;
  }
}

// An inverse factor computed elsewhere (as the GPU's is: L⁻¹ of J·H·J, column-major) and turned into
// U by reversed_matrix / factor_from_reversed_inverse gives the host's U: the same codes but for
// the few a last-bit difference rounds the other way; a size that is not a whole number of tiles.
TEST(Gptq, InverseFactorFromItsPiecesMatchesTheHost) {
  using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;
  using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t rows = 120, cols = 150, samples = 600;
  const std::vector<double> hessian = hessian_of_random_inputs(cols, samples, 31);
  const std::vector<float> w = random_values(rows * cols, 32);
  GptqOptions o;
  o.group_size = 32;
  const QuantizedMatrix host = gptq_quantize(w.data(), rows, cols, hessian, o);
  o.inverse_factor = [](const std::vector<double>& h, int64_t n, std::vector<float>& u) {
    const std::vector<double> reversed = reversed_matrix(h, n);
    EXPECT_EQ(reversed[0], h[n * n - 1]);
    EXPECT_EQ(reversed[1], h[n * n - 2]);
    const Eigen::LLT<MatrixD> llt(Eigen::Map<const RowMajorD>(reversed.data(), n, n));
    if (llt.info() != Eigen::Success) return false;
    const MatrixD l_inverse = MatrixD(llt.matrixL()).triangularView<Eigen::Lower>().solve(MatrixD::Identity(n, n));
    u = factor_from_reversed_inverse(std::vector<double>(l_inverse.data(), l_inverse.data() + n * n), n);
    for (int64_t i = 1; i < n; ++i) EXPECT_EQ(u[i * n + i - 1], 0.0f);  // upper triangular
    return true;
  };
  const QuantizedMatrix pieces = gptq_quantize(w.data(), rows, cols, hessian, o);
  int64_t differ = 0;
  for (size_t i = 0; i < host.values.size(); ++i) differ += host.values[i] != pieces.values[i];
  EXPECT_LE(differ, static_cast<int64_t>(host.values.size() / 1000));
  EXPECT_EQ(host.scales, pieces.scales);
}

// The device row pass's algorithm (kernels/gptq_rows.cu) written plainly on the host: a row at a
// time through each block of columns, the lazy update after each block as a plain triple loop.
// What the job hands it (processing order, column groups, dynamic or given scales) must give the
// host's codes, but for near-ties the different summation order rounds the other way.
void plain_row_pass(const GptqRowPassJob& job) {
  const int64_t R = job.rows, C = job.cols;
  std::vector<float> w(job.weight, job.weight + R * C), errors(R * job.block_size);
  const float qmin = static_cast<float>(quant_min(job.bits)), qmax = static_cast<float>(quant_max(job.bits));
  for (int64_t i1 = 0; i1 < C; i1 += job.block_size) {
    const int64_t count = std::min(job.block_size, C - i1);
    for (int64_t r = 0; r < R; ++r) {
      float* row = w.data() + r * C;
      for (int64_t k = i1; k < i1 + count; ++k) {
        float& scale = job.scales[r * job.groups + job.column_group[k]];
        if (job.dynamic_scales && k % job.group_size == 0) {
          float absmax = 0;
          for (int64_t j = k; j < std::min(C, k + job.group_size); ++j) absmax = std::max(absmax, std::abs(row[j]));
          scale = scale_from_absmax(absmax, job.bits);
        }
        const float code = std::clamp(std::nearbyint(row[k] / scale), qmin, qmax);
        job.values[r * C + k] = static_cast<int8_t>(code);
        const float err = (row[k] - code * scale) / job.u[k * C + k];
        for (int64_t j = k + 1; j < i1 + count; ++j) row[j] -= err * job.u[k * C + j];
        errors[r * job.block_size + (k - i1)] = err;
      }
    }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = i1 + count; j < C; ++j) {
        float sum = 0;
        for (int64_t k = 0; k < count; ++k) sum += errors[r * job.block_size + k] * job.u[(i1 + k) * C + j];
        w[r * C + j] -= sum;
      }
  }
}

// GptqOptions::row_pass: a pass elsewhere gets the permuted problem and its codes come back in the
// natural column order, with the scales in their natural groups: per channel, dynamic groups,
// act-order with static groups, a last block and a last group shorter than the others.
TEST(Gptq, RowPassElsewhereMatchesTheHost) {
  const int64_t rows = 70, cols = 150, samples = 600;
  const std::vector<double> hessian = hessian_of_random_inputs(cols, samples, 41);
  const std::vector<float> w = random_values(rows * cols, 42);
  struct Case {
    QuantBits bits;
    int64_t group_size;
    bool act_order;
  };
  for (const Case c : {Case{QuantBits::kInt8, 0, false}, Case{QuantBits::kInt4, 32, false},
                       Case{QuantBits::kInt4, 32, true}, Case{QuantBits::kInt4, 0, true}}) {
    SCOPED_TRACE(::testing::Message() << "group " << c.group_size << ", act-order " << c.act_order);
    GptqOptions o;
    o.bits = c.bits;
    o.group_size = c.group_size;
    o.act_order = c.act_order;
    o.static_groups = c.act_order;
    o.block_size = 64;
    const QuantizedMatrix host = gptq_quantize(w.data(), rows, cols, hessian, o);
    int64_t calls = 0;
    o.row_pass = [&](const GptqRowPassJob& job) {
      ++calls;
      EXPECT_EQ(job.dynamic_scales, c.group_size > 0 && !c.act_order);
      plain_row_pass(job);
    };
    const QuantizedMatrix elsewhere = gptq_quantize(w.data(), rows, cols, hessian, o);
    EXPECT_EQ(calls, 1);
    int64_t differ = 0;
    for (size_t i = 0; i < host.values.size(); ++i) {
      differ += host.values[i] != elsewhere.values[i];
      ASSERT_LE(std::abs(host.values[i] - elsewhere.values[i]), 1) << i;
    }
    EXPECT_LE(differ, static_cast<int64_t>(host.values.size() / 1000));
    ASSERT_EQ(host.scales.size(), elsewhere.scales.size());
    for (size_t i = 0; i < host.scales.size(); ++i)
      EXPECT_NEAR(elsewhere.scales[i], host.scales[i], 1e-5 * host.scales[i]) << i;
  }
}

// GptqOptions::factored_row_pass gets the Hessian that inverse_factor gets and the job that
// row_pass gets (but for U, which it makes): with the same factor and row pass inside it, the
// codes and scales are those of the two callbacks, bit for bit, and neither of them is called.
TEST(Gptq, FactoredRowPassGetsWhatTheFactorAndTheRowPassGet) {
  const int64_t rows = 40, cols = 130, samples = 500;
  const std::vector<double> hessian = hessian_of_random_inputs(cols, samples, 51);
  const std::vector<float> w = random_values(rows * cols, 52);
  // U = J·L⁻¹·J with J·H·J = L·Lᵀ, as a device would make it (quant/gptq.h's pieces around an LLT).
  const auto factor = [](const std::vector<double>& h, int64_t n, std::vector<float>& u) {
    const std::vector<double> reversed = reversed_matrix(h, n);
    const Eigen::LLT<Eigen::MatrixXd> llt(Eigen::Map<const Eigen::MatrixXd>(reversed.data(), n, n));
    if (llt.info() != Eigen::Success) return false;
    const Eigen::MatrixXd l_inverse = llt.matrixL().solve(Eigen::MatrixXd::Identity(n, n));
    u = factor_from_reversed_inverse(std::vector<double>(l_inverse.data(), l_inverse.data() + n * n), n);
    return true;
  };
  for (const bool act_order : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "act-order " << act_order);
    GptqOptions o;
    o.bits = QuantBits::kInt4;
    o.group_size = 32;
    o.act_order = act_order;
    o.static_groups = act_order;
    o.block_size = 64;
    std::vector<double> factored_h;
    o.inverse_factor = [&](const std::vector<double>& h, int64_t n, std::vector<float>& u) {
      factored_h = h;
      return factor(h, n, u);
    };
    o.row_pass = plain_row_pass;
    const QuantizedMatrix two_calls = gptq_quantize(w.data(), rows, cols, hessian, o);

    int64_t calls = 0;
    o.factored_row_pass = [&](const std::vector<double>& h, const GptqRowPassJob& job) {
      ++calls;
      EXPECT_EQ(job.u, nullptr);
      EXPECT_EQ(h, factored_h);
      std::vector<float> u;
      if (!factor(h, job.cols, u)) return false;
      GptqRowPassJob with_u = job;
      with_u.u = u.data();
      plain_row_pass(with_u);
      return true;
    };
    o.inverse_factor = [](const std::vector<double>&, int64_t, std::vector<float>&) -> bool {
      ADD_FAILURE() << "inverse_factor called beside factored_row_pass";
      return false;
    };
    o.row_pass = [](const GptqRowPassJob&) { ADD_FAILURE() << "row_pass called beside factored_row_pass"; };
    const QuantizedMatrix one_call = gptq_quantize(w.data(), rows, cols, hessian, o);
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(one_call.values, two_calls.values);
    EXPECT_EQ(one_call.scales, two_calls.scales);
  }
  GptqOptions refusing;
  refusing.factored_row_pass = [](const std::vector<double>&, const GptqRowPassJob&) { return false; };
  EXPECT_THROW(gptq_quantize(w.data(), rows, cols, hessian, refusing), Error);
}

}  // namespace
}  // namespace ssdq
