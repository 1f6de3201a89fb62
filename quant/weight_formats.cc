#include "quant/weight_formats.h"

#include <algorithm>
#include <utility>

#include "formats/error.h"

namespace ssdq {
namespace {

WeightMatrix dense_weight(std::vector<float> w, int64_t rows, int64_t cols, WeightMatrix::Kind kind) {
  if (static_cast<int64_t>(w.size()) != rows * cols) fail("internal: weight of {} values for [{}, {}]", w.size(), rows, cols);
  WeightMatrix out;
  out.rows = rows;
  out.cols = cols;
  out.kind = kind;
  out.dense = std::move(w);
  return out;
}

WeightMatrix quantized_weight(QuantizedMatrix q) {
  WeightMatrix out;
  out.rows = q.rows;
  out.cols = q.cols;
  out.kind = WeightMatrix::Kind::kQuantized;
  out.quantized = std::move(q);
  return out;
}

}  // namespace

WeightMatrix float32_weight(const std::vector<float>& w, int64_t rows, int64_t cols) {
  return dense_weight(w, rows, cols, WeightMatrix::Kind::kFloat32);
}

WeightMatrix float16_weight(const std::vector<float>& w, int64_t rows, int64_t cols, const ParallelFor& parallel) {
  std::vector<float> rounded(w.size());
  constexpr int64_t kBlock = int64_t{1} << 20;  // values an item: the embedding of 2.7b is ~120 items
  run_items(parallel, (static_cast<int64_t>(w.size()) + kBlock - 1) / kBlock, [&](int64_t b) {
    const size_t end = std::min(w.size(), static_cast<size_t>((b + 1) * kBlock));
    for (size_t i = static_cast<size_t>(b * kBlock); i < end; ++i) rounded[i] = round_to_fp16(w[i]);
  });
  return dense_weight(std::move(rounded), rows, cols, WeightMatrix::Kind::kFloat16);
}

WeightMatrix rtn_weight(const std::vector<float>& w, int64_t rows, int64_t cols, QuantBits bits, int64_t group_size) {
  if (static_cast<int64_t>(w.size()) != rows * cols) fail("internal: weight of {} values for [{}, {}]", w.size(), rows, cols);
  if (group_size <= 0 || group_size >= cols) return quantized_weight(quantize_per_channel(w.data(), rows, cols, bits));
  return quantized_weight(quantize_per_group(w.data(), rows, cols, bits, group_size));
}

WeightMatrix gptq_weight(const std::vector<float>& w, int64_t rows, int64_t cols, std::vector<double> hessian,
                         const GptqOptions& options) {
  if (static_cast<int64_t>(w.size()) != rows * cols) fail("internal: weight of {} values for [{}, {}]", w.size(), rows, cols);
  return quantized_weight(gptq_quantize(w.data(), rows, cols, std::move(hessian), options));
}

}  // namespace ssdq
