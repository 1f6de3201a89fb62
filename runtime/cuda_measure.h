// Device ceilings and the SSD module alone, measured with CUDA events (benchmarks: they
// measure and print, they assert nothing).
#pragma once

#include <cstdint>
#include <vector>

#include "formats/config.h"

namespace ssdq {

struct DeviceCeilings {
  double copy_gb_per_s = 0;     // device-to-device copy, bytes read + written
  double bf16_tflop_per_s = 0;  // a large bf16 GEMM through cuBLASLt (8192³)
};
DeviceCeilings measure_device_ceilings(int device);

struct SsdModuleTiming {
  int64_t batch = 0, length = 0;
  double ms = 0;
  double flops = 0, bytes = 0;  // the work and the fewest bytes the module must move
};
// Which SSD prefill: the FP path's chunked kernels on bf16 inputs, or SSDi8's integer chunked
// kernel (fp32 inputs as the quantized backend holds them, int8 state).
enum class SsdModulePath { kFloat, kSsdi8 };

// Times the SSD prefill of `config`'s shape for each (batch, length) on random inputs, median over
// `repeats` runs.
std::vector<SsdModuleTiming> measure_ssd_module(const Mamba2Config& config,
                                                const std::vector<std::pair<int64_t, int64_t>>& shapes, int device,
                                                int repeats, SsdModulePath path = SsdModulePath::kFloat);

}  // namespace ssdq
