// The decode GEMV against the CPU reference in its three input modes: plain bf16 x, RMSNorm of
// an fp32 residual (in_proj), gated grouped RMSNorm (out_proj, accumulating into fp32).
#include "kernels/gemv.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>

#include "runtime/cpu_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

struct Case {
  int m, n, k;
  kernels::GemvInput input;
  int groups;
};

class Gemv : public ::testing::TestWithParam<Case> {};

TEST_P(Gemv, MatchesCpuReference) {
  testing::require_device();
  const Case c = GetParam();
  std::mt19937 rng(c.m * 7 + c.n + c.k);
  auto w = testing::bf16_rounded(testing::random_vector(size_t(c.n) * c.k, -1.f, 1.f, rng));
  auto norm_w = testing::random_vector(c.k, 0.5f, 1.5f, rng);
  auto residual = testing::random_vector(size_t(c.m) * c.k, -3.f, 3.f, rng);
  auto y = testing::bf16_rounded(testing::random_vector(size_t(c.m) * c.k, -2.f, 2.f, rng));
  const int64_t z_stride = c.k + 16;
  auto z = testing::bf16_rounded(testing::random_vector(size_t(c.m) * z_stride, -3.f, 3.f, rng));
  auto base = testing::random_vector(size_t(c.m) * c.n, -2.f, 2.f, rng);
  // The CPU reference: the input rows as the unfused kernels would make them (rounded to bf16).
  std::vector<float> x(size_t(c.m) * c.k);
  if (c.input == kernels::GemvInput::kBf16) {
    x = y;
  } else if (c.input == kernels::GemvInput::kRmsNorm) {
    cpu::rmsnorm(residual.data(), norm_w.data(), x.data(), c.m, c.k, 1e-5f);
  } else {
    cpu::gated_rmsnorm(y.data(), z.data(), z_stride, norm_w.data(), x.data(), c.m, c.k, c.k / c.groups, 1e-5f);
  }
  x = testing::bf16_rounded(x);
  std::vector<float> expected(size_t(c.m) * c.n);
  cpu::matmul_wt(x.data(), w.data(), expected.data(), c.m, c.k, c.n);
  const bool accumulate = c.input == kernels::GemvInput::kGatedRmsNorm;
  if (accumulate)
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += base[i];

  testing::DeviceBuffer<uint16_t> d_w(testing::to_bf16(w)), d_y(testing::to_bf16(y)), d_z(testing::to_bf16(z)),
      d_out16(std::vector<uint16_t>(expected.size()));
  testing::DeviceBuffer<float> d_res(residual), d_norm(norm_w), d_out32(base);
  kernels::GemvArgs a;
  a.m = c.m;
  a.n = c.n;
  a.k = c.k;
  a.input = c.input;
  a.x = testing::as_bf16(d_y);
  a.ldx = c.k;
  a.residual = d_res.get();
  a.y = testing::as_bf16(d_y);
  a.z = testing::as_bf16(d_z);
  a.z_stride = z_stride;
  a.group_size = c.k / c.groups;
  a.norm_weight = d_norm.get();
  a.w = testing::as_bf16(d_w);
  a.ldout = c.n;
  a.accumulate = accumulate;
  a.out_type = accumulate ? kernels::ElementType::kF32 : kernels::ElementType::kBF16;
  a.out = accumulate ? static_cast<void*>(d_out32.get()) : static_cast<void*>(d_out16.get());
  ASSERT_TRUE(kernels::gemv_supported(a));
  ASSERT_EQ(kernels::launch_gemv(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = accumulate ? d_out32.to_host() : testing::from_bf16(d_out16.to_host());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - expected[i]));
    scale = std::max(scale, std::abs(double(expected[i])));
  }
  EXPECT_LT(diff / scale, accumulate ? 2e-3 : 1e-2) << "max |Δ| " << diff << " of max " << scale;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Gemv,
                         ::testing::Values(Case{1, 1288, 256, kernels::GemvInput::kRmsNorm, 1},
                                           Case{1, 10576, 2560, kernels::GemvInput::kRmsNorm, 1},
                                           Case{4, 333, 520, kernels::GemvInput::kBf16, 1},
                                           Case{1, 2560, 5120, kernels::GemvInput::kGatedRmsNorm, 1},
                                           Case{3, 4096, 8192, kernels::GemvInput::kGatedRmsNorm, 8},
                                           Case{2, 256, 512, kernels::GemvInput::kGatedRmsNorm, 4},
                                           Case{5, 1288, 256, kernels::GemvInput::kRmsNorm, 1},
                                           Case{7, 2560, 5120, kernels::GemvInput::kGatedRmsNorm, 1},
                                           Case{8, 333, 520, kernels::GemvInput::kBf16, 1},
                                           Case{11, 1000, 2048, kernels::GemvInput::kRmsNorm, 1},
                                           Case{16, 333, 520, kernels::GemvInput::kBf16, 1},
                                           Case{14, 2560, 1024, kernels::GemvInput::kGatedRmsNorm, 2}));

