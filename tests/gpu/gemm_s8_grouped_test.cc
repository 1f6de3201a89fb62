// The integer projection with weight groups in one kernel (kernels/gemm_s8_grouped.h) gives
// runtime/quantized_ops.h linear_forward's output bit for bit — the per-group int32 sums, the fp32
// chain over the groups, · s_x, + bias, the residual add — for int4 weights (unpacked to int8 on
// the device first, as the backend runs W4A8) and int8 weights, with groups of 32 to 512 and one
// group a row, both tiles, partial tiles in m, n and k, and strided input rows.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/gemm_s8_grouped.h"
#include "kernels/weight_unpack.h"
#include "model/quantizer.h"
#include "quant/weight_formats.h"
#include "runtime/quantized_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

using kernels::ElementType;
using kernels::GemmS8GroupedSums;
using kernels::GemmS8GroupedTile;

struct Case {
  int m, n, k;
  int group_size;  // 0: one group a row
  int bits;
  GemmS8GroupedTile tile;
  bool bias_and_accumulate;
  ElementType out_type = ElementType::kF32;
  bool packed = false;  // int4 weights read packed (w_bits 4) instead of unpacked to int8 first
};

std::string tile_name(GemmS8GroupedTile t) {
  switch (t) {
    case GemmS8GroupedTile::kWgmma: return "wgmma";
    case GemmS8GroupedTile::kLarge: return "large";
    case GemmS8GroupedTile::kSmall: return "small";
    case GemmS8GroupedTile::kNarrow: return "narrow";
    default: return "auto";
  }
}

class GemmS8Grouped : public ::testing::TestWithParam<Case> {};

