// Symmetric round-to-nearest-even quantizers (int8 and int4) and int4 packing: the reference
// definitions that the runtime and the CUDA kernels reproduce bit for bit.
//
// Conventions:
// - scale = absmax / qmax in fp32 (qmax 127 for int8, 7 for int4). When that is not positive
//   (absmax 0, or so small that the division underflows to 0) the scale is 1, so every value of
//   that block quantizes to 0 and nothing is ever divided by zero.
// - q = clamp(nearbyint(x / scale), qmin, qmax) with an IEEE fp32 division and the default
//   rounding mode (ties to even, like __float2int_rn); qmin is -127 for int8 (symmetric) and -8
//   for int4 (the full nibble, reachable only when a value exceeds its scale's absmax, as after
//   GPTQ's error feedback). NaN quantizes to 0 (what cvt.rni does on the GPU).
// - Dequantization is q * scale in fp32.
// - A matrix is [rows, cols] row-major (rows = output channels, cols = the input dimension).
//   Per-group scales cover `group_size` consecutive columns of one row; when cols is not a
//   multiple of group_size the last group of each row is shorter (cols - (groups-1)*group_size).
//   Scales are stored [rows, groups] row-major; per channel is per group with group_size = cols
//   (scales [rows]); per tensor has one scale.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace ssdq {

enum class QuantBits { kInt4 = 4, kInt8 = 8 };

constexpr int quant_max(QuantBits bits) { return bits == QuantBits::kInt8 ? 127 : 7; }
constexpr int quant_min(QuantBits bits) { return bits == QuantBits::kInt8 ? -127 : -8; }

// absmax / qmax, or 1 when that is not positive. absmax must be finite and >= 0.
float scale_from_absmax(float absmax, QuantBits bits);

inline int8_t quantize_value(float x, float scale, QuantBits bits) {
  const float r = std::nearbyint(x / scale);
  if (std::isnan(r)) return 0;
  const float lo = static_cast<float>(quant_min(bits)), hi = static_cast<float>(quant_max(bits));
  return static_cast<int8_t>(r < lo ? lo : (r > hi ? hi : r));
}
inline float dequantize_value(int8_t q, float scale) { return static_cast<float>(q) * scale; }

// Largest |x| over `count` values (NaN is ignored; check_finite first).
float abs_max(const float* x, int64_t count);
// Fails on a NaN or infinity in the [rows, cols] matrix, naming `what`, the row and the column.
void check_finite(const float* x, int64_t rows, int64_t cols, const char* what);

enum class Granularity { kPerTensor, kPerChannel, kPerGroup };

struct QuantizedMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  QuantBits bits = QuantBits::kInt8;
  Granularity granularity = Granularity::kPerChannel;
  int64_t group_size = 0;      // columns per scale within a row: cols unless kPerGroup
  std::vector<int8_t> values;  // [rows, cols], one int per element (int4 unpacked)
  std::vector<float> scales;   // kPerTensor: [1]; otherwise [rows, groups_per_row()]

  int64_t groups_per_row() const { return (cols + group_size - 1) / group_size; }
  int64_t scale_index(int64_t row, int64_t col) const {
    return granularity == Granularity::kPerTensor ? 0 : row * groups_per_row() + col / group_size;
  }
};

QuantizedMatrix quantize_per_tensor(const float* w, int64_t rows, int64_t cols, QuantBits bits);
QuantizedMatrix quantize_per_channel(const float* w, int64_t rows, int64_t cols, QuantBits bits);
// group_size > 0; the last group of a row may be shorter (see above). Every quantizer fails on a
// NaN or infinite weight (check_finite).
QuantizedMatrix quantize_per_group(const float* w, int64_t rows, int64_t cols, QuantBits bits,
                                   int64_t group_size = 128);
std::vector<float> dequantize(const QuantizedMatrix& q);

// int4 packing: two values per byte, element 2i in the low nibble and element 2i+1 in the high
// nibble, each as 4-bit two's complement. An odd count leaves the last high nibble 0. A matrix is
// packed as one row-major sequence. Values outside [-8, 7] are an Error.
std::vector<uint8_t> pack_int4(const int8_t* values, int64_t count);
std::vector<int8_t> unpack_int4(const uint8_t* packed, int64_t count);

}  // namespace ssdq
