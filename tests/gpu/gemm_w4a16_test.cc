// The W4A16 prefill GEMM (kernels/gemm_w4a16.h, CUTLASS's mixed-input kernel) against the CPU:
// int4 weights with group scales dequantized to fp16 as model/quantizer.h's dequantize rounds them
// (weight_unpack's kF16), fp16 rows, the products summed in double. The GPU sums in fp32 in its own
// order, so each output is compared within 2e-5 of Σ|x·w| over its row: a wrong group's scale or
// a misplaced nibble moves an output by a large part of that sum.
#include <gtest/gtest.h>

#include <cmath>

#include "formats/dtype.h"
#include "kernels/gemm_w4a16.h"
#include "model/quantizer.h"
#include "quant/weight_formats.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

struct Case {
  int m, n, k, group_size;
  int x_pad = 0, out_pad = 0;  // row strides ldx = k + x_pad, ldout = n + out_pad
};

class GemmW4A16 : public ::testing::TestWithParam<Case> {};

TEST_P(GemmW4A16, MatchesTheCpuOnTheDequantizedWeights) {
  testing::require_device();
  if (testing::compute_capability_major() != 9) GTEST_SKIP() << "sm_90 kernel";
  const Case c = GetParam();
  std::mt19937 rng(c.m * 7 + c.n * 3 + c.k + c.group_size);
  const QuantizedMatrix q = rtn_weight(testing::random_vector(size_t(c.n) * c.k, -1.f, 1.f, rng), c.n, c.k,
                                       QuantBits::kInt4, c.group_size)
                                .quantized;
  std::vector<float> w16 = dequantize(q);
  for (float& v : w16) v = half_to_float(float_to_half(v));
  const int64_t ldx = c.k + c.x_pad, ldout = c.n + c.out_pad;
  std::vector<uint16_t> x_bits(size_t(c.m) * ldx, float_to_half(7.f));  // padding the kernel must not read
  std::vector<float> x(size_t(c.m) * c.k);
  const std::vector<float> x_raw = testing::random_vector(x.size(), -2.f, 2.f, rng);
  for (int r = 0; r < c.m; ++r)
    for (int j = 0; j < c.k; ++j) {
      x_bits[size_t(r) * ldx + j] = float_to_half(x_raw[size_t(r) * c.k + j]);
      x[size_t(r) * c.k + j] = half_to_float(x_bits[size_t(r) * ldx + j]);
    }
  testing::DeviceBuffer<uint16_t> d_x(x_bits);
  testing::DeviceBuffer<uint8_t> d_w(pack_int4(q.values.data(), static_cast<int64_t>(q.values.size())));
  testing::DeviceBuffer<float> d_scales(q.scales);
  const float sentinel = -12345.f;
  testing::DeviceBuffer<float> d_out(std::vector<float>(size_t(c.m) * ldout, sentinel));
  kernels::GemmW4A16Args a;
  a.m = c.m;
  a.n = c.n;
  a.k = c.k;
  a.x = d_x.get();
  a.ldx = ldx;
  a.w = d_w.get();
  a.w_scales = d_scales.get();
  a.group_size = c.group_size;
  a.out = d_out.get();
  a.ldout = ldout;
  testing::DeviceBuffer<uint8_t> d_workspace(std::vector<uint8_t>(kernels::gemm_w4a16_workspace_bytes(a)));
  a.workspace = d_workspace.get();
  std::vector<double> expected(size_t(c.m) * c.n), magnitude(expected.size());
  for (int r = 0; r < c.m; ++r)
    for (int n = 0; n < c.n; ++n)
      for (int j = 0; j < c.k; ++j) {
        const double p = double(x[size_t(r) * c.k + j]) * w16[size_t(n) * c.k + j];
        expected[size_t(r) * c.n + n] += p;
        magnitude[size_t(r) * c.n + n] += std::abs(p);
      }
  for (const kernels::GemmW4A16Tile tile : {kernels::GemmW4A16Tile::kAuto, kernels::GemmW4A16Tile::k128x128,
                                             kernels::GemmW4A16Tile::k128x256, kernels::GemmW4A16Tile::k64x128}) {
    SCOPED_TRACE(::testing::Message() << "tile " << static_cast<int>(tile));
    d_out.upload(std::vector<float>(size_t(c.m) * ldout, sentinel));
    a.tile = tile;
    ASSERT_TRUE(kernels::gemm_w4a16_supported(a));
    ASSERT_EQ(kernels::launch_gemm_w4a16(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> out = d_out.to_host();
    for (int r = 0; r < c.m; ++r) {
      for (int n = 0; n < c.n; ++n) {
        const size_t i = size_t(r) * c.n + n;
        const double error = std::abs(out[size_t(r) * ldout + n] - expected[i]) / (magnitude[i] + 1e-30);
        ASSERT_LE(error, 2e-5) << "row " << r << " column " << n << ": " << out[size_t(r) * ldout + n] << " vs "
                               << expected[i];
      }
      for (int n = c.n; n < ldout; ++n) ASSERT_EQ(out[size_t(r) * ldout + n], sentinel) << "padding written";
    }
  }
}

// Every Mamba-2 projection's k and group size of the recipes (128), other groups, ragged tiles in
// both dimensions (n and m not multiples of 128), one row, padded strides.
INSTANTIATE_TEST_SUITE_P(Shapes, GemmW4A16,
                         ::testing::Values(Case{1, 64, 128, 64}, Case{17, 300, 256, 128}, Case{130, 1040, 2560, 128},
                                           Case{64, 2560, 5120, 128}, Case{33, 528, 4096, 256},
                                           Case{200, 132, 8192, 128}, Case{48, 10576, 2560, 128},
                                           Case{77, 260, 1024, 1024}, Case{129, 136, 384, 128, 8, 4},
                                           Case{256, 2048, 1024, 64, 16, 12}));

TEST(GemmW4A16Refuses, WhatItCannotRun) {
  testing::require_device();
  if (testing::compute_capability_major() != 9) GTEST_SKIP() << "sm_90 kernel";
  testing::DeviceBuffer<uint8_t> buffer(std::vector<uint8_t>(1 << 20));
  uint8_t* p = buffer.get();
  kernels::GemmW4A16Args a;
  a.m = 16;
  a.n = 64;
  a.k = 256;
  a.x = p;
  a.ldx = 256;
  a.w = p + 65536;
  a.w_scales = reinterpret_cast<const float*>(p + 131072);
  a.group_size = 128;
  a.out = reinterpret_cast<float*>(p + 196608);
  a.ldout = 64;
  a.workspace = p + 262144;
  ASSERT_TRUE(kernels::gemm_w4a16_supported(a));
  auto refused = [](kernels::GemmW4A16Args b) {
    return !kernels::gemm_w4a16_supported(b) && kernels::launch_gemm_w4a16(b, nullptr) == cudaErrorInvalidValue;
  };
  auto with = [&](auto change) {
    kernels::GemmW4A16Args b = a;
    change(b);
    return b;
  };
  EXPECT_TRUE(refused(with([](auto& b) { b.group_size = 32; })));    // smaller than a tile's k
  EXPECT_TRUE(refused(with([](auto& b) { b.group_size = 96; })));    // not a multiple of 64
  EXPECT_TRUE(refused(with([](auto& b) { b.k = 320; })));            // groups do not divide k
  EXPECT_TRUE(refused(with([](auto& b) { b.n = 66; b.ldout = 66; })));
  EXPECT_TRUE(refused(with([](auto& b) { b.ldx = 260; })));          // fp16 rows not 16-byte strided
  EXPECT_TRUE(refused(with([](auto& b) { b.ldx = 128; })));          // rows overlap
  EXPECT_TRUE(refused(with([&](auto& b) { b.x = p + 8; })));         // misaligned
  EXPECT_TRUE(refused(with([](auto& b) { b.workspace = nullptr; })));
  EXPECT_TRUE(refused(with([](auto& b) { b.m = 0; })));
  EXPECT_TRUE(refused(with([](auto& b) { b.tile = static_cast<kernels::GemmW4A16Tile>(7); })));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace ssdq
