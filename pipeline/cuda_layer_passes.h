// The layer-by-layer export's passes on a GPU (pipeline/layer_passes.h). Every sample's residual
// stream lives on the device (fp32 [samples · seqlen, d_model]); each pass runs the layer on a CUDA
// engine of its own computing in fp32 (CudaBackendOptions::fp32_float_math: float weights in fp32,
// the float SSD's fp32 recurrence; quantized parts as the engine runs an artifact), over batches
// of about kCudaCalibrationRows tokens (CudaBackend::forward_layer):
//   pass A  the calibration observer (pipeline/cuda_stats_observer.h) and in_proj's input Gram;
//   pass B  out_proj's input Gram, after its int8 format (kernels/input_gram.h);
//   pass C  the streams advanced in place, out_proj's output sums (kernels/channel_stats.h), and
//           the mean correction added on the device (kernels/row_bias.h).
// The Grams are summed in fp32 (the CPU's in fp64) and read back for GPTQ, which runs on the host.
// Device memory: the streams (samples · seqlen · d_model · 4 bytes), one layer's fp32 weights, one
// batch's activations and a Gram matrix (d_inner² · 4 bytes).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "pipeline/layer_passes.h"

namespace ssdq {

struct CudaExport {
  int device = 0;
  // The fp32 projections and the Grams on the tensor cores in TF32 (inputs rounded to 10 mantissa
  // bits): export --gemm tf32.
  bool tf32 = false;
  // Told, when the passes end, the most device memory they held.
  std::function<void(size_t bytes)> on_device_memory;
  // Where the passes ran, for the artifact's description: "cuda:0 fp32" or "cuda:0 fp32, TF32 GEMMs".
  std::string describe() const;
};

LayerPassesMaker cuda_layer_passes(const CudaExport& gpu);

}  // namespace ssdq