TEST_P(GemmS8Grouped, MatchesLinearForwardBitForBit) {
  testing::require_device();
  const Case c = GetParam();
  SCOPED_TRACE(fmt::format("m {} n {} k {} group {} int{}{} tile {}", c.m, c.n, c.k, c.group_size, c.bits,
                           c.packed ? " packed" : "", tile_name(c.tile)));
  std::mt19937 rng(c.m + 5 * c.n + 11 * c.k + c.group_size);
  const WeightMatrix wm = rtn_weight(testing::random_vector(size_t(c.n) * c.k, -1.f, 1.f, rng), c.n, c.k,
                                     c.bits == 4 ? QuantBits::kInt4 : QuantBits::kInt8, c.group_size);
  const QuantizedMatrix& q = wm.quantized;
  const int64_t ldx = c.k + 32;
  const float s_x = 0.0173f;
  std::vector<int8_t> xq(size_t(c.m) * ldx, 0);
  std::vector<float> x(size_t(c.m) * c.k);
  std::uniform_int_distribution<int> q_dist(-127, 127);
  for (int r = 0; r < c.m; ++r)
    for (int i = 0; i < c.k; ++i) {
      xq[r * ldx + i] = static_cast<int8_t>(i % 97 == 0 ? (r % 2 ? 127 : -127) : q_dist(rng));  // extremes too
      x[r * c.k + i] = dequantize_value(xq[r * ldx + i], s_x);
    }
  std::vector<float> expected(size_t(c.m) * c.n);
  linear_forward(wm, ActQuant{ActFormat::kInt8, {s_x}, {}, 1}, x.data(), c.m, expected.data());
  const auto bias = testing::random_vector(c.n, -0.5f, 0.5f, rng);
  const auto base = testing::random_vector(expected.size(), -2.f, 2.f, rng);
  if (c.bias_and_accumulate)
    for (size_t i = 0; i < expected.size(); ++i) {
      float v = expected[i];
      v += bias[i % c.n];
      expected[i] = base[i] + v;
    }

  // The weights as the kernel reads them: int8, int4 packed or unpacked on the device.
  testing::DeviceBuffer<int8_t> d_w(q.values);
  testing::DeviceBuffer<uint8_t> d_packed(c.bits == 4 ? pack_int4(q.values.data(), static_cast<int64_t>(q.values.size()))
                                                      : std::vector<uint8_t>(1));
  if (c.bits == 4 && !c.packed) {
    d_w.upload(std::vector<int8_t>(q.values.size(), 0));
    kernels::WeightUnpackArgs u;
    u.rows = c.n;
    u.cols = c.k;
    u.bits = 4;
    u.values = d_packed.get();
    u.out = d_w.get();
    u.out_type = ElementType::kS8;
    ASSERT_EQ(kernels::launch_weight_unpack(u, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  testing::DeviceBuffer<int8_t> d_x(xq);
  testing::DeviceBuffer<float> d_scales(q.scales), d_bias(bias);
  const bool f32 = c.out_type == ElementType::kF32;
  const std::vector<float> out0 = c.bias_and_accumulate ? base : std::vector<float>(expected.size(), 0.f);
  testing::DeviceBuffer<float> d_out(out0);
  testing::DeviceBuffer<uint16_t> d_out16(std::vector<uint16_t>(expected.size(), 0));
  kernels::GemmS8GroupedArgs a;
  a.m = c.m;
  a.n = c.n;
  a.k = c.k;
  a.x = d_x.get();
  a.ldx = ldx;
  a.w = c.packed ? reinterpret_cast<const int8_t*>(d_packed.get()) : d_w.get();
  a.w_bits = c.packed ? 4 : 8;
  a.ldw = c.k;
  a.w_scales = d_scales.get();
  a.group_size = q.group_size;
  a.x_scale = s_x;
  a.bias = c.bias_and_accumulate ? d_bias.get() : nullptr;
  a.out = f32 ? static_cast<void*>(d_out.get()) : static_cast<void*>(d_out16.get());
  a.ldout = c.n;
  a.out_type = c.out_type;
  a.accumulate = c.bias_and_accumulate && f32;
  a.tile = c.tile;
  if (c.tile == GemmS8GroupedTile::kWgmma) {
    cudaDeviceProp prop{};
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    if (prop.major != 9 || prop.minor != 0) {
      EXPECT_FALSE(kernels::gemm_s8_grouped_supported(a));
      GTEST_SKIP() << "sm_90a kernel; device is sm_" << prop.major << prop.minor;
    }
  }
  if (!f32) {
    const bool half = c.out_type == ElementType::kF16;
    for (float& v : expected) v = half ? half_to_float(float_to_half(v)) : bf16_to_float(float_to_bf16(v));
  }
  // The device's choice of sums, then on the mma.sync tiles both conversions explicitly (the biased
  // one is sm_80's, which an sm_90 machine would otherwise never run).
  std::vector<GemmS8GroupedSums> sums = {GemmS8GroupedSums::kAuto};
  if (c.tile != GemmS8GroupedTile::kWgmma) {
    sums.push_back(GemmS8GroupedSums::kDirect);
    if (q.group_size <= 256) sums.push_back(GemmS8GroupedSums::kBiased);  // grouped_gemm::kBiasedMaxGroup
  }
  for (GemmS8GroupedSums s : sums) {
    SCOPED_TRACE(fmt::format("sums {}", static_cast<int>(s)));
    a.sums = s;
    if (f32) d_out.upload(out0);
    ASSERT_TRUE(kernels::gemm_s8_grouped_supported(a));
    ASSERT_EQ(kernels::launch_gemm_s8_grouped(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> got;
    if (f32) {
      got = d_out.to_host();
    } else {
      const bool half = c.out_type == ElementType::kF16;
      for (uint16_t bits : d_out16.to_host()) got.push_back(half ? half_to_float(bits) : bf16_to_float(bits));
    }
    ASSERT_EQ(got.size(), expected.size());
    int64_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &expected[i], sizeof(float)) != 0 && mismatches++ < 5)
        ADD_FAILURE() << "element " << i << " (row " << i / c.n << ", column " << i % c.n << "): GPU " << got[i]
                      << " vs CPU " << expected[i];
    EXPECT_EQ(mismatches, 0);
  }
}

constexpr auto kLarge = GemmS8GroupedTile::kLarge;
constexpr auto kSmall = GemmS8GroupedTile::kSmall;
constexpr auto kNarrow = GemmS8GroupedTile::kNarrow;
constexpr auto kAuto = GemmS8GroupedTile::kAuto;
constexpr auto kWgmma = GemmS8GroupedTile::kWgmma;

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmS8Grouped,
    ::testing::Values(Case{17, 300, 512, 128, 4, kLarge, true}, Case{17, 300, 512, 128, 4, kSmall, true},
                      Case{256, 1288, 256, 64, 4, kAuto, false}, Case{1024, 256, 512, 32, 8, kLarge, false},
                      Case{130, 200, 1024, 512, 8, kLarge, true},   // groups too wide for the biased sums
                      Case{40, 96, 2560, 128, 4, kAuto, true}, Case{300, 1032, 4096, 0, 8, kLarge, true},
                      Case{5, 2560, 5120, 0, 8, kSmall, true}, Case{33, 100, 96, 32, 4, kLarge, false},  // k tile 3/4 full
                      Case{65, 130, 160, 32, 4, kSmall, true}, Case{2048, 520, 5120, 128, 4, kLarge, true},
                      Case{129, 264, 256, 256, 8, kLarge, false, ElementType::kF16},
                      Case{3, 72, 384, 128, 4, kSmall, false, ElementType::kBF16},
                      // odd n: the last column pair of a row split at the matrix's edge
                      Case{9, 131, 256, 128, 4, kSmall, true}, Case{70, 77, 512, 64, 8, kLarge, false, ElementType::kF16},
                      // 32 × 32 tiles: partial in m, n and k, int8, int4 unpacked first and packed, groups 32 to one a row;
                      // kAuto at 32 rows of 2.7b's out_proj takes them on a GPU of ≥ 80 SMs
                      Case{17, 300, 512, 128, 4, kNarrow, true}, Case{65, 130, 160, 32, 4, kNarrow, true},
                      Case{5, 2560, 5120, 0, 8, kNarrow, true}, Case{3, 72, 384, 128, 4, kNarrow, false, ElementType::kBF16},
                      Case{17, 300, 512, 128, 4, kNarrow, true, ElementType::kF32, true},
                      Case{33, 100, 96, 32, 4, kNarrow, false, ElementType::kF32, true},
                      Case{32, 2560, 5120, 128, 4, kAuto, true, ElementType::kF32, true},
                      // the wgmma kernel: groups of one k tile (128), two (256), four (512), one a row;
                      // partial tiles in m and n
                      Case{17, 300, 512, 128, 4, kWgmma, true}, Case{256, 1288, 256, 128, 4, kWgmma, false},
                      Case{1024, 256, 512, 256, 8, kWgmma, false}, Case{130, 200, 1024, 512, 8, kWgmma, true},
                      Case{300, 1032, 4096, 0, 8, kWgmma, true}, Case{1, 8, 128, 128, 4, kWgmma, false},
                      Case{2048, 520, 5120, 128, 4, kWgmma, true}, Case{129, 264, 768, 256, 8, kWgmma, false, ElementType::kF16},
                      Case{70, 136, 2560, 128, 4, kWgmma, false, ElementType::kBF16},
                      // rows of n % 4 ≠ 0 (the staged epilogue's element-wise stores): fp32 with bias
                      // and accumulation, bf16, and a last tile of two columns
                      Case{200, 130, 256, 128, 8, kWgmma, true}, Case{130, 262, 512, 256, 4, kWgmma, false, ElementType::kBF16},
                      // int4 weights unpacked in registers: groups 32 to 512, partial k tile, both tiles
                      Case{17, 300, 512, 128, 4, kSmall, true, ElementType::kF32, true},
                      Case{17, 300, 512, 128, 4, kLarge, true, ElementType::kF32, true},
                      Case{256, 1288, 256, 64, 4, kAuto, false, ElementType::kF32, true},
                      Case{33, 100, 96, 32, 4, kSmall, false, ElementType::kF32, true},
                      Case{130, 200, 1024, 512, 4, kLarge, true, ElementType::kF32, true},
                      Case{40, 96, 2560, 128, 4, kAuto, true, ElementType::kF32, true},
                      Case{64, 2560, 5120, 128, 4, kSmall, true, ElementType::kF32, true},
                      Case{3, 72, 384, 128, 4, kSmall, false, ElementType::kF16, true}));

TEST(GemmS8Grouped, RefusesWhatItCannotRun) {
  testing::require_device();
  int8_t* d_x = nullptr;
  float* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_x, 1 << 16), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, 1 << 16), cudaSuccess);
  kernels::GemmS8GroupedArgs a;
  a.m = 4;
  a.n = 64;
  a.k = 128;
  a.x = d_x;
  a.ldx = 128;
  a.w = d_x;
  a.ldw = 128;
  a.w_scales = d_out;
  a.group_size = 64;
  a.out = d_out;
  a.ldout = 64;
  EXPECT_TRUE(kernels::gemm_s8_grouped_supported(a));
  a.group_size = 48;  // not a multiple of 32
  EXPECT_FALSE(kernels::gemm_s8_grouped_supported(a));
  a.group_size = 96;  // does not divide k
  EXPECT_FALSE(kernels::gemm_s8_grouped_supported(a));
  a.group_size = 64;
  a.k = 112;  // not a multiple of 32
  EXPECT_FALSE(kernels::gemm_s8_grouped_supported(a));
  a.k = 128;
  a.x = d_x + 4;  // misaligned rows
  EXPECT_FALSE(kernels::gemm_s8_grouped_supported(a));
  EXPECT_EQ(kernels::launch_gemm_s8_grouped(a, nullptr), cudaErrorInvalidValue);
  a.x = d_x;
  a.tile = GemmS8GroupedTile::kWgmma;  // folds between k tiles only: k and groups multiples of 128
  a.group_size = 128;
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(kernels::gemm_s8_grouped_supported(a), prop.major == 9 && prop.minor == 0);
  a.group_size = 64;
  EXPECT_FALSE(kernels::gemm_s8_grouped_supported(a));
  a.group_size = 128;
  a.k = a.ldx = a.ldw = 96;
  EXPECT_FALSE(kernels::gemm_s8_grouped_supported(a));
  a.k = a.ldx = a.ldw = 128;
  a.w_bits = 4;  // packed int4: not on wgmma; rows of whole 16-byte pieces
  EXPECT_FALSE(kernels::gemm_s8_grouped_supported(a));
  a.tile = GemmS8GroupedTile::kAuto;
  EXPECT_TRUE(kernels::gemm_s8_grouped_supported(a));
  a.ldw = 144;
  EXPECT_FALSE(kernels::gemm_s8_grouped_supported(a));
  a.ldw = 128;
  a.w_bits = 8;
  a.out_type = ElementType::kBF16;
  a.accumulate = true;  // adds into fp32 only
  EXPECT_FALSE(kernels::gemm_s8_grouped_supported(a));
  a.out_type = ElementType::kF32;
  a.sums = GemmS8GroupedSums::kBiased;  // mma.sync tiles and groups of at most 256 only
  EXPECT_TRUE(kernels::gemm_s8_grouped_supported(a));
  a.tile = GemmS8GroupedTile::kWgmma;
  EXPECT_FALSE(kernels::gemm_s8_grouped_supported(a));
  a.tile = GemmS8GroupedTile::kAuto;
  a.k = a.ldx = a.ldw = a.group_size = 512;
  EXPECT_FALSE(kernels::gemm_s8_grouped_supported(a));
  cudaFree(d_x);
  cudaFree(d_out);
}

}  // namespace
}  // namespace ssdq
