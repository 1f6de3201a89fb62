// Calibration on a GPU: the FP32 model's forwards on the CUDA engine in fp32
// (CudaBackendOptions::fp32_float_math) with a CudaStatsObserver, samples in batches.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipeline/calibrate.h"

namespace ssdq {

// collect_statistics on CUDA device `device`: the same statistics within fp32 summation order
// (the GEMMs', the SSD recurrence's against the CPU's chunked form). Samples run in batches of
// about kCudaCalibrationRows tokens, so device memory is the fp32 weights, the statistics and one
// batch's activations whatever the number of samples.
struct CudaCalibration {
  int device = 0;
  bool tf32_gemms = false;  // CudaBackendOptions::tf32_gemms: ~8x faster projections, ~1e-3 of fp32
  // Told, at the end, the most device memory the run held (the engine's peak and the statistics).
  std::function<void(size_t bytes)> on_device_memory;
  std::string describe() const;  // the provenance's "forward": "cuda:0 fp32" or "cuda:0 fp32, TF32 GEMMs"
};
CalibrationStats collect_statistics_cuda(ModelWeights weights, const std::vector<int32_t>& tokens,
                                         int64_t samples, int64_t seqlen, const CollectOptions& options,
                                         const CudaCalibration& cuda);
inline constexpr int64_t kCudaCalibrationRows = 32768;

}  // namespace ssdq
