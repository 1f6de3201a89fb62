// Projection weights in the representations of model/quantized_model.h WeightMatrix:
// fp16, RTN (int8 per output channel, int4 per group of input columns, or per row for the
// embedding), and GPTQ.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/gptq.h"
#include "quant/parallel_items.h"
#include "model/quantized_model.h"

namespace ssdq {

WeightMatrix float32_weight(const std::vector<float>& w, int64_t rows, int64_t cols);
// Values rounded to fp16 (ties to even), in blocks over `parallel` when it is set.
WeightMatrix float16_weight(const std::vector<float>& w, int64_t rows, int64_t cols, const ParallelFor& parallel = {});
// group_size 0: one scale per row (per output channel); otherwise per group of input columns.
WeightMatrix rtn_weight(const std::vector<float>& w, int64_t rows, int64_t cols, QuantBits bits, int64_t group_size);
// GPTQ (quant/gptq.h) with the input Hessian [cols, cols] (moved in when the caller is done with it).
WeightMatrix gptq_weight(const std::vector<float>& w, int64_t rows, int64_t cols, std::vector<double> hessian,
                         const GptqOptions& options);

}  // namespace ssdq
