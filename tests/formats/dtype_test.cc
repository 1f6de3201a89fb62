#include "formats/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ssdq {
namespace {

TEST(DType, NamesRoundTrip) {
  for (const char* name : {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F16", "BF16", "F32", "F64",
                           "F8_E4M3", "F8_E5M2"}) {
    auto dtype = dtype_from_name(name);
    ASSERT_TRUE(dtype.has_value()) << name;
    EXPECT_EQ(dtype_name(*dtype), name);
  }
  EXPECT_FALSE(dtype_from_name("F128").has_value());
}

TEST(DType, HalfConversionIsExactOnEveryHalf) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    float value = half_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    EXPECT_EQ(float_to_half(value), bits) << bits;
  }
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);  // tie to even
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);   // tie, even stays
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);   // tie, odd rounds up
}

TEST(DType, Fp8) {
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e5m2_to_float(0x3c), 1.0f);
}

}  // namespace
}  // namespace ssdq
