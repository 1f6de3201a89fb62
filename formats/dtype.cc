#include "formats/dtype.h"

#include <array>
#include <cmath>

namespace ssdq {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
  bool is_float;
};

constexpr std::array<DTypeInfo, 15> kDTypes = {{
    {DType::BOOL, "BOOL", 1, false},   {DType::U8, "U8", 1, false},
    {DType::I8, "I8", 1, false},       {DType::I16, "I16", 2, false},
    {DType::U16, "U16", 2, false},     {DType::I32, "I32", 4, false},
    {DType::U32, "U32", 4, false},     {DType::I64, "I64", 8, false},
    {DType::U64, "U64", 8, false},     {DType::F16, "F16", 2, true},
    {DType::BF16, "BF16", 2, true},    {DType::F32, "F32", 4, true},
    {DType::F64, "F64", 8, true},      {DType::F8_E4M3, "F8_E4M3", 1, true},
    {DType::F8_E5M2, "F8_E5M2", 1, true},
}};

const DTypeInfo& info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

}  // namespace

size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }
bool dtype_is_float(DType dtype) { return info(dtype).is_float; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kDTypes)
    if (entry.name == name) return entry.dtype;
  return std::nullopt;
}

float half_to_float(uint16_t bits) {
  const uint32_t sign = (bits >> 15) & 1u;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return sign ? -magnitude : magnitude;
}

uint16_t float_to_half(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  const uint16_t sign = static_cast<uint16_t>((word >> 16) & 0x8000u);
  const uint32_t abs = word & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;                 // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;                // overflow (incl. inf) after rounding
  if (abs < 0x38800000u) {                                      // subnormal half or zero
    // value = abs_float; half subnormal unit = 2^-24
    float magnitude;
    std::memcpy(&magnitude, &abs, sizeof magnitude);
    return sign | static_cast<uint16_t>(std::nearbyint(magnitude * 16777216.0f));
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);         // round mantissa to 10 bits, ties to even
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

float fp8_e4m3_to_float(uint8_t bits) {
  const int sign = bits >> 7, exponent = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return NAN;
  float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                  : std::ldexp(static_cast<float>(mantissa | 8), exponent - 10);
  return sign ? -magnitude : magnitude;
}

float fp8_e5m2_to_float(uint8_t bits) { return half_to_float(static_cast<uint16_t>(bits) << 8); }

}  // namespace ssdq
