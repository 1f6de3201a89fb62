// Embedding gather into fp32 against the host table.
#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

TEST(Embedding, GathersRowsAsFloat) {
  testing::require_device();
  const int vocab = 1000, dim = 384, rows = 17;
  std::mt19937 rng(5);
  auto table = testing::bf16_rounded(testing::random_vector(size_t(vocab) * dim, -1.f, 1.f, rng));
  std::vector<int32_t> tokens(rows);
  for (auto& t : tokens) t = rng() % vocab;
  tokens[3] = vocab - 1;
  testing::DeviceBuffer<uint16_t> d_table(testing::to_bf16(table));
  testing::DeviceBuffer<int32_t> d_tokens(tokens);
  testing::DeviceBuffer<float> d_out(std::vector<float>(size_t(rows) * dim));
  kernels::EmbeddingArgs args;
  args.rows = rows;
  args.dim = dim;
  args.tokens = d_tokens.get();
  args.table = testing::as_bf16(d_table);
  args.out = d_out.get();
  ASSERT_EQ(kernels::launch_embedding(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto out = d_out.to_host();
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < dim; ++i) ASSERT_EQ(out[r * dim + i], table[int64_t(tokens[r]) * dim + i]);
}

}  // namespace
}  // namespace ssdq
