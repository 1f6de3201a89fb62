// Weight expansion for the prefill GEMMs (kernels/weight_unpack.h) against model/quantizer.h:
// int4 → int8 values, and int4 / int8 → fp16 of the dequantized values q·s.
#include <gtest/gtest.h>

#include "kernels/weight_unpack.h"
#include "model/quantizer.h"
#include "quant/weight_formats.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

struct Case {
  int rows, cols, bits, group_size;
};

class WeightUnpack : public ::testing::TestWithParam<Case> {};

TEST_P(WeightUnpack, MatchesTheCpuDequantization) {
  testing::require_device();
  const Case c = GetParam();
  std::mt19937 rng(c.rows * 31 + c.cols);
  const QuantBits bits = c.bits == 4 ? QuantBits::kInt4 : QuantBits::kInt8;
  const QuantizedMatrix q =
      rtn_weight(testing::random_vector(size_t(c.rows) * c.cols, -1.f, 1.f, rng), c.rows, c.cols, bits, c.group_size)
          .quantized;
  const std::vector<float> dense = dequantize(q);
  const std::vector<uint8_t> packed =
      c.bits == 4 ? pack_int4(q.values.data(), static_cast<int64_t>(q.values.size()))
                  : std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(q.values.data()),
                                         reinterpret_cast<const uint8_t*>(q.values.data()) + q.values.size());
  testing::DeviceBuffer<uint8_t> d_values(packed);
  testing::DeviceBuffer<float> d_scales(q.scales);
  testing::DeviceBuffer<uint16_t> d_f16(std::vector<uint16_t>(dense.size()));
  testing::DeviceBuffer<int8_t> d_s8(std::vector<int8_t>(dense.size()));
  kernels::WeightUnpackArgs u;
  u.rows = c.rows;
  u.cols = c.cols;
  u.bits = c.bits;
  u.values = d_values.get();
  u.scales = d_scales.get();
  u.group_size = static_cast<int>(q.group_size);
  u.out = d_f16.get();
  u.out_type = kernels::ElementType::kF16;
  ASSERT_EQ(kernels::launch_weight_unpack(u, nullptr), cudaSuccess);
  if (c.bits == 4) {
    u.out = d_s8.get();
    u.out_type = kernels::ElementType::kS8;
    ASSERT_EQ(kernels::launch_weight_unpack(u, nullptr), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> f16 = d_f16.to_host();
  for (size_t i = 0; i < dense.size(); ++i) ASSERT_EQ(f16[i], float_to_half(dense[i])) << "element " << i;
  if (c.bits == 4) {
    EXPECT_EQ(d_s8.to_host(), q.values);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, WeightUnpack,
                         ::testing::Values(Case{300, 256, 4, 64}, Case{1288, 256, 4, 128}, Case{256, 512, 8, 0},
                                           Case{7, 96, 4, 32}, Case{5, 40, 4, 8}));

TEST(WeightUnpack, RefusesOddInt4RowsAndInt8ToInt8) {
  uint8_t dummy[16];
  kernels::WeightUnpackArgs u;
  u.rows = 1;
  u.cols = 7;
  u.bits = 4;
  u.values = dummy;
  u.out = dummy;
  u.out_type = kernels::ElementType::kS8;
  EXPECT_FALSE(kernels::weight_unpack_supported(u));
  u.cols = 8;
  EXPECT_TRUE(kernels::weight_unpack_supported(u));
  u.bits = 8;
  EXPECT_FALSE(kernels::weight_unpack_supported(u));
}

}  // namespace
}  // namespace ssdq
