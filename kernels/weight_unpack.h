// Quantized weights expanded on the device for the prefill GEMMs (cuBLASLt multiplies int8 or
// fp16, not packed int4), into a scratch buffer right before the GEMM:
//   kS8 out:  the int8 values q of int4 weights (W4A8 above 64 rows: kernels/gemm_s8_grouped.h);
//   kF16 out: fp16(q·s_w[r, c / group_size]) of int8 or int4 weights (W4A16 and float inputs;
//             the CPU multiplies the fp32 q·s_w, so this rounds once more).
// int4 packing: model/quantizer.h `pack_int4` of the row-major [rows, cols] matrix.
// CPU reference: model/quantizer.h `dequantize` (model/quantized_model.h WeightMatrix::to_float).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

struct WeightUnpackArgs {
  int64_t rows = 0;
  int cols = 0;
  int bits = 4;                     // 4 (packed, cols / 2 bytes a row) or 8
  const void* values = nullptr;
  const float* scales = nullptr;    // [rows, cols / group_size]; kF16 only
  int group_size = 0;
  void* out = nullptr;              // [rows, cols] of out_type
  ElementType out_type = ElementType::kS8;  // kS8 (int4 in) or kF16
};

bool weight_unpack_supported(const WeightUnpackArgs& args);
cudaError_t launch_weight_unpack(const WeightUnpackArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
