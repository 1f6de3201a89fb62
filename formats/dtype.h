// Element types of stored tensors and the float conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace ssdq {

enum class DType : uint8_t { BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64, F8_E4M3, F8_E5M2 };

size_t dtype_size(DType dtype);
// Safetensors spelling: "F32", "BF16", "I8", ...
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);
bool dtype_is_float(DType dtype);

inline float bf16_to_float(uint16_t bits) {
  uint32_t word = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &word, sizeof out);
  return out;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t float_to_bf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  if ((word & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((word >> 16) | 0x40u);
  word += 0x7fffu + ((word >> 16) & 1u);
  return static_cast<uint16_t>(word >> 16);
}

float half_to_float(uint16_t bits);
uint16_t float_to_half(float value);
float fp8_e4m3_to_float(uint8_t bits);
float fp8_e5m2_to_float(uint8_t bits);

}  // namespace ssdq
