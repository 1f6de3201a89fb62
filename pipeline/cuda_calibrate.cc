#include "pipeline/cuda_calibrate.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "formats/error.h"
#include "model/quantized_model.h"
#include "pipeline/cuda_stats_observer.h"
#include "runtime/cuda_backend.h"
#include "runtime/cuda_resources.h"

namespace ssdq {

std::string CudaCalibration::describe() const {
  return "cuda:" + std::to_string(device) + (tf32_gemms ? " fp32, TF32 GEMMs" : " fp32");
}

CalibrationStats collect_statistics_cuda(ModelWeights weights, const std::vector<int32_t>& tokens,
                                         int64_t samples, int64_t seqlen, const CollectOptions& options,
                                         const CudaCalibration& gpu) {
  if (samples <= 0 || seqlen <= 1 || static_cast<int64_t>(tokens.size()) != samples * seqlen)
    fail("internal: {} calibration tokens for {} samples of {}", tokens.size(), samples, seqlen);
  const Mamba2Config config = weights.config;
  auto model = std::make_shared<const QuantizedModel>(float_quantized_model(std::move(weights)));
  CudaBackendOptions cuda;
  cuda.device = gpu.device;
  cuda.use_graphs = false;
  cuda.fp32_float_math = true;
  cuda.tf32_gemms = gpu.tf32_gemms;
  // The device is selected (and checked: present, new enough) before the statistics go on it.
  select_cuda_device(gpu.device);
  CudaStatsObserver observer(config, options.ssd_internals);
  cuda.observer = &observer;
  const CudaBackend backend(model, cuda);
  const int64_t batch = std::clamp<int64_t>(kCudaCalibrationRows / seqlen, 1, samples);
  backend.reserve(batch, seqlen);
  for (int64_t first = 0; first < samples; first += batch) {
    const int64_t n = std::min(batch, samples - first);
    auto state = backend.new_state(n);
    backend.forward(tokens.data() + first * seqlen, seqlen, *state, ForwardOutputs{});
    observer.check_finite(backend.stream());
    if (options.on_progress) options.on_progress(first + n, samples);
  }
  CalibrationStats stats = observer.read(backend.stream());
  if (gpu.on_device_memory) gpu.on_device_memory(backend.memory().peak_bytes + observer.device_bytes());
  return stats;
}

}  // namespace ssdq
