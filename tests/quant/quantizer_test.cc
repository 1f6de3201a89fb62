// Symmetric RTN quantizers and int4 packing: exact values, round-trip bounds, clamping, layouts.
#include "model/quantizer.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "formats/error.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;

std::vector<float> random_matrix(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(count);
  for (float& v : out) v = normal(rng);
  return out;
}

TEST(Quantizer, RangesAndScales) {
  EXPECT_EQ(quant_max(QuantBits::kInt8), 127);
  EXPECT_EQ(quant_min(QuantBits::kInt8), -127);
  EXPECT_EQ(quant_max(QuantBits::kInt4), 7);
  EXPECT_EQ(quant_min(QuantBits::kInt4), -8);
  EXPECT_EQ(scale_from_absmax(12.7f, QuantBits::kInt8), 12.7f / 127.0f);
  EXPECT_EQ(scale_from_absmax(3.5f, QuantBits::kInt4), 0.5f);
  EXPECT_EQ(scale_from_absmax(0.0f, QuantBits::kInt8), 1.0f);
  EXPECT_EQ(scale_from_absmax(std::numeric_limits<float>::denorm_min(), QuantBits::kInt8), 1.0f);  // underflows
  EXPECT_THAT([] { scale_from_absmax(-1.0f, QuantBits::kInt8); }, ::testing::Throws<Error>());
  EXPECT_THAT([] { scale_from_absmax(std::numeric_limits<float>::infinity(), QuantBits::kInt8); },
              ::testing::Throws<Error>());
}

TEST(Quantizer, RoundsHalfToEvenAndClamps) {
  // scale 0.5: x / scale = 2x exactly.
  EXPECT_EQ(quantize_value(0.25f, 0.5f, QuantBits::kInt8), 0);    // 0.5 -> 0
  EXPECT_EQ(quantize_value(0.75f, 0.5f, QuantBits::kInt8), 2);    // 1.5 -> 2
  EXPECT_EQ(quantize_value(1.25f, 0.5f, QuantBits::kInt8), 2);    // 2.5 -> 2
  EXPECT_EQ(quantize_value(-1.25f, 0.5f, QuantBits::kInt8), -2);  // -2.5 -> -2
  EXPECT_EQ(quantize_value(-1.75f, 0.5f, QuantBits::kInt8), -4);  // -3.5 -> -4
  EXPECT_EQ(quantize_value(1000.0f, 0.5f, QuantBits::kInt8), 127);
  EXPECT_EQ(quantize_value(-1000.0f, 0.5f, QuantBits::kInt8), -127);
  EXPECT_EQ(quantize_value(1000.0f, 0.5f, QuantBits::kInt4), 7);
  EXPECT_EQ(quantize_value(-1000.0f, 0.5f, QuantBits::kInt4), -8);
  EXPECT_EQ(quantize_value(-4.0f, 0.5f, QuantBits::kInt4), -8);
  EXPECT_EQ(quantize_value(std::numeric_limits<float>::infinity(), 0.5f, QuantBits::kInt4), 7);
  EXPECT_EQ(quantize_value(std::nanf(""), 0.5f, QuantBits::kInt8), 0);
  EXPECT_EQ(dequantize_value(-3, 0.5f), -1.5f);
}

TEST(Quantizer, PerTensorExactValues) {
  const std::vector<float> w = {1.0f, -2.0f, 0.5f, 3.5f, -3.5f, 0.2f};  // absmax 3.5 -> int4 scale 0.5
  const QuantizedMatrix q = quantize_per_tensor(w.data(), 2, 3, QuantBits::kInt4);
  ASSERT_EQ(q.scales.size(), 1u);
  EXPECT_EQ(q.scales[0], 0.5f);
  EXPECT_EQ(q.values, (std::vector<int8_t>{2, -4, 1, 7, -7, 0}));  // 0.5/0.5 = 1; 0.2/0.5 = 0.4 -> 0
  EXPECT_EQ(dequantize(q), (std::vector<float>{1.0f, -2.0f, 0.5f, 3.5f, -3.5f, 0.0f}));
}

TEST(Quantizer, PerChannelExactValues) {
  const std::vector<float> w = {127.0f, -63.5f, 1.0f,  // absmax 127 -> scale 1
                                0.0f, 0.0f, 0.0f,      // all zero -> scale 1, values 0
                                -2.54f, 1.27f, 0.0f};  // absmax 2.54 -> scale 0.02
  const QuantizedMatrix q = quantize_per_channel(w.data(), 3, 3, QuantBits::kInt8);
  EXPECT_EQ(q.granularity, Granularity::kPerChannel);
  EXPECT_EQ(q.group_size, 3);
  EXPECT_EQ(q.scales, (std::vector<float>{1.0f, 1.0f, 2.54f / 127.0f}));
  EXPECT_EQ(q.values, (std::vector<int8_t>{127, -64, 1, 0, 0, 0, -127, 64, 0}));  // -63.5 -> -64 (even)
}

TEST(Quantizer, PerGroupWithShorterLastGroup) {
  // 2 rows of 5 columns, groups of 2: columns {0,1}, {2,3}, {4}.
  const std::vector<float> w = {7.0f, -1.0f, 0.0f, 14.0f, -0.7f,  //
                                1.0f, 1.0f, 2.0f, 3.0f, 35.0f};
  const QuantizedMatrix q = quantize_per_group(w.data(), 2, 5, QuantBits::kInt4, 2);
  EXPECT_EQ(q.groups_per_row(), 3);
  EXPECT_EQ(q.scales, (std::vector<float>{1.0f, 2.0f, 0.1f, 1.0f / 7.0f, 3.0f / 7.0f, 5.0f}));
  EXPECT_EQ(q.scale_index(1, 4), 5);
  EXPECT_EQ(q.values, (std::vector<int8_t>{7, -1, 0, 7, -7, 7, 7, 5, 7, 7}));
}

