// Grouped gated RMSNorm against cpu::gated_rmsnorm (G = 1 over 5120 channels as in mamba2-2.7b,
// G = 8 as in the 8B-like config, and odd sizes).
#include "kernels/gated_rmsnorm.h"

#include <gtest/gtest.h>

#include "runtime/cpu_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

struct Case {
  int rows, width, groups;
};

class GatedRmsNorm : public ::testing::TestWithParam<Case> {};

TEST_P(GatedRmsNorm, MatchesCpuReference) {
  testing::require_device();
  const Case c = GetParam();
  std::mt19937 rng(c.rows + c.width);
  const int64_t z_stride = 2 * c.width + 3;
  auto y = testing::bf16_rounded(testing::random_vector(size_t(c.rows) * c.width, -2.f, 2.f, rng));
  auto z = testing::bf16_rounded(testing::random_vector(size_t(c.rows) * z_stride, -3.f, 3.f, rng));
  auto weight = testing::random_vector(c.width, 0.5f, 1.5f, rng);
  std::vector<float> expected(y.size());
  cpu::gated_rmsnorm(y.data(), z.data(), z_stride, weight.data(), expected.data(), c.rows, c.width, c.width / c.groups,
                     1e-5f);
  testing::DeviceBuffer<uint16_t> d_y(testing::to_bf16(y)), d_z(testing::to_bf16(z)), d_out(std::vector<uint16_t>(y.size()));
  testing::DeviceBuffer<float> d_w(weight);
  kernels::GatedRmsNormArgs args;
  args.rows = c.rows;
  args.width = c.width;
  args.group_size = c.width / c.groups;
  args.y = testing::as_bf16(d_y);
  args.z = testing::as_bf16(d_z);
  args.z_stride = z_stride;
  args.weight = d_w.get();
  args.out = testing::as_bf16(d_out);
  ASSERT_TRUE(kernels::gated_rmsnorm_supported(args));
  ASSERT_EQ(kernels::launch_gated_rmsnorm(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(testing::max_relative_error(testing::from_bf16(d_out.to_host()), expected, 0.05), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatedRmsNorm,
                         ::testing::Values(Case{1, 512, 1}, Case{5, 5120, 1}, Case{3, 8192, 8}, Case{7, 384, 4},
                                           Case{2, 1000, 2}));

}  // namespace
}  // namespace ssdq

namespace ssdq {
namespace {

// Tensor parallelism's folded norm (GatedRmsNormArgs::sum_squares): g · weight unnormalised and Σ g²
// per (row, group); the reference's output times the row's scale.
TEST(GatedRmsNormFolded, UnnormalisedValuesAndSums) {
  testing::require_device();
  const int rows = 3, width = 2560, groups = 2, group = width / groups;
  std::mt19937 rng(5);
  const int64_t z_stride = width + 8;
  auto y = testing::bf16_rounded(testing::random_vector(size_t(rows) * width, -2.f, 2.f, rng));
  auto z = testing::bf16_rounded(testing::random_vector(size_t(rows) * z_stride, -3.f, 3.f, rng));
  auto weight = testing::random_vector(width, 0.5f, 1.5f, rng);
  std::vector<float> normalised(y.size());
  cpu::gated_rmsnorm(y.data(), z.data(), z_stride, weight.data(), normalised.data(), rows, width, group, 1e-5f);
  testing::DeviceBuffer<uint16_t> d_y(testing::to_bf16(y)), d_z(testing::to_bf16(z)), d_out(std::vector<uint16_t>(y.size()));
  testing::DeviceBuffer<float> d_w(weight), d_sums(std::vector<float>(rows * groups, -1.f));
  kernels::GatedRmsNormArgs args;
  args.rows = rows;
  args.width = width;
  args.group_size = group;
  args.y = testing::as_bf16(d_y);
  args.z = testing::as_bf16(d_z);
  args.z_stride = z_stride;
  args.weight = d_w.get();
  args.out = testing::as_bf16(d_out);
  args.sum_squares = d_sums.get();
  ASSERT_EQ(kernels::launch_gated_rmsnorm(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto out = testing::from_bf16(d_out.to_host());
  const auto sums = d_sums.to_host();
  std::vector<float> rescaled(out.size());
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < groups; ++g) {
      ASSERT_GT(sums[r * groups + g], 0.f);
      const float scale = 1.f / std::sqrt(sums[r * groups + g] / group + 1e-5f);
      for (int i = g * group; i < (g + 1) * group; ++i) rescaled[r * width + i] = out[r * width + i] * scale;
    }
  EXPECT_LT(testing::max_relative_error(rescaled, normalised, 0.05), 1e-2);
}

}  // namespace
}  // namespace ssdq
