// The W8A8 prefill projection: cuBLASLt's int8 GEMM (kernels/gemm.h, kS8) gives exactly the int32
// products of runtime/quantized_ops.h gemm_s8s8_s32, and the scaling epilogue (kernels/scale_int32.h)
// gives linear_forward's output bit for bit, with the mean-correction bias and the residual add.
// On sm_90, kernels/gemm_s8_scaled.h does both in one CUTLASS kernel, bit for bit the same.
// The W4A8 fallback (groups kernels/gemm_s8_grouped.h does not take): int4 weights unpacked to
// int8 on the device (kernels/weight_unpack.h), one int8 GEMM per weight group and the epilogue's
// chain across the groups — linear_forward again.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/gemm.h"
#include "kernels/gemm_s8_scaled.h"
#include "kernels/scale_int32.h"
#include "kernels/weight_unpack.h"
#include "model/quantizer.h"
#include "quant/weight_formats.h"
#include "runtime/quantized_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

struct Case {
  int m, n, k;
  bool bias_and_accumulate;
};

// One W8A8 projection: int8 rows (row stride k + 16), int8 weights, the CPU's int32 products and
// its linear_forward output (+ bias, added into a random residual with bias_and_accumulate).
struct Problem {
  explicit Problem(const Case& c) : c(c) {
    std::mt19937 rng(c.m + 3 * c.n + 7 * c.k);
    wm = rtn_weight(testing::random_vector(size_t(c.n) * c.k, -1.f, 1.f, rng), c.n, c.k, QuantBits::kInt8,
                    /*group_size=*/0);
    xq.assign(size_t(c.m) * ldx, 0);
    std::vector<float> x(size_t(c.m) * c.k);
    std::uniform_int_distribution<int> q_dist(-127, 127);
    for (int r = 0; r < c.m; ++r)
      for (int i = 0; i < c.k; ++i) {
        xq[r * ldx + i] = static_cast<int8_t>(q_dist(rng));
        x[r * c.k + i] = dequantize_value(xq[r * ldx + i], s_x);
      }
    acc.resize(size_t(c.m) * c.n);
    gemm_s8s8_s32(xq.data(), ldx, wm.quantized.values.data(), c.k, acc.data(), c.m, c.k, c.n);
    projected.resize(size_t(c.m) * c.n);
    linear_forward(wm, ActQuant{ActFormat::kInt8, {s_x}, {}, 1}, x.data(), c.m, projected.data());
    expected = projected;
    bias = testing::random_vector(c.n, -0.5f, 0.5f, rng);
    base = testing::random_vector(size_t(c.m) * c.n, -2.f, 2.f, rng);
    if (c.bias_and_accumulate)
      for (size_t i = 0; i < expected.size(); ++i) {
        float v = expected[i];
        v += bias[i % c.n];
        expected[i] = base[i] + v;
      }
  }
  // What the output buffer holds before the projection.
  std::vector<float> initial_out() const { return c.bias_and_accumulate ? base : std::vector<float>(expected.size(), 0.f); }

  Case c;
  int64_t ldx = c.k + 16;
  float s_x = 0.0291f;
  WeightMatrix wm;
  std::vector<int8_t> xq;
  std::vector<int32_t> acc;
  std::vector<float> projected, expected, bias, base;
};

void expect_bit_identical(const std::vector<float>& got, const std::vector<float>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &expected[i], sizeof(float)) != 0 && mismatches++ < 5)
      ADD_FAILURE() << "element " << i << ": GPU " << got[i] << " vs CPU " << expected[i];
  EXPECT_EQ(mismatches, 0);
}

class GemmS8 : public ::testing::TestWithParam<Case> {};

