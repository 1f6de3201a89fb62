// Backends by the name a user types: "cpu", "cuda" or "cuda:N".
#pragma once

#include <memory>
#include <string>

#include "runtime/backend.h"
#include "runtime/cuda_backend.h"
#include "model/model_weights.h"
#include "model/quantized_model.h"

namespace ssdq {

struct DeviceSpec {
  bool cuda = false;
  int index = 0;
};
DeviceSpec parse_device(const std::string& text);

// What a command asks of the backend beyond the device.
struct BackendPreferences {
  // Decode steps of a few rows give each row the logits it gets alone (CudaBackendOptions::
  // rows_alone; the CPU always does): generate's text then does not depend on the batch.
  bool rows_alone = false;
  // false: verify windows replay apart from the next window (CudaBackendOptions::replay_in_window).
  bool replay_in_window = true;
};

// The CUDA engine's options for device `index` with the command's preferences (one GPU's engine,
// or each tensor-parallel rank's).
CudaBackendOptions cuda_backend_options(int index, const BackendPreferences& preferences);

std::unique_ptr<Backend> make_backend(const std::string& device, std::shared_ptr<const ModelWeights> weights,
                                      const BackendPreferences& preferences = {});
// The backend of a quantized artifact: the integer CPU runtime, or its CUDA counterpart.
std::unique_ptr<Backend> make_quantized_backend(const std::string& device, std::shared_ptr<const QuantizedModel> model,
                                                const BackendPreferences& preferences = {});
// Windows per forward that keep the device busy: the cores for the CPU, 16 for a GPU.
int64_t default_eval_batch(const std::string& device);

}  // namespace ssdq
