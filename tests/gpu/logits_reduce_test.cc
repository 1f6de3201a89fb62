// NLL and argmax of logit rows against cpu::nll and a host argmax.
#include "kernels/logits_reduce.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/cpu_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

TEST(LogitsReduce, NllAndArgmaxMatchCpu) {
  testing::require_device();
  // 1001: rows not 16-byte aligned (one logit a load); the others float4 loads, 256,000 a
  // Mamba2-8B vocabulary. Rows 1 and 2 hold their maximum twice (the lowest index wins).
  for (int vocab : {7, 1000, 1001, 50288, 256000}) {
    const int rows = 9;
    std::mt19937 rng(vocab);
    auto logits = testing::random_vector(size_t(rows) * vocab, -20.f, 20.f, rng);
    for (int r = 1; r <= 2; ++r) {
      float* row = logits.data() + int64_t(r) * vocab;
      row[vocab - 1] = row[vocab / 3 + r] = 25.f;
    }
    std::vector<int32_t> targets(rows);
    for (int r = 0; r < rows; ++r) targets[r] = rng() % vocab;
    testing::DeviceBuffer<float> d_logits(logits), d_nll{std::vector<float>(rows)};
    testing::DeviceBuffer<int32_t> d_targets(targets), d_argmax{std::vector<int32_t>(rows)};
    kernels::LogitsReduceArgs args;
    args.rows = rows;
    args.vocab = vocab;
    args.logits = d_logits.get();
    args.targets = d_targets.get();
    args.nll = d_nll.get();
    args.argmax = d_argmax.get();
    ASSERT_EQ(kernels::launch_logits_reduce(args, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto nll = d_nll.to_host();
    const auto argmax = d_argmax.to_host();
    for (int r = 0; r < rows; ++r) {
      const float* row = logits.data() + int64_t(r) * vocab;
      EXPECT_NEAR(nll[r], cpu::nll(row, vocab, targets[r]), 1e-4) << "vocab " << vocab << " row " << r;
      EXPECT_EQ(argmax[r], std::max_element(row, row + vocab) - row) << "vocab " << vocab << " row " << r;
    }
  }
}

}  // namespace
}  // namespace ssdq
