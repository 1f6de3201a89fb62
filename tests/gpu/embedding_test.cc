// Embedding gather into fp32 against the host table.
#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include "model/quantizer.h"
#include "quant/weight_formats.h"
#include "model/quantized_model.h"
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

  // An fp32 table (a quantized artifact's float embedding) is copied as is.
  const auto table32 = testing::random_vector(size_t(vocab) * dim, -1.f, 1.f, rng);
  testing::DeviceBuffer<float> d_table32(table32);
  args.table = d_table32.get();
  args.table_type = kernels::EmbeddingArgs::Table::kF32;
  ASSERT_EQ(kernels::launch_embedding(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto out32 = d_out.to_host();
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < dim; ++i) ASSERT_EQ(out32[r * dim + i], table32[int64_t(tokens[r]) * dim + i]);

  // An fp16 table (an artifact's fp16-exact float table) widens exactly.
  std::vector<uint16_t> table16(table32.size());
  for (size_t i = 0; i < table32.size(); ++i) table16[i] = float_to_half(table32[i]);
  testing::DeviceBuffer<uint16_t> d_table16(table16);
  args.table = d_table16.get();
  args.table_type = kernels::EmbeddingArgs::Table::kF16;
  ASSERT_EQ(kernels::launch_embedding(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto out16 = d_out.to_host();
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < dim; ++i) ASSERT_EQ(out16[r * dim + i], half_to_float(table16[int64_t(tokens[r]) * dim + i]));
}

// Head-to-toe artifacts: the table quantized per row (int8, or int4 packed), dequantized exactly as
// the CPU runtime's row_to_float.
TEST(Embedding, DequantizesQuantizedRowsExactly) {
  testing::require_device();
  const int vocab = 700, dim = 256, rows = 9;
  std::mt19937 rng(6);
  auto table = testing::random_vector(size_t(vocab) * dim, -1.f, 1.f, rng);
  std::vector<int32_t> tokens(rows);
  for (auto& t : tokens) t = rng() % vocab;
  tokens[0] = vocab - 1;
  for (QuantBits bits : {QuantBits::kInt8, QuantBits::kInt4}) {
    WeightMatrix w = rtn_weight(table, vocab, dim, bits, /*group_size=*/0);  // per row
    if (bits == QuantBits::kInt4) w.quantized.values[size_t(tokens[1]) * dim + 5] = -8;  // the nibble's extreme
    std::vector<int8_t> bytes = w.quantized.values;
    if (bits == QuantBits::kInt4) {
      const std::vector<uint8_t> packed = pack_int4(w.quantized.values.data(), int64_t(vocab) * dim);
      bytes.assign(packed.begin(), packed.end());
    }
    testing::DeviceBuffer<int8_t> d_table(bytes);
    testing::DeviceBuffer<float> d_scales(w.quantized.scales), d_out(std::vector<float>(size_t(rows) * dim));
    testing::DeviceBuffer<int32_t> d_tokens(tokens);
    kernels::EmbeddingArgs args;
    args.rows = rows;
    args.dim = dim;
    args.tokens = d_tokens.get();
    args.table = d_table.get();
    args.table_type = bits == QuantBits::kInt8 ? kernels::EmbeddingArgs::Table::kInt8Rows
                                               : kernels::EmbeddingArgs::Table::kInt4Rows;
    args.row_scales = d_scales.get();
    args.out = d_out.get();
    ASSERT_TRUE(kernels::embedding_supported(args));
    ASSERT_EQ(kernels::launch_embedding(args, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto out = d_out.to_host();
    std::vector<float> expected(dim);
    for (int r = 0; r < rows; ++r) {
      w.row_to_float(tokens[r], expected.data());
      for (int i = 0; i < dim; ++i) ASSERT_EQ(out[r * dim + i], expected[i]) << "row " << r << " column " << i;
    }
  }
}

}  // namespace
}  // namespace ssdq