// A row's output does not depend on the rows launched beside it (what makes a verify window of up
// to kGemvMaxRows rows give each row a decode step's bits): m rows at once against each row alone,
// bit for bit, in every input mode, with the norms in every block's prologue or built once into
// GemvArgs::staged; at a small k (one step of the block's 256-wide k split) and a large one, and
// at a width the launch splits into one-tile blocks (1,000) and one it splits into two-tile blocks
// (10,576, 2.7b's in_proj).
TEST(GemvRows, EachRowGetsTheBitsItGetsAlone) {
  testing::require_device();
  // 8 rows: the kernel without rows 8..15 of A; 13 and 16: with them, in part and whole.
  for (const int m : {8, 13, kernels::kGemvMaxRows}) {
    for (const auto [k, n] : {std::pair{256, 1000}, std::pair{2048, 1000}, std::pair{2048, 10576}}) {
      const int groups = 2;
      std::mt19937 rng(5);
      auto w = testing::bf16_rounded(testing::random_vector(size_t(n) * k, -1.f, 1.f, rng));
      auto norm_w = testing::random_vector(k, 0.5f, 1.5f, rng);
      auto residual = testing::random_vector(size_t(m) * k, -3.f, 3.f, rng);
      auto y = testing::bf16_rounded(testing::random_vector(size_t(m) * k, -2.f, 2.f, rng));
      auto z = testing::bf16_rounded(testing::random_vector(size_t(m) * k, -3.f, 3.f, rng));
      testing::DeviceBuffer<uint16_t> d_w(testing::to_bf16(w)), d_y(testing::to_bf16(y)), d_z(testing::to_bf16(z));
      testing::DeviceBuffer<float> d_res(residual), d_norm(norm_w), d_all(std::vector<float>(size_t(m) * n)),
          d_one{std::vector<float>(n)};
      testing::DeviceBuffer<uint16_t> d_staged{std::vector<uint16_t>(size_t(m) * k)};
      for (const bool staged : {false, true})
        for (kernels::GemvInput input :
             {kernels::GemvInput::kBf16, kernels::GemvInput::kRmsNorm, kernels::GemvInput::kGatedRmsNorm}) {
          kernels::GemvArgs a;
          a.m = m;
          a.n = n;
          a.k = k;
          a.input = input;
          a.x = testing::as_bf16(d_y);
          a.ldx = k;
          a.residual = d_res.get();
          a.y = testing::as_bf16(d_y);
          a.z = testing::as_bf16(d_z);
          a.z_stride = k;
          a.group_size = k / groups;
          a.norm_weight = d_norm.get();
          a.w = testing::as_bf16(d_w);
          a.ldout = n;
          a.out_type = kernels::ElementType::kF32;
          a.out = d_all.get();
          a.staged = staged ? testing::as_bf16(d_staged) : nullptr;
          ASSERT_EQ(kernels::launch_gemv(a, nullptr), cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          const std::vector<float> all = d_all.to_host();
          for (int r = 0; r < m; ++r) {
            kernels::GemvArgs one = a;
            one.m = 1;
            one.x = a.x + int64_t(r) * k;
            one.residual = a.residual + int64_t(r) * k;
            one.y = a.y + int64_t(r) * k;
            one.z = a.z + int64_t(r) * k;
            one.out = d_one.get();
            one.staged = nullptr;
            ASSERT_EQ(kernels::launch_gemv(one, nullptr), cudaSuccess);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            const std::vector<float> alone = d_one.to_host();
            EXPECT_EQ(std::memcmp(alone.data(), all.data() + int64_t(r) * n, n * sizeof(float)), 0)
                << "input mode " << static_cast<int>(input) << ", row " << r << " of " << m << ", k " << k << ", n "
                << n << (staged ? ", inputs staged" : "");
          }
        }
    }
  }
}

// Rows read from global memory (an aligned bf16 input, a norm with its staged room) take any k;
// rows built in each block's shared memory at most kGemvMaxInputBytes of them.
TEST(GemvRows, InputRowsBeyondTheSharedStageAreRefused) {
  EXPECT_TRUE(kernels::gemv_shape_supported(kernels::kGemvMaxRows, 2560, 8192));
  EXPECT_FALSE(kernels::gemv_shape_supported(kernels::kGemvMaxRows + 1, 2560, 256));
  EXPECT_FALSE(kernels::gemv_shape_supported(1, 2560, 260));
  alignas(16) static uint16_t fake[16];  // pointers only: nothing is launched
  kernels::GemvArgs a;
  a.m = kernels::kGemvMaxRows;
  a.n = 2560;
  a.k = 8192;
  a.w = reinterpret_cast<const __nv_bfloat16*>(fake);
  a.out = fake;
  a.ldout = a.n;
  a.out_type = kernels::ElementType::kF32;
  a.accumulate = true;
  a.input = kernels::GemvInput::kGatedRmsNorm;
  a.y = a.z = a.w;
  a.z_stride = a.k;
  a.group_size = a.k;
  a.norm_weight = reinterpret_cast<const float*>(fake);
  EXPECT_FALSE(kernels::gemv_supported(a)) << "16 rows of 8,192 built in shared memory (256 KB)";
  a.staged = reinterpret_cast<__nv_bfloat16*>(fake);
  EXPECT_TRUE(kernels::gemv_supported(a)) << "the same rows staged once and read from global memory";
  a.m = 4;
  a.staged = nullptr;
  EXPECT_TRUE(kernels::gemv_supported(a)) << "4 rows of 8,192 in shared memory (64 KB)";
  a.input = kernels::GemvInput::kBf16;
  a.m = kernels::kGemvMaxRows;
  a.x = a.w;
  a.ldx = a.k;
  EXPECT_TRUE(kernels::gemv_supported(a)) << "aligned bf16 rows read where they are";
}

}  // namespace
}  // namespace ssdq

