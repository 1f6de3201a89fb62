// cuBLASLt projections against cpu::matmul_wt: bf16 out, fp32 out, fp32 accumulate (the
// residual add of out_proj), strided input rows, decode (m = 1) and prefill shapes.
#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include "runtime/cpu_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

struct Case {
  int m, n, k;
  bool fp32_out, accumulate;
  bool fp16 = false;  // fp16 inputs (and output) instead of bf16
};

class Gemm : public ::testing::TestWithParam<Case> {};

TEST_P(Gemm, MatchesCpuReference) {
  testing::require_device();
  const Case c = GetParam();
  std::mt19937 rng(c.m * 3 + c.n + c.k);
  const int64_t ldx = c.k + 8;
  auto round = [&](std::vector<float> v) {
    for (float& e : v) e = c.fp16 ? half_to_float(float_to_half(e)) : bf16_to_float(float_to_bf16(e));
    return v;
  };
  auto to_bits = [&](const std::vector<float>& v) {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = c.fp16 ? float_to_half(v[i]) : float_to_bf16(v[i]);
    return bits;
  };
  auto from_bits = [&](const std::vector<uint16_t>& bits) {
    std::vector<float> v(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) v[i] = c.fp16 ? half_to_float(bits[i]) : bf16_to_float(bits[i]);
    return v;
  };
  auto x = round(testing::random_vector(size_t(c.m) * ldx, -1.f, 1.f, rng));
  auto w = round(testing::random_vector(size_t(c.n) * c.k, -1.f, 1.f, rng));
  auto base = testing::random_vector(size_t(c.m) * c.n, -5.f, 5.f, rng);
  std::vector<float> packed_x(size_t(c.m) * c.k), expected(size_t(c.m) * c.n);
  for (int r = 0; r < c.m; ++r) std::copy_n(x.begin() + r * ldx, c.k, packed_x.begin() + r * c.k);
  cpu::matmul_wt(packed_x.data(), w.data(), expected.data(), c.m, c.k, c.n);
  if (c.accumulate)
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += base[i];
  void* workspace = nullptr;
  ASSERT_EQ(cudaMalloc(&workspace, 32 << 20), cudaSuccess);
  kernels::Gemm gemm(workspace, 32 << 20);
  testing::DeviceBuffer<uint16_t> d_x(to_bits(x)), d_w(to_bits(w)),
      d_out16(std::vector<uint16_t>(expected.size()));
  testing::DeviceBuffer<float> d_out32(base);
  kernels::GemmArgs args;
  args.m = c.m;
  args.n = c.n;
  args.k = c.k;
  args.in_type = c.fp16 ? kernels::ElementType::kF16 : kernels::ElementType::kBF16;
  args.x = d_x.get();
  args.ldx = ldx;
  args.w = d_w.get();
  args.ldout = c.n;
  args.out_type = c.fp32_out ? kernels::ElementType::kF32 : args.in_type;
  args.out = c.fp32_out ? static_cast<void*>(d_out32.get()) : static_cast<void*>(d_out16.get());
  args.accumulate = c.accumulate;
  gemm.run(args, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = c.fp32_out ? d_out32.to_host() : from_bits(d_out16.to_host());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - expected[i]));
    scale = std::max(scale, std::abs(double(expected[i])));
  }
  EXPECT_LT(diff / scale, c.fp32_out ? 1e-4 : (c.fp16 ? 2e-3 : 1e-2)) << "max |Δ| " << diff << " of max " << scale;
  cudaFree(workspace);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Gemm,
                         ::testing::Values(Case{1, 1288, 256, false, false}, Case{1, 256, 512, true, true},
                                           Case{300, 1288, 256, false, false}, Case{77, 2560, 5120, true, true},
                                           Case{2048, 10576, 2560, false, false}, Case{5, 50288, 256, true, false},
                                           Case{1, 1288, 256, false, false, true}, Case{300, 2560, 5120, true, true, true},
                                           Case{64, 4096, 1024, false, false, true}));

}  // namespace
}  // namespace ssdq