TEST_P(GemmS8, IntegerProductsAndScaledOutputMatchTheCpu) {
  testing::require_device();
  const Case c = GetParam();
  const Problem p(c);
  testing::DeviceBuffer<int8_t> d_x(p.xq), d_w(p.wm.quantized.values);
  testing::DeviceBuffer<int32_t> d_acc(std::vector<int32_t>(p.acc.size()));
  testing::DeviceBuffer<float> d_scales(p.wm.quantized.scales), d_bias(p.bias), d_out(p.initial_out());
  void* workspace = nullptr;
  ASSERT_EQ(cudaMalloc(&workspace, 32 << 20), cudaSuccess);
  {
    kernels::Gemm gemm(workspace, 32 << 20);
    kernels::GemmArgs g;
    g.m = c.m;
    g.n = c.n;
    g.k = c.k;
    g.in_type = kernels::ElementType::kS8;
    g.x = d_x.get();
    g.ldx = p.ldx;
    g.w = d_w.get();
    g.out = d_acc.get();
    g.ldout = c.n;
    g.out_type = kernels::ElementType::kS32;
    ASSERT_TRUE(kernels::Gemm::supported(g));
    gemm.run(g, nullptr);
    kernels::ScaleInt32Args s;
    s.m = c.m;
    s.n = c.n;
    s.acc = d_acc.get();
    s.ld_acc = c.n;
    s.w_scales = d_scales.get();
    s.x_scale = p.s_x;
    s.bias = c.bias_and_accumulate ? d_bias.get() : nullptr;
    s.out = d_out.get();
    s.ldout = c.n;
    s.accumulate = c.bias_and_accumulate;
    ASSERT_EQ(kernels::launch_scale_int32(s, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  cudaFree(workspace);
  EXPECT_EQ(d_acc.to_host(), p.acc);
  expect_bit_identical(d_out.to_host(), p.expected);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmS8,
                         ::testing::Values(Case{1, 64, 256, false}, Case{17, 300, 512, true}, Case{256, 1000, 2560, true},
                                           Case{2048, 512, 5120, true}, Case{100, 37, 4, false}));

// The fused kernel's arguments for problem p on device buffers (bias with bias_and_accumulate).
kernels::GemmS8ScaledArgs scaled_args(const Problem& p, const int8_t* x, const int8_t* w, const float* scales,
                                      const float* bias, void* out, int64_t ldout) {
  kernels::GemmS8ScaledArgs a;
  a.m = p.c.m;
  a.n = p.c.n;
  a.k = p.c.k;
  a.x = x;
  a.ldx = p.ldx;
  a.w = w;
  a.ldw = p.c.k;
  a.w_scales = scales;
  a.x_scale = p.s_x;
  a.bias = p.c.bias_and_accumulate ? bias : nullptr;
  a.out = out;
  a.ldout = ldout;
  return a;
}

// The fused kernel (kernels/gemm_s8_scaled.h) on the same problems: sm_90 devices only.
class GemmS8Scaled : public ::testing::TestWithParam<Case> {};

TEST_P(GemmS8Scaled, FusedEpilogueMatchesTheCpu) {
  testing::require_device();
  const Case c = GetParam();
  const Problem p(c);
  testing::DeviceBuffer<int8_t> d_x(p.xq), d_w(p.wm.quantized.values);
  testing::DeviceBuffer<float> d_scales(p.wm.quantized.scales), d_bias(p.bias), d_out(p.initial_out());
  kernels::GemmS8ScaledArgs a = scaled_args(p, d_x.get(), d_w.get(), d_scales.get(), d_bias.get(), d_out.get(), c.n);
  a.accumulate = c.bias_and_accumulate;
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major != 9 || prop.minor != 0) {
    EXPECT_FALSE(kernels::gemm_s8_scaled_supported(a));
    GTEST_SKIP() << "sm_90a kernel; device is sm_" << prop.major << prop.minor;
  }
  // Both schedules where the output is overwritten; the cooperative one cannot accumulate.
  for (auto schedule : {kernels::GemmS8ScaledSchedule::kPingPong, kernels::GemmS8ScaledSchedule::kCooperative}) {
    a.schedule = schedule;
    const bool cooperative = schedule == kernels::GemmS8ScaledSchedule::kCooperative;
    if (cooperative && c.bias_and_accumulate) {
      EXPECT_FALSE(kernels::gemm_s8_scaled_supported(a));
      continue;
    }
    d_out.upload(p.initial_out());
    ASSERT_TRUE(kernels::gemm_s8_scaled_supported(a)) << (cooperative ? "cooperative" : "ping-pong");
    ASSERT_EQ(kernels::launch_gemm_s8_scaled(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    SCOPED_TRACE(cooperative ? "cooperative" : "ping-pong");
    expect_bit_identical(d_out.to_host(), p.expected);
  }
}

// Partial tiles in m, n and k; one row; out_proj's 2560 × 5120 with the residual add.
INSTANTIATE_TEST_SUITE_P(Shapes, GemmS8Scaled,
                         ::testing::Values(Case{1, 64, 256, false}, Case{17, 300, 512, true}, Case{256, 1000, 2560, true},
                                           Case{2048, 512, 5120, true}, Case{300, 1032, 4112, false},
                                           Case{5, 2560, 5120, true}, Case{129, 260, 48, false}));

// int8 output (in_proj's x|B|C in conv.in's format): the code of each projected value (+ bias)
// under its column's scale, quantize_value bit for bit; scales small enough that some saturate.
class GemmS8ScaledInt8Out : public ::testing::TestWithParam<Case> {};

TEST_P(GemmS8ScaledInt8Out, CodesMatchTheCpuQuantizer) {
  testing::require_device();
  const Case c = GetParam();
  const Problem p(c);
  std::mt19937 rng(c.m + c.n);
  std::vector<float> values(p.projected.size()), out_scales(c.n, 0.f);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = c.bias_and_accumulate ? p.projected[i] + p.bias[i % c.n] : p.projected[i];
    out_scales[i % c.n] = std::max(out_scales[i % c.n], std::abs(values[i]));
  }
  // Each column's largest |value| lands between 64 and 192 steps: the codes cover the range, some saturate.
  std::uniform_real_distribution<float> steps(64.f, 192.f);
  for (float& s : out_scales) s = std::max(s, 1e-3f) / steps(rng);
  std::vector<int8_t> expected(values.size());
  int64_t saturated = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    expected[i] = quantize_value(values[i], out_scales[i % c.n], QuantBits::kInt8);
    saturated += std::abs(expected[i]) == 127;
  }
  EXPECT_GT(saturated, 0);
  const int64_t ldout = c.n + 32;
  testing::DeviceBuffer<int8_t> d_x(p.xq), d_w(p.wm.quantized.values), d_out(std::vector<int8_t>(c.m * ldout, 99));
  testing::DeviceBuffer<float> d_scales(p.wm.quantized.scales), d_bias(p.bias), d_out_scales(out_scales);
  kernels::GemmS8ScaledArgs a = scaled_args(p, d_x.get(), d_w.get(), d_scales.get(), d_bias.get(), d_out.get(), ldout);
  a.out_type = kernels::ElementType::kS8;
  a.out_scales = d_out_scales.get();
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major != 9 || prop.minor != 0) {
    EXPECT_FALSE(kernels::gemm_s8_scaled_supported(a));
    GTEST_SKIP() << "sm_90a kernel; device is sm_" << prop.major << prop.minor;
  }
  ASSERT_TRUE(kernels::gemm_s8_scaled_supported(a));
  ASSERT_EQ(kernels::launch_gemm_s8_scaled(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int8_t> got = d_out.to_host();
  int64_t mismatches = 0, padding_touched = 0;
  for (int r = 0; r < c.m; ++r)
    for (int64_t j = 0; j < ldout; ++j) {
      const int8_t g = got[r * ldout + j];
      if (j >= c.n) {
        padding_touched += g != 99;
      } else if (g != expected[size_t(r) * c.n + j] && mismatches++ < 5) {
        ADD_FAILURE() << "row " << r << " column " << j << ": GPU " << int(g) << " vs CPU "
                      << int(expected[size_t(r) * c.n + j]);
      }
    }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(padding_touched, 0);
  // What the int8 output refuses: accumulating, the cooperative schedule, no scales, n not a multiple of 16.
  a.accumulate = true;
  EXPECT_FALSE(kernels::gemm_s8_scaled_supported(a));
  a.accumulate = false;
  a.schedule = kernels::GemmS8ScaledSchedule::kCooperative;
  EXPECT_FALSE(kernels::gemm_s8_scaled_supported(a));
  a.schedule = kernels::GemmS8ScaledSchedule::kAuto;
  a.out_scales = nullptr;
  EXPECT_FALSE(kernels::gemm_s8_scaled_supported(a));
  a.out_scales = d_out_scales.get();
  a.n -= 8;
  EXPECT_FALSE(kernels::gemm_s8_scaled_supported(a));
}

// Partial tiles in m and n, with and without bias; in_proj's x|B|C part of 2.7b (5,376 columns).
INSTANTIATE_TEST_SUITE_P(Shapes, GemmS8ScaledInt8Out,
                         ::testing::Values(Case{64, 64, 256, true}, Case{300, 1040, 4112, false},
                                           Case{129, 272, 48, true}, Case{2048, 5376, 2560, false}));

TEST(GemmS8Scaled, RefusesShapesTmaCannotAddress) {
  testing::require_device();
  int8_t* d_x = nullptr;
  float* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_x, 1 << 16), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, 1 << 16), cudaSuccess);
  kernels::GemmS8ScaledArgs a;
  a.m = 4;
  a.n = 64;
  a.k = 64;
  a.x = d_x;
  a.ldx = 64;
  a.w = d_x;
  a.ldw = 64;
  a.w_scales = d_out;
  a.out = d_out;
  a.ldout = 64;
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(kernels::gemm_s8_scaled_supported(a), prop.major == 9 && prop.minor == 0);
  a.k = 40;  // not a multiple of 16
  a.ldx = a.ldw = 40;
  EXPECT_FALSE(kernels::gemm_s8_scaled_supported(a));
  a.k = a.ldx = a.ldw = 64;
  a.n = 62;  // fp32 rows not a multiple of 16 bytes
  EXPECT_FALSE(kernels::gemm_s8_scaled_supported(a));
  a.n = 64;
  a.x = d_x + 4;  // misaligned operand
  EXPECT_FALSE(kernels::gemm_s8_scaled_supported(a));
  EXPECT_EQ(kernels::launch_gemm_s8_scaled(a, nullptr), cudaErrorInvalidValue);
  cudaFree(d_x);
  cudaFree(d_out);
}