TEST(Quantizer, RoundTripErrorIsAtMostHalfAScale) {
  const int64_t rows = 16, cols = 300;
  const std::vector<float> w = random_matrix(rows * cols, 1);
  for (QuantBits bits : {QuantBits::kInt8, QuantBits::kInt4}) {
    for (const QuantizedMatrix& q : {quantize_per_tensor(w.data(), rows, cols, bits),
                                     quantize_per_channel(w.data(), rows, cols, bits),
                                     quantize_per_group(w.data(), rows, cols, bits, 128)}) {
      const std::vector<float> back = dequantize(q);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const float scale = q.scales[q.scale_index(r, c)];
          const int8_t v = q.values[r * cols + c];
          ASSERT_GE(v, quant_min(bits));
          ASSERT_LE(v, quant_max(bits));
          ASSERT_LE(std::abs(back[r * cols + c] - w[r * cols + c]), scale * 0.5f * (1 + 1e-6f)) << r << "," << c;
        }
    }
  }
}

TEST(Quantizer, GroupScalesAreGroupMaxima) {
  const int64_t rows = 3, cols = 260, group = 128;
  const std::vector<float> w = random_matrix(rows * cols, 2);
  const QuantizedMatrix q = quantize_per_group(w.data(), rows, cols, QuantBits::kInt4, group);
  ASSERT_EQ(q.scales.size(), 9u);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < 3; ++g) {
      float absmax = 0;
      for (int64_t c = g * group; c < std::min(cols, (g + 1) * group); ++c) absmax = std::max(absmax, std::abs(w[r * cols + c]));
      EXPECT_EQ(q.scales[r * 3 + g], absmax / 7.0f);
    }
}

TEST(Quantizer, RejectsBadInput) {
  std::vector<float> w = {1.0f, 2.0f, std::nanf(""), 4.0f};
  EXPECT_THAT([&] { quantize_per_channel(w.data(), 2, 2, QuantBits::kInt8); },
              ::testing::ThrowsMessage<Error>(HasSubstr("non-finite value nan at row 1, column 0")));
  w[2] = 3.0f;
  EXPECT_THAT([&] { quantize_per_group(w.data(), 2, 2, QuantBits::kInt8, 0); },
              ::testing::ThrowsMessage<Error>(HasSubstr("group size must be positive")));
  EXPECT_THAT([&] { quantize_per_tensor(w.data(), 2, 0, QuantBits::kInt8); },
              ::testing::ThrowsMessage<Error>(HasSubstr("invalid matrix shape [2, 0]")));
  QuantizedMatrix q = quantize_per_channel(w.data(), 2, 2, QuantBits::kInt8);
  q.scales.pop_back();
  EXPECT_THAT([&] { dequantize(q); }, ::testing::ThrowsMessage<Error>(HasSubstr("do not match shape [2, 2]")));
}

TEST(Int4Packing, LowNibbleFirst) {
  const std::vector<int8_t> values = {1, -2, 7, -8, 3};
  const std::vector<uint8_t> packed = pack_int4(values.data(), 5);
  EXPECT_EQ(packed, (std::vector<uint8_t>{0xE1, 0x87, 0x03}));
  EXPECT_EQ(unpack_int4(packed.data(), 5), values);
}

TEST(Int4Packing, EveryByteRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const uint8_t byte = static_cast<uint8_t>(b);
    const std::vector<int8_t> values = unpack_int4(&byte, 2);
    for (int8_t v : values) {
      ASSERT_GE(v, -8);
      ASSERT_LE(v, 7);
    }
    EXPECT_EQ(values[0], static_cast<int8_t>((b & 0xF) >= 8 ? (b & 0xF) - 16 : (b & 0xF)));
    EXPECT_EQ(pack_int4(values.data(), 2), std::vector<uint8_t>{byte}) << b;
  }
}

TEST(Int4Packing, RejectsOutOfRangeValues) {
  const std::vector<int8_t> values = {0, 8};
  EXPECT_THAT([&] { pack_int4(values.data(), 2); },
              ::testing::ThrowsMessage<Error>(HasSubstr("value 8 at index 1 is outside [-8, 7]")));
}

// Long runs are packed in blocks: every length around the block size (64) and odd lengths give the
// bytes of packing value by value, and a value out of range is named wherever it lies (in a whole
// block, in the tail, past an earlier good block).
TEST(Int4Packing, LongRunsAreTheBytesOfTheValues) {
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> dist(-8, 7);
  for (const int64_t count : {int64_t{63}, int64_t{64}, int64_t{65}, int64_t{127}, int64_t{128}, int64_t{1001}}) {
    std::vector<int8_t> values(count);
    for (int8_t& v : values) v = static_cast<int8_t>(dist(rng));
    std::vector<uint8_t> expected((count + 1) / 2, 0);
    for (int64_t i = 0; i < count; ++i) expected[i / 2] |= static_cast<uint8_t>((values[i] & 0x0F) << (4 * (i % 2)));
    EXPECT_EQ(pack_int4(values.data(), count), expected) << count;
    EXPECT_EQ(unpack_int4(expected.data(), count), values) << count;
    for (const int64_t bad : {int64_t{0}, count / 2, count - 1}) {
      std::vector<int8_t> wrong = values;
      wrong[bad] = bad % 2 ? -9 : 8;
      EXPECT_THAT([&] { pack_int4(wrong.data(), count); },
                  ::testing::ThrowsMessage<Error>(HasSubstr(fmt::format("at index {} is outside [-8, 7]", bad))))
          << count;
    }
  }
}

}  // namespace
}  // namespace ssdq
