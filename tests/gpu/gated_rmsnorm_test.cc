// Grouped gated RMSNorm against cpu::gated_rmsnorm (G = 1 over 5120 channels as in mamba2-2.7b,
// G = 8 as in the 8B-like config, and odd sizes).
#include "kernels/gated_rmsnorm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

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

namespace ssdq {
namespace {

// An artifact's gated norm in two steps (GatedNormPartsArgs), its rows split over `ranks` ranks as
// tensor parallelism splits the channels: each rank's sums of squares added on the host as the
// all-reduce adds them, then each rank's scale step; together they equal the whole norm.
struct PartsCase {
  int width, groups, ranks;
};

TEST(GatedNormParts, RanksTogetherEqualTheWholeNorm) {
  testing::require_device();
  for (const PartsCase c : {PartsCase{512, 1, 2}, PartsCase{1024, 2, 4}, PartsCase{768, 4, 2}, PartsCase{256, 1, 1},
                            PartsCase{2560, 1, 4}}) {
    SCOPED_TRACE(::testing::Message() << c.width << " channels, " << c.groups << " groups, " << c.ranks << " ranks");
    const int rows = 5, local = c.width / c.ranks, group = c.width / c.groups, local_group = std::min(local, group);
    const int64_t count = (rows * c.groups + 3) / 4 * 4;
    std::mt19937 rng(c.width + c.ranks);
    const int64_t z_stride = c.width + 3;
    const auto y = testing::random_vector(size_t(rows) * c.width, -2.f, 2.f, rng);
    const auto z = testing::random_vector(size_t(rows) * z_stride, -3.f, 3.f, rng);
    const auto weight = testing::random_vector(c.width, 0.5f, 1.5f, rng);
    std::vector<float> expected(y.size());
    cpu::gated_rmsnorm(y.data(), z.data(), z_stride, weight.data(), expected.data(), rows, c.width, group, 1e-5f);

    std::vector<std::vector<float>> ys(c.ranks), zs(c.ranks), ws(c.ranks);
    std::vector<float> total(count, 0.f);
    std::vector<kernels::GatedNormPartsArgs> args(c.ranks);
    std::vector<std::unique_ptr<testing::DeviceBuffer<float>>> buffers;
    auto upload = [&](const std::vector<float>& v) {
      buffers.push_back(std::make_unique<testing::DeviceBuffer<float>>(v));
      return buffers.back()->get();
    };
    for (int r = 0; r < c.ranks; ++r) {
      for (int i = 0; i < rows; ++i) {
        ys[r].insert(ys[r].end(), y.begin() + i * c.width + r * local, y.begin() + i * c.width + (r + 1) * local);
        zs[r].insert(zs[r].end(), z.begin() + i * z_stride + r * local, z.begin() + i * z_stride + (r + 1) * local);
      }
      ws[r].assign(weight.begin() + r * local, weight.begin() + (r + 1) * local);
      kernels::GatedNormPartsArgs& a = args[r];
      a.rows = rows;
      a.width = local;
      a.y = upload(ys[r]);
      a.z = upload(zs[r]);
      a.z_stride = local;
      a.groups = c.groups;
      a.first_group = r * local / group;
      a.local_group_size = local_group;
      a.group_size = group;
      a.weight = upload(ws[r]);
      a.sums = upload(std::vector<float>(count, -1.f));
      a.sums_count = count;
      a.out = upload(std::vector<float>(ys[r].size(), 0.f));
      ASSERT_TRUE(kernels::gated_norm_parts_supported(a));
      ASSERT_EQ(kernels::launch_gated_sum_squares(a, nullptr), cudaSuccess);
      std::vector<float> sums(count);
      ASSERT_EQ(cudaMemcpy(sums.data(), a.sums, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t g = i % c.groups;
        const bool mine = i < rows * c.groups && g >= a.first_group && g < a.first_group + local / local_group;
        if (mine) {
          EXPECT_GT(sums[i], 0.f) << "slot " << i;
        } else {
          EXPECT_EQ(sums[i], 0.f) << "slot " << i << " belongs to another rank's groups (or the pad)";
        }
        total[i] += sums[i];
      }
    }
    std::vector<float> got(y.size());
    for (int r = 0; r < c.ranks; ++r) {
      ASSERT_EQ(cudaMemcpy(args[r].sums, total.data(), count * 4, cudaMemcpyHostToDevice), cudaSuccess);
      args[r].out = const_cast<float*>(args[r].y);  // in place, as the engine runs it
      ASSERT_EQ(kernels::launch_gated_norm_scale(args[r], nullptr), cudaSuccess);
      std::vector<float> out(ys[r].size());
      ASSERT_EQ(cudaMemcpy(out.data(), args[r].out, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int i = 0; i < rows; ++i)
        std::copy(out.begin() + i * local, out.begin() + (i + 1) * local, got.begin() + i * c.width + r * local);
    }
    EXPECT_LT(testing::max_relative_error(got, expected, 1e-3), 1e-4);
  }
}

}  // namespace
}  // namespace ssdq
