// The decode-step SSD kernel against the CPU reference cpu::ssd_step, over several shapes and
// several consecutive steps (the state carries over).
#include "kernels/ssd_state_update.h"

#include <gtest/gtest.h>

#include "runtime/cpu_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

struct Shape {
  int batch, heads, headdim, groups, dstate;
};

class SsdStateUpdate : public ::testing::TestWithParam<Shape> {};

TEST_P(SsdStateUpdate, MatchesCpuReferenceOverSteps) {
  testing::require_device();
  const Shape s = GetParam();
  std::mt19937 rng(1234 + s.heads * 7 + s.dstate);
  const int64_t xw = s.heads * s.headdim, bcw = s.groups * s.dstate;
  std::vector<float> A = testing::random_vector(s.heads, -8.f, -0.5f, rng);
  std::vector<float> D = testing::random_vector(s.heads, 0.5f, 1.5f, rng);
  std::vector<float> state = testing::random_vector(size_t(s.batch) * xw * s.dstate, -1.f, 1.f, rng);
  testing::DeviceBuffer<float> d_A(A), d_D(D), d_state(state);
  std::vector<float> cpu_state = state;
  for (int step = 0; step < 4; ++step) {
    std::vector<float> x = testing::random_vector(s.batch * xw, -2.f, 2.f, rng);
    std::vector<float> bc = testing::random_vector(s.batch * 2 * bcw, -1.f, 1.f, rng);  // rows [B | C]
    std::vector<float> dt = testing::random_vector(s.batch * s.heads, 0.001f, 0.3f, rng);
    std::vector<float> y_cpu(s.batch * xw);
    for (int b = 0; b < s.batch; ++b) {
      cpu::SsdInputs in{x.data() + b * xw, xw, bc.data() + b * 2 * bcw, bc.data() + b * 2 * bcw + bcw, 2 * bcw,
                        dt.data() + b * s.heads, A.data(), D.data()};
      cpu::ssd_step({s.heads, s.headdim, s.groups, s.dstate}, in, cpu_state.data() + b * xw * s.dstate,
                    y_cpu.data() + b * xw);
    }
    testing::DeviceBuffer<float> d_x(x), d_bc(bc), d_dt(dt), d_y(std::vector<float>(s.batch * xw));
    kernels::SsdStateUpdateArgs args;
    args.batch = s.batch;
    args.heads = s.heads;
    args.headdim = s.headdim;
    args.groups = s.groups;
    args.dstate = s.dstate;
    args.x = d_x.get();
    args.x_stride = xw;
    args.B = d_bc.get();
    args.C = d_bc.get() + bcw;
    args.bc_stride = 2 * bcw;
    args.dt = d_dt.get();
    args.A = d_A.get();
    args.D = d_D.get();
    args.state = d_state.get();
    args.y = d_y.get();
    ASSERT_TRUE(kernels::ssd_state_update_supported(args));
    ASSERT_EQ(kernels::launch_ssd_state_update(args, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_LT(testing::max_relative_error(d_y.to_host(), y_cpu), 1e-4) << "step " << step;
    EXPECT_LT(testing::max_relative_error(d_state.to_host(), cpu_state), 1e-4) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SsdStateUpdate,
                         ::testing::Values(Shape{1, 8, 64, 1, 128}, Shape{3, 8, 64, 4, 128}, Shape{2, 80, 64, 1, 128},
                                           Shape{5, 16, 32, 8, 64}, Shape{1, 4, 64, 2, 256}, Shape{2, 6, 48, 3, 96}));

TEST(SsdStateUpdate, RejectsUnsupportedShapes) {
  kernels::SsdStateUpdateArgs args;
  args.batch = 1;
  args.heads = 6;
  args.headdim = 64;
  args.groups = 4;  // 6 heads do not split into 4 groups
  args.dstate = 128;
  EXPECT_FALSE(kernels::ssd_state_update_supported(args));
  args.groups = 1;
  args.dstate = 100;  // not a multiple of 32
  EXPECT_FALSE(kernels::ssd_state_update_supported(args));
  EXPECT_EQ(kernels::launch_ssd_state_update(args, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ssdq
