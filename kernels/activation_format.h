// An activation point's format applied in place to fp32 rows, as runtime/quantized_ops.h
// `apply_activation_format` does it (bit for bit):
//   kFloat16: x ← fp32(fp16_rne(x));
//   kInt8:    q = sat±127(rne(x / s_c)) (model/quantizer.h quantize_value), x ← q·s_c, with
//             s_c = scales[index[c]] (scales[0] when index is null: one scale for the point).
// Optionally also writes q (int8, for the integer GEMMs) and the result as fp16 (for the fp16
// GEMMs and GEMVs), so a consumer reads the point in the type it multiplies in.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ssdq::kernels {

struct ActivationFormatArgs {
  int64_t rows = 0;
  int width = 0;
  float* data = nullptr;  // [rows, width], row stride `stride`, formatted in place
  int64_t stride = 0;
  enum class Format { kFloat32, kFloat16, kInt8 } format = Format::kFloat32;
  const float* scales = nullptr;   // kInt8
  const int32_t* index = nullptr;  // kInt8: [width] scale of each channel, or null
  int8_t* q_out = nullptr;         // optional, kInt8 only: [rows, width], row stride q_stride
  int64_t q_stride = 0;
  __half* h_out = nullptr;         // optional: [rows, width], row stride h_stride
  int64_t h_stride = 0;
};

bool activation_format_supported(const ActivationFormatArgs& args);
cudaError_t launch_activation_format(const ActivationFormatArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
