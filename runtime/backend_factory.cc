#include "runtime/backend_factory.h"

#include <cstdlib>

#include "formats/error.h"
#include "runtime/cpu_backend.h"
#include "runtime/cuda_backend.h"
#include "runtime/parallel.h"

namespace ssdq {

DeviceSpec parse_device(const std::string& text) {
  if (text == "cpu") return {};
  if (text == "cuda") return {true, 0};
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    char* end = nullptr;
    const long index = std::strtol(text.c_str() + 5, &end, 10);
    if (*end == '\0' && index >= 0 && index < 1024) return {true, static_cast<int>(index)};
  }
  fail("--device {}: expected cpu, cuda or cuda:N", text);
}

CudaBackendOptions cuda_backend_options(int index, const BackendPreferences& preferences) {
  CudaBackendOptions options;
  options.device = index;
  options.rows_alone = preferences.rows_alone;
  options.replay_in_window = preferences.replay_in_window;
  return options;
}

std::unique_ptr<Backend> make_backend(const std::string& device, std::shared_ptr<const ModelWeights> weights,
                                      const BackendPreferences& preferences) {
  const DeviceSpec spec = parse_device(device);
  if (!spec.cuda) return std::make_unique<CpuBackend>(*weights);
  return std::make_unique<CudaBackend>(*weights, cuda_backend_options(spec.index, preferences));
}

std::unique_ptr<Backend> make_quantized_backend(const std::string& device, std::shared_ptr<const QuantizedModel> model,
                                                const BackendPreferences& preferences) {
  const DeviceSpec spec = parse_device(device);
  if (!spec.cuda) return std::make_unique<CpuBackend>(std::move(model));
  return std::make_unique<CudaBackend>(std::move(model), cuda_backend_options(spec.index, preferences));
}

int64_t default_eval_batch(const std::string& device) { return parse_device(device).cuda ? 16 : thread_count(); }

}  // namespace ssdq