namespace ssdq {
namespace {

// Tensor parallelism's folded norm (GemvArgs::sum_squares): the gated values times the weight left
// unnormalised, multiplied into fp32 partial rows, and each row's Σ g² written beside them.
TEST(GemvFoldedNorm, UnnormalisedRowsAndTheirSumsOfSquares) {
  testing::require_device();
  const int m = 2, n = 2560, k = 2560;
  std::mt19937 rng(11);
  auto w = testing::bf16_rounded(testing::random_vector(size_t(n) * k, -1.f, 1.f, rng));
  auto norm_w = testing::random_vector(k, 0.5f, 1.5f, rng);
  auto y = testing::bf16_rounded(testing::random_vector(size_t(m) * k, -2.f, 2.f, rng));
  const int64_t z_stride = 3 * k;
  auto z = testing::bf16_rounded(testing::random_vector(size_t(m) * z_stride, -3.f, 3.f, rng));
  std::vector<float> x(size_t(m) * k), sums(m, 0.f);
  for (int r = 0; r < m; ++r)
    for (int i = 0; i < k; ++i) {
      const float zi = z[r * z_stride + i], g = y[r * k + i] * (zi / (1.f + std::exp(-zi)));
      sums[r] += g * g;
      x[r * k + i] = g * norm_w[i];
    }
  x = testing::bf16_rounded(x);
  std::vector<float> expected(size_t(m) * n);
  cpu::matmul_wt(x.data(), w.data(), expected.data(), m, k, n);
  testing::DeviceBuffer<uint16_t> d_w(testing::to_bf16(w)), d_y(testing::to_bf16(y)), d_z(testing::to_bf16(z));
  testing::DeviceBuffer<float> d_norm(norm_w), d_out(std::vector<float>(size_t(m) * n + m, -1.f));
  kernels::GemvArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.input = kernels::GemvInput::kGatedRmsNorm;
  a.y = testing::as_bf16(d_y);
  a.z = testing::as_bf16(d_z);
  a.z_stride = z_stride;
  a.group_size = k;
  a.norm_weight = d_norm.get();
  a.w = testing::as_bf16(d_w);
  a.out = d_out.get();
  a.ldout = n;
  a.out_type = kernels::ElementType::kF32;
  a.sum_squares = d_out.get() + m * n;
  ASSERT_TRUE(kernels::gemv_supported(a));
  a.accumulate = true;
  EXPECT_FALSE(kernels::gemv_supported(a)) << "sums of squares beside accumulated rows";
  a.accumulate = false;
  ASSERT_EQ(kernels::launch_gemv(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = d_out.to_host();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - expected[i]));
    scale = std::max(scale, std::abs(double(expected[i])));
  }
  EXPECT_LT(diff / scale, 2e-3);
  for (int r = 0; r < m; ++r) EXPECT_NEAR(got[m * n + r], sums[r], 1e-4 * sums[r]) << "row " << r;
}

}  // namespace
}  // namespace ssdq
