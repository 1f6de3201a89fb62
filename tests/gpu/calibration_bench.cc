// Where a GPU calibration's time goes: the fp32 engine's forward over one batch of samples alone,
// with the statistics observer, and with SSDi8's internals too, per layer of a synthetic shape
// (random weights, a few layers: the cost is per layer). A benchmark: it measures and prints.
// Usage: calibration_bench [--layers L] [--batch B] [--length T] CONFIG...  (e.g. mamba2-2.7b)
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "formats/error.h"
#include "model/model_weights.h"
#include "model/quantized_model.h"
#include "model/synthetic_configs.h"
#include "pipeline/cuda_stats_observer.h"
#include "runtime/cuda_backend.h"
#include "runtime/cuda_resources.h"

namespace ssdq {
namespace {

double time_forward(const CudaBackend& backend, const std::vector<int32_t>& tokens, int64_t batch, int64_t length) {
  double best = 1e30;
  for (int repeat = 0; repeat < 3; ++repeat) {
    auto state = backend.new_state(batch);
    cuda_ok(cudaStreamSynchronize(backend.stream()), "sync");
    const auto start = std::chrono::steady_clock::now();
    backend.forward(tokens.data(), length, *state, ForwardOutputs{});
    cuda_ok(cudaStreamSynchronize(backend.stream()), "sync");
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

int run(int argc, char** argv) {
  int64_t layers = 4, batch = 16, length = 2048;
  std::vector<std::string> configs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> long {
      if (i + 1 >= argc) fail("{} needs a value", arg);
      return std::strtol(argv[++i], nullptr, 10);
    };
    if (arg == "--layers") layers = value();
    else if (arg == "--batch") batch = value();
    else if (arg == "--length") length = value();
    else configs.push_back(arg);
  }
  if (configs.empty()) fail("usage: calibration_bench [--layers L] [--batch B] [--length T] CONFIG...");
  for (const std::string& name : configs) {
    Mamba2Config config = synthetic_config(name);
    config.n_layer = layers;
    auto model = std::make_shared<const QuantizedModel>(float_quantized_model(random_weights(config, 0)));
    std::mt19937 rng(1);
    std::vector<int32_t> tokens(batch * length);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % config.vocab_size);
    CudaBackendOptions options;
    options.use_graphs = false;
    options.fp32_float_math = true;
    double seconds[4];
    for (int variant = 0; variant < 4; ++variant) {  // forward; + statistics; + SSD internals; all in TF32
      select_cuda_device(0);
      std::unique_ptr<CudaStatsObserver> observer;
      if (variant > 0) observer = std::make_unique<CudaStatsObserver>(config, /*ssd_internals=*/variant >= 2);
      options.observer = observer.get();
      options.tf32_gemms = variant == 3;
      const CudaBackend backend(model, options);
      backend.reserve(batch, length);
      seconds[variant] = time_forward(backend, tokens, batch, length);
    }
    const double tokens_total = double(batch * length), per_layer = 1e3 / layers;
    fmt::print("{} ({} layers timed), batch {} x {} tokens: ms per layer — forward {:.2f}, + statistics {:.2f}, "
               "+ SSD internals {:.2f} = {:.2f} ({:.1f} us per 1k tokens); with TF32 GEMMs {:.2f}\n",
               name, layers, batch, length, seconds[0] * per_layer, (seconds[1] - seconds[0]) * per_layer,
               (seconds[2] - seconds[1]) * per_layer, seconds[2] * per_layer,
               seconds[2] * per_layer * 1e3 / (tokens_total / 1e3), seconds[3] * per_layer);
  }
  return 0;
}

}  // namespace
}  // namespace ssdq

int main(int argc, char** argv) {
  try {
    return ssdq::run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "calibration_bench: {}\n", e.what());
    return 1;
  }
}