struct GroupedCase {
  int m, n, k, group_size;
};

class GemmS8PerGroupFallback : public ::testing::TestWithParam<GroupedCase> {};

TEST_P(GemmS8PerGroupFallback, OneGemmPerWeightGroupMatchesTheCpuChain) {
  testing::require_device();
  const GroupedCase c = GetParam();
  std::mt19937 rng(c.m + 5 * c.n + 11 * c.k);
  const WeightMatrix wm =
      rtn_weight(testing::random_vector(size_t(c.n) * c.k, -1.f, 1.f, rng), c.n, c.k, QuantBits::kInt4, c.group_size);
  const float s_x = 0.0173f;
  std::vector<int8_t> xq(size_t(c.m) * c.k);
  std::vector<float> x(xq.size());
  std::uniform_int_distribution<int> q_dist(-127, 127);
  for (size_t i = 0; i < xq.size(); ++i) {
    xq[i] = static_cast<int8_t>(q_dist(rng));
    x[i] = dequantize_value(xq[i], s_x);
  }
  std::vector<float> expected(size_t(c.m) * c.n);
  linear_forward(wm, ActQuant{ActFormat::kInt8, {s_x}, {}, 1}, x.data(), c.m, expected.data());
  const auto bias = testing::random_vector(c.n, -0.5f, 0.5f, rng);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] += bias[i % c.n];

  const QuantizedMatrix& q = wm.quantized;
  testing::DeviceBuffer<uint8_t> d_packed(pack_int4(q.values.data(), static_cast<int64_t>(q.values.size())));
  testing::DeviceBuffer<int8_t> d_x(xq), d_w(std::vector<int8_t>(q.values.size()));
  testing::DeviceBuffer<int32_t> d_acc(std::vector<int32_t>(size_t(c.m) * c.n));
  testing::DeviceBuffer<float> d_scales(q.scales), d_bias(bias), d_chain(std::vector<float>(expected.size())),
      d_out(std::vector<float>(expected.size()));
  kernels::WeightUnpackArgs u;
  u.rows = c.n;
  u.cols = c.k;
  u.bits = 4;
  u.values = d_packed.get();
  u.out = d_w.get();
  u.out_type = kernels::ElementType::kS8;
  ASSERT_EQ(kernels::launch_weight_unpack(u, nullptr), cudaSuccess);
  void* workspace = nullptr;
  ASSERT_EQ(cudaMalloc(&workspace, 32 << 20), cudaSuccess);
  {
    kernels::Gemm gemm(workspace, 32 << 20);
    kernels::GemmArgs g;
    g.m = c.m;
    g.n = c.n;
    g.k = c.group_size;
    g.in_type = kernels::ElementType::kS8;
    g.ldx = c.k;
    g.ldw = c.k;
    g.out = d_acc.get();
    g.ldout = c.n;
    g.out_type = kernels::ElementType::kS32;
    kernels::ScaleInt32Args s;
    s.m = c.m;
    s.n = c.n;
    s.acc = d_acc.get();
    s.ld_acc = c.n;
    s.w_scales = d_scales.get();
    s.x_scale = s_x;
    s.bias = d_bias.get();
    s.out = d_out.get();
    s.ldout = c.n;
    s.groups = c.k / c.group_size;
    s.chain = d_chain.get();
    for (int group = 0; group < s.groups; ++group) {
      g.x = d_x.get() + group * c.group_size;
      g.w = d_w.get() + group * c.group_size;
      ASSERT_TRUE(kernels::Gemm::supported(g));
      gemm.run(g, nullptr);
      s.group = group;
      ASSERT_EQ(kernels::launch_scale_int32(s, nullptr), cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  cudaFree(workspace);
  EXPECT_EQ(d_w.to_host(), q.values);
  const std::vector<float> got = d_out.to_host();
  int64_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &expected[i], sizeof(float)) != 0 && mismatches++ < 5)
      ADD_FAILURE() << "element " << i << ": GPU " << got[i] << " vs CPU " << expected[i];
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmS8PerGroupFallback,
                         ::testing::Values(GroupedCase{17, 300, 512, 128}, GroupedCase{256, 1288, 256, 64},
                                           GroupedCase{1024, 256, 512, 128}, GroupedCase{40, 96, 2560, 128}));

TEST(GemmS8, RefusesWhatCublasLtCannotRun) {
  kernels::GemmArgs g;
  int8_t dummy[64];
  int32_t out[64];
  g.m = 2;
  g.n = 2;
  g.k = 6;  // not a multiple of 4
  g.in_type = kernels::ElementType::kS8;
  g.out_type = kernels::ElementType::kS32;
  g.x = dummy;
  g.ldx = 8;
  g.w = dummy;
  g.out = out;
  g.ldout = 2;
  EXPECT_FALSE(kernels::Gemm::supported(g));
  g.k = 8;
  EXPECT_TRUE(kernels::Gemm::supported(g));
  g.out_type = kernels::ElementType::kF32;  // the scales are the epilogue's job
  EXPECT_FALSE(kernels::Gemm::supported(g));
  g.out_type = kernels::ElementType::kS32;
  g.accumulate = true;
  EXPECT_FALSE(kernels::Gemm::supported(g));
}

}  // namespace
}  // namespace ssdq
