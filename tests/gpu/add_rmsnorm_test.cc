// Fused residual add + RMSNorm against the CPU reference (add, then cpu::rmsnorm).
#include "kernels/add_rmsnorm.h"

#include <gtest/gtest.h>

#include "runtime/cpu_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

class AddRmsNorm : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(AddRmsNorm, MatchesCpuReference) {
  testing::require_device();
  const auto [rows, dim] = GetParam();
  std::mt19937 rng(rows * 31 + dim);
  std::vector<float> residual = testing::random_vector(size_t(rows) * dim, -3.f, 3.f, rng);
  std::vector<float> delta = testing::random_vector(size_t(rows) * dim, -1.f, 1.f, rng);
  std::vector<float> weight = testing::random_vector(dim, 0.5f, 1.5f, rng);
  std::vector<float> expected_residual = residual, expected(size_t(rows) * dim);
  for (size_t i = 0; i < residual.size(); ++i) expected_residual[i] += delta[i];
  cpu::rmsnorm(expected_residual.data(), weight.data(), expected.data(), rows, dim, 1e-5f);

  testing::DeviceBuffer<float> d_residual(residual), d_delta(delta), d_weight(weight), d_out(expected);
  kernels::AddRmsNormArgs args;
  args.rows = rows;
  args.dim = dim;
  args.residual = d_residual.get();
  args.delta = d_delta.get();
  args.weight = d_weight.get();
  args.out = d_out.get();
  ASSERT_EQ(kernels::launch_add_rmsnorm(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(testing::max_relative_error(d_residual.to_host(), expected_residual), 1e-6);
  EXPECT_LT(testing::max_relative_error(d_out.to_host(), expected), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AddRmsNorm,
                         ::testing::Values(std::make_pair(1, 256), std::make_pair(7, 768), std::make_pair(64, 2560),
                                           std::make_pair(3, 4096), std::make_pair(5, 1000)));

}  // namespace
}  // namespace ssdq
