// The rotated, quantized out_proj input against the quantized CPU layer's steps: without the gate
// the Hadamard rotation and the int8 quantization are bit-identical (every supported K); with the
// gated RMSNorm in front, int8 outputs are within one step, rarely off. Every schedule (one block a
// row; a row over a cluster of blocks, on sm_90; a row in one block's registers, on the shapes it
// takes) is checked on every shape, the cluster's and the registers' gated shapes also with z
// loaded before the kernel's wait for the previous grid.
#include "kernels/hadamard_quant.h"

#include <gtest/gtest.h>

#include <cstring>

#include "model/hadamard.h"
#include "model/quantizer.h"
#include "runtime/cpu_ops.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/int8_check.h"

namespace ssdq {
namespace {

using Schedule = kernels::HadamardQuantSchedule;

struct Case {
  int rows, n, groups;
  bool gated;
  Schedule schedule;
  bool host_matrix = false;  // pass H_K's host copy too: kRowPerBlock's unrolled mix for K 12, 20, 28
  bool odd_strides = false;  // rows of y and z not 16-byte aligned: the gated norm's scalar loads
  bool z_early = false;      // z_before_previous_grid: the gates loaded before the kernel's wait
};

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  return fmt::format("rows{}_n{}_g{}{}_{}{}{}{}", info.param.rows, info.param.n, info.param.groups,
                     info.param.gated ? "_gated" : "", info.param.schedule == Schedule::kCluster     ? "cluster"
                     : info.param.schedule == Schedule::kRegisters ? "registers"
                                                                   : "rows",
                     info.param.host_matrix ? "_unrolled" : "", info.param.odd_strides ? "_odd_strides" : "",
                     info.param.z_early ? "_z_early" : "");
}

// A cluster case on a device without clusters is skipped; on sm_90 it must run.
bool schedule_available(Schedule schedule) {
  return schedule != Schedule::kCluster || testing::compute_capability_major() >= 9;
}

class HadamardQuant : public ::testing::TestWithParam<Case> {};

TEST_P(HadamardQuant, MatchesTheCpuSteps) {
  testing::require_device();
  const Case c = GetParam();
  if (!schedule_available(c.schedule)) GTEST_SKIP() << "thread block clusters need sm_90";
  std::mt19937 rng(c.rows * 5 + c.n);
  const int64_t ldy = c.n + (c.odd_strides ? 1 : 8), z_stride = c.n + (c.odd_strides ? 3 : 40);
  auto y = testing::random_vector(size_t(c.rows) * ldy, -2.f, 2.f, rng);
  auto z = testing::random_vector(size_t(c.rows) * z_stride, -3.f, 3.f, rng);
  auto weight = testing::random_vector(c.n, 0.5f, 1.5f, rng);
  std::vector<float> x(size_t(c.rows) * c.n);
  if (c.gated) {
    std::vector<float> y_dense(x.size());
    for (int r = 0; r < c.rows; ++r) std::memcpy(&y_dense[size_t(r) * c.n], &y[size_t(r) * ldy], c.n * sizeof(float));
    cpu::gated_rmsnorm(y_dense.data(), z.data(), z_stride, weight.data(), x.data(), c.rows, c.n, c.n / c.groups, 1e-5f);
  } else {
    for (int r = 0; r < c.rows; ++r) std::memcpy(&x[size_t(r) * c.n], &y[size_t(r) * ldy], c.n * sizeof(float));
  }
  apply_hadamard_rows(x.data(), c.rows, c.n, /*normalized=*/true);
  const float scale = 3.0f / 127;  // some values saturate
  const int64_t k = hadamard_base_order(c.n);
  testing::DeviceBuffer<float> d_y(y), d_z(z), d_w(weight), d_f32(std::vector<float>(x.size()));
  const std::vector<int8_t> base = k > 1 ? hadamard_matrix(k) : std::vector<int8_t>(1, 1);
  testing::DeviceBuffer<int8_t> d_base(base), d_q(std::vector<int8_t>(x.size()));
  kernels::HadamardQuantArgs a;
  a.rows = c.rows;
  a.n = c.n;
  a.y = d_y.get();
  a.ldy = ldy;
  if (c.gated) {
    a.z = d_z.get();
    a.z_stride = z_stride;
    a.norm_weight = d_w.get();
    a.group_size = c.n / c.groups;
  }
  a.base_order = static_cast<int>(k);
  a.base_matrix = d_base.get();
  if (c.host_matrix) a.base_matrix_host = base.data();
  a.normalize = static_cast<float>(1.0 / std::sqrt(double(c.n)));
  a.out = d_q.get();
  a.out_scale = scale;
  a.schedule = c.schedule;
  a.z_before_previous_grid = c.z_early;
  ASSERT_TRUE(kernels::hadamard_quant_supported(a));
  ASSERT_EQ(kernels::launch_hadamard_quant(a, nullptr), cudaSuccess);
  a.out = d_f32.get();
  a.out_type = kernels::ElementType::kF32;
  ASSERT_EQ(kernels::launch_hadamard_quant(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int8_t> q = d_q.to_host();
  const std::vector<float> f = d_f32.to_host();
  if (c.z_early) {  // the gates loaded early: the same operations, so the same bits as loaded late
    a.z_before_previous_grid = false;
    ASSERT_EQ(kernels::launch_hadamard_quant(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> late = d_f32.to_host();
    ASSERT_EQ(std::memcmp(f.data(), late.data(), f.size() * sizeof(float)), 0);
  }
  if (c.gated) {
    testing::expect_int8_within_one_step(q, x, [&](size_t) { return scale; });
  } else {
    for (size_t i = 0; i < q.size(); ++i) {
      ASSERT_EQ(std::memcmp(&f[i], &x[i], sizeof(float)), 0) << "element " << i << ": " << f[i] << " vs " << x[i];
      ASSERT_EQ(q[i], quantize_value(x[i], scale, QuantBits::kInt8)) << "element " << i;
    }
  }
  if (c.gated) {
    EXPECT_LT(testing::max_relative_error(f, x, 1e-2), 1e-4);
  }
}

// rotate = false: the gated norm alone (the recipes without online Hadamard), any width.
class HadamardQuantWithoutRotation : public ::testing::TestWithParam<Schedule> {};

TEST_P(HadamardQuantWithoutRotation, IsTheGatedNorm) {
  testing::require_device();
  if (!schedule_available(GetParam())) GTEST_SKIP() << "thread block clusters need sm_90";
  const int rows = 6, n = 384, groups = 2;
  std::mt19937 rng(21);
  auto y = testing::random_vector(size_t(rows) * n, -2.f, 2.f, rng);
  auto z = testing::random_vector(size_t(rows) * n, -3.f, 3.f, rng);
  auto weight = testing::random_vector(n, 0.5f, 1.5f, rng);
  std::vector<float> expected(y.size());
  cpu::gated_rmsnorm(y.data(), z.data(), n, weight.data(), expected.data(), rows, n, n / groups, 1e-5f);
  testing::DeviceBuffer<float> d_y(y), d_z(z), d_w(weight), d_out(std::vector<float>(y.size()));
  kernels::HadamardQuantArgs a;
  a.rows = rows;
  a.n = n;
  a.y = d_y.get();
  a.ldy = n;
  a.z = d_z.get();
  a.z_stride = n;
  a.norm_weight = d_w.get();
  a.group_size = n / groups;
  a.rotate = false;
  a.schedule = GetParam();
  a.out = d_out.get();
  a.out_type = kernels::ElementType::kF32;
  ASSERT_TRUE(kernels::hadamard_quant_supported(a));  // 384 is no K·2^m of a rotation
  ASSERT_EQ(kernels::launch_hadamard_quant(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(testing::max_relative_error(d_out.to_host(), expected, 1e-2), 1e-4);
  a.rotate = true;
  EXPECT_FALSE(kernels::hadamard_quant_supported(a));
}

// kRegisters refuses what it does not take rather than computing it some other way.
TEST(HadamardQuantRegisters, RefusesShapesOutsideIt) {
  const std::vector<int8_t> h20 = hadamard_matrix(20);
  alignas(16) float y[8] = {};
  kernels::HadamardQuantArgs a;
  a.rows = 1;
  a.n = 5120;
  a.y = y;
  a.ldy = a.n;
  a.base_order = 20;
  a.base_matrix = reinterpret_cast<const int8_t*>(y);  // never read here
  a.base_matrix_host = h20.data();
  a.out = y;
  a.schedule = Schedule::kRegisters;
  EXPECT_TRUE(kernels::hadamard_quant_supported(a));
  a.base_matrix_host = nullptr;  // the unrolled mix needs H_K's host copy
  EXPECT_FALSE(kernels::hadamard_quant_supported(a));
  a.base_matrix_host = h20.data();
  a.ldy = a.n + 1;  // rows not 16-byte aligned
  EXPECT_FALSE(kernels::hadamard_quant_supported(a));
  a.ldy = a.n;
  a.n = 1280;  // m = 64 < 256
  EXPECT_FALSE(kernels::hadamard_quant_supported(a));
  a.n = 10240;  // more than 8192 values a row
  EXPECT_FALSE(kernels::hadamard_quant_supported(a));
  a.n = 5120;
  a.z = y;
  a.z_stride = a.n;
  a.norm_weight = y;
  a.group_size = 5120 / 40;  // groups of 128: not whole warps
  EXPECT_FALSE(kernels::hadamard_quant_supported(a));
}

std::vector<Case> cases() {
  const std::vector<Case> shapes = {{3, 256, 1, false},  {2, 768, 1, false}, {2, 1280, 1, false}, {2, 1792, 1, false},
                                    {5, 5120, 1, false}, {1, 8192, 8, false}, {1, 20480, 1, false}, {4, 5120, 1, true},
                                    {3, 8192, 8, true},  {2, 512, 2, true},   {40, 1280, 4, true},
                                    // enough rows for the narrow one-block-a-row kernel (prefill)
                                    {600, 5120, 1, true}, {600, 8192, 8, false},
                                    // rows too wide for the gated norm's shared-memory copy: its 16-byte
                                    // loads (K 12) or, with the 20-term mix, one float at a time
                                    {2, 12288, 4, true}, {2, 10240, 1, true},
                                    // K 12 and 28 at m ≥ 256 (kRegisters' mix), and m = 512 with K 12
                                    {2, 3072, 1, true}, {2, 7168, 4, true}, {3, 6144, 2, false}, {1, 6144, 3, true}};
  std::vector<Case> all;
  for (Schedule schedule : {Schedule::kRowPerBlock, Schedule::kCluster, Schedule::kRegisters})
    for (Case c : shapes) {
      c.schedule = schedule;
      if (schedule == Schedule::kRegisters) {  // its shapes: n ≤ 8192, m ≥ 256, H_K's host copy
        const int64_t k = hadamard_base_order(c.n);
        if (c.n > 8192 || c.n / k < 256) continue;
        c.host_matrix = true;
      }
      all.push_back(c);
      if (schedule == Schedule::kRowPerBlock && hadamard_base_order(c.n) > 1) {
        c.host_matrix = true;
        all.push_back(c);
      }
      if (schedule == Schedule::kRowPerBlock && c.gated) {
        c.odd_strides = true;
        all.push_back(c);
      }
      if (schedule != Schedule::kRowPerBlock && c.gated) {
        c.z_early = true;
        all.push_back(c);
      }
    }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Sizes, HadamardQuant, ::testing::ValuesIn(cases()), name_of);
INSTANTIATE_TEST_SUITE_P(Schedules, HadamardQuantWithoutRotation,
                         ::testing::Values(Schedule::kRowPerBlock, Schedule::kCluster));

}  // namespace
}  // namespace ssdq
