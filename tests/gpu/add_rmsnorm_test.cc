// Fused residual add + RMSNorm against the CPU reference (add, then cpu::rmsnorm).
#include "kernels/add_rmsnorm.h"

#include <gtest/gtest.h>

#include "model/quantizer.h"
#include "runtime/cpu_ops.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/int8_check.h"

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

// The SSDi8 mean-correction bias of a float out_proj rides on the next norm's add: residual +=
// (delta + bias), rounded in that order as the CPU layer does (bit-identical residual).
TEST_P(AddRmsNorm, DeltaBiasIsAddedBeforeTheResidual) {
  testing::require_device();
  const auto [rows, dim] = GetParam();
  std::mt19937 rng(rows * 37 + dim);
  std::vector<float> residual = testing::random_vector(size_t(rows) * dim, -3.f, 3.f, rng);
  std::vector<float> delta = testing::random_vector(size_t(rows) * dim, -1.f, 1.f, rng);
  std::vector<float> bias = testing::random_vector(dim, -0.3f, 0.3f, rng);
  std::vector<float> weight = testing::random_vector(dim, 0.5f, 1.5f, rng);
  std::vector<float> expected_residual = residual;
  for (size_t i = 0; i < residual.size(); ++i) {
    const float out = delta[i] + bias[i % dim];
    expected_residual[i] += out;
  }
  testing::DeviceBuffer<float> d_residual(residual), d_delta(delta), d_bias(bias), d_weight(weight),
      d_out(std::vector<float>(residual.size()));
  kernels::AddRmsNormArgs args;
  args.rows = rows;
  args.dim = dim;
  args.residual = d_residual.get();
  args.delta = d_delta.get();
  args.delta_bias = d_bias.get();
  args.weight = d_weight.get();
  args.out = d_out.get();
  ASSERT_EQ(kernels::launch_add_rmsnorm(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(d_residual.to_host(), expected_residual);
}

// The int8 output for a W8A8 in_proj: the CPU quantizes its own fp32 RMSNorm; the GPU's differs in
// the last bits (rsqrtf, summation order), so a value next to a rounding boundary may land one step
// away — rarely, and never further.
TEST_P(AddRmsNorm, Int8OutputMatchesQuantizedCpuReference) {
  testing::require_device();
  const auto [rows, dim] = GetParam();
  std::mt19937 rng(rows * 17 + dim);
  std::vector<float> residual = testing::random_vector(size_t(rows) * dim, -3.f, 3.f, rng);
  std::vector<float> weight = testing::random_vector(dim, 0.5f, 1.5f, rng);
  std::vector<float> normed(size_t(rows) * dim);
  cpu::rmsnorm(residual.data(), weight.data(), normed.data(), rows, dim, 1e-5f);
  const float scale = 2.5f / 127;  // some values saturate
  testing::DeviceBuffer<float> d_residual(residual), d_weight(weight);
  testing::DeviceBuffer<int8_t> d_out(std::vector<int8_t>(normed.size()));
  kernels::AddRmsNormArgs args;
  args.rows = rows;
  args.dim = dim;
  args.residual = d_residual.get();
  args.weight = d_weight.get();
  args.out = d_out.get();
  args.out_type = kernels::ElementType::kS8;
  args.out_scale = scale;
  ASSERT_TRUE(kernels::add_rmsnorm_supported(args));
  ASSERT_EQ(kernels::launch_add_rmsnorm(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  testing::expect_int8_within_one_step(d_out.to_host(), normed, [&](size_t) { return scale; });
}

INSTANTIATE_TEST_SUITE_P(Shapes, AddRmsNorm,
                         ::testing::Values(std::make_pair(1, 256), std::make_pair(7, 768), std::make_pair(64, 2560),
                                           std::make_pair(3, 4096), std::make_pair(5, 1000),
                                           std::make_pair(2, 5000)));  // past the rows kept in registers

}  // namespace
}  // namespace ssdq
