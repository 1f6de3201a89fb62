#include "model/quantizer.h"

#include <algorithm>

#include "formats/error.h"

namespace ssdq {
namespace {

void check_dims(int64_t rows, int64_t cols, int64_t group_size) {
  if (rows < 0 || cols <= 0) fail("quantize: invalid matrix shape [{}, {}]", rows, cols);
  if (group_size <= 0) fail("quantize: group size must be positive, got {}", group_size);
}

QuantizedMatrix empty_layout(int64_t rows, int64_t cols, QuantBits bits, Granularity granularity,
                             int64_t group_size) {
  check_dims(rows, cols, group_size);
  QuantizedMatrix q;
  q.rows = rows;
  q.cols = cols;
  q.bits = bits;
  q.granularity = granularity;
  q.group_size = group_size;
  q.values.resize(rows * cols);
  q.scales.resize(granularity == Granularity::kPerTensor ? 1 : rows * q.groups_per_row());
  return q;
}

void quantize_values(const float* w, QuantizedMatrix& q) {
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      q.values[r * q.cols + c] = quantize_value(w[r * q.cols + c], q.scales[q.scale_index(r, c)], q.bits);
}

// Scales for row groups of `group_size` columns (the last one may be shorter).
QuantizedMatrix quantize_row_groups(const float* w, int64_t rows, int64_t cols, QuantBits bits,
                                    Granularity granularity, int64_t group_size) {
  QuantizedMatrix q = empty_layout(rows, cols, bits, granularity, group_size);
  check_finite(w, rows, cols, "weight");
  const int64_t groups = q.groups_per_row();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * group_size, width = std::min(group_size, cols - c0);
      q.scales[r * groups + g] = scale_from_absmax(abs_max(w + r * cols + c0, width), bits);
    }
  quantize_values(w, q);
  return q;
}

}  // namespace

float scale_from_absmax(float absmax, QuantBits bits) {
  if (!(absmax >= 0) || std::isinf(absmax)) fail("quantize: absmax must be finite and >= 0, got {}", absmax);
  const float scale = absmax / static_cast<float>(quant_max(bits));
  return scale > 0 ? scale : 1.0f;
}

float abs_max(const float* x, int64_t count) {
  float result = 0;
  for (int64_t i = 0; i < count; ++i) result = std::max(result, std::abs(x[i]));
  return result;
}

void check_finite(const float* x, int64_t rows, int64_t cols, const char* what) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (!std::isfinite(x[r * cols + c]))
        fail("quantize: {} has a non-finite value {} at row {}, column {}", what, x[r * cols + c], r, c);
}

QuantizedMatrix quantize_per_tensor(const float* w, int64_t rows, int64_t cols, QuantBits bits) {
  QuantizedMatrix q = empty_layout(rows, cols, bits, Granularity::kPerTensor, cols);
  check_finite(w, rows, cols, "weight");
  q.scales[0] = scale_from_absmax(abs_max(w, rows * cols), bits);
  quantize_values(w, q);
  return q;
}

QuantizedMatrix quantize_per_channel(const float* w, int64_t rows, int64_t cols, QuantBits bits) {
  return quantize_row_groups(w, rows, cols, bits, Granularity::kPerChannel, cols);
}

QuantizedMatrix quantize_per_group(const float* w, int64_t rows, int64_t cols, QuantBits bits, int64_t group_size) {
  return quantize_row_groups(w, rows, cols, bits, Granularity::kPerGroup, group_size);
}

std::vector<float> dequantize(const QuantizedMatrix& q) {
  check_dims(q.rows, q.cols, q.group_size);
  const int64_t expected_scales = q.granularity == Granularity::kPerTensor ? 1 : q.rows * q.groups_per_row();
  if (static_cast<int64_t>(q.values.size()) != q.rows * q.cols || static_cast<int64_t>(q.scales.size()) != expected_scales)
    fail("dequantize: {} values and {} scales do not match shape [{}, {}] with group size {}", q.values.size(),
         q.scales.size(), q.rows, q.cols, q.group_size);
  std::vector<float> out(q.values.size());
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      out[r * q.cols + c] = dequantize_value(q.values[r * q.cols + c], q.scales[q.scale_index(r, c)]);
  return out;
}

std::vector<uint8_t> pack_int4(const int8_t* values, int64_t count) {
  if (count < 0) fail("pack_int4: negative count {}", count);
  std::vector<uint8_t> packed((count + 1) / 2);
  // Blocks of a fixed count without an early exit, so that the loop vectorises at -O2 (the engines
  // of an export pack a layer's 27 M int4 weights each time one is made); a block with a value
  // outside [-8, 7] is searched for it.
  constexpr int64_t kBlock = 64;
  const auto in_range = [](int8_t v) { return v >= -8 && v <= 7; };
  int64_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    unsigned ok = 1;
    for (int64_t j = 0; j < kBlock; j += 2) {
      const int8_t a = values[i + j], b = values[i + j + 1];
      ok &= in_range(a) & in_range(b);
      packed[(i + j) / 2] = static_cast<uint8_t>((a & 0x0F) | ((b & 0x0F) << 4));
    }
    if (!ok) break;
  }
  for (; i < count; ++i) {
    if (!in_range(values[i])) fail("pack_int4: value {} at index {} is outside [-8, 7]", values[i], i);
    packed[i / 2] = static_cast<uint8_t>(i % 2 ? packed[i / 2] | ((values[i] & 0x0F) << 4) : values[i] & 0x0F);
  }
  return packed;
}

std::vector<int8_t> unpack_int4(const uint8_t* packed, int64_t count) {
  if (count < 0) fail("unpack_int4: negative count {}", count);
  std::vector<int8_t> values(count);
  for (int64_t i = 0; i < count; ++i) {
    const int nibble = (packed[i / 2] >> (4 * (i % 2))) & 0x0F;
    values[i] = static_cast<int8_t>(nibble >= 8 ? nibble - 16 : nibble);
  }
  return values;
}

}  // namespace ssdq
