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

#include "pipeline/cuda_calibrate.h"
#include "pipeline/layer_passes.h"

namespace ssdq {

// The passes on `gpu.device`, TF32 for the fp32 projections and the Grams with gpu.tf32_gemms
// (export --gemm tf32); gpu.on_device_memory is told, when the passes end, the most device memory
// they held; gpu.describe() names where they ran in the artifact's description.
LayerPassesMaker cuda_layer_passes(const CudaCalibration& gpu);

}  // namespace ssdq
