// Causal conv1d + SiLU against cpu::causal_conv1d_silu: lengths around the 64-token tile and
// below the kernel width, a non-zero starting state, strided input rows, and the state after.
#include "kernels/causal_conv1d.h"

#include <gtest/gtest.h>

#include "runtime/cpu_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

struct Case {
  int batch, seqlen, channels, width;
};

class CausalConv1d : public ::testing::TestWithParam<Case> {};

TEST_P(CausalConv1d, MatchesCpuReference) {
  testing::require_device();
  const Case c = GetParam();
  std::mt19937 rng(c.seqlen * 13 + c.channels);
  const int64_t stride = c.channels + 7;  // the conv input is a column slice of a wider row
  const int hist = c.width - 1;
  auto input = testing::bf16_rounded(testing::random_vector(size_t(c.batch) * c.seqlen * stride, -2.f, 2.f, rng));
  auto state = testing::bf16_rounded(testing::random_vector(size_t(c.batch) * c.channels * hist, -2.f, 2.f, rng));
  auto weight = testing::random_vector(size_t(c.channels) * c.width, -0.5f, 0.5f, rng);
  auto bias = testing::random_vector(c.channels, -0.2f, 0.2f, rng);
  std::vector<float> expected(size_t(c.batch) * c.seqlen * c.channels), expected_state = state;
  for (int b = 0; b < c.batch; ++b)
    cpu::causal_conv1d_silu(input.data() + int64_t(b) * c.seqlen * stride, stride, c.seqlen, c.channels, c.width,
                            weight.data(), bias.data(), expected_state.data() + int64_t(b) * c.channels * hist,
                            expected.data() + int64_t(b) * c.seqlen * c.channels);
  testing::DeviceBuffer<uint16_t> d_in(testing::to_bf16(input)), d_state(testing::to_bf16(state)),
      d_out(std::vector<uint16_t>(expected.size()));
  testing::DeviceBuffer<float> d_w(weight), d_b(bias);
  kernels::CausalConv1dArgs args;
  args.batch = c.batch;
  args.seqlen = c.seqlen;
  args.channels = c.channels;
  args.width = c.width;
  args.in = testing::as_bf16(d_in);
  args.in_stride = stride;
  args.weight = d_w.get();
  args.bias = d_b.get();
  args.state = testing::as_bf16(d_state);
  args.out = testing::as_bf16(d_out);
  ASSERT_EQ(kernels::launch_causal_conv1d(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(testing::max_relative_error(testing::from_bf16(d_out.to_host()), expected, 0.05), 1e-2);
  EXPECT_EQ(testing::from_bf16(d_state.to_host()), testing::bf16_rounded(expected_state));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CausalConv1d,
                         ::testing::Values(Case{1, 1, 640, 4}, Case{2, 2, 300, 4}, Case{3, 63, 130, 4},
                                           Case{2, 64, 256, 4}, Case{1, 65, 200, 4}, Case{2, 300, 1792, 4},
                                           Case{1, 5, 64, 2}, Case{2, 130, 96, 8}));

}  // namespace
}  // namespace ssdq
