// rows[r, i] += bias[i] for every row of an fp32 matrix [rows, width] (row stride `width`): the
// SSDi8 mean correction added to the calibration samples' residual streams during export. CPU
// reference: the same loop (pipeline/layer_passes.cc, the CPU passes' streams).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ssdq::kernels {

struct RowBiasArgs {
  int64_t rows = 0;
  int width = 0;
  float* data = nullptr;
  const float* bias = nullptr;  // [width]
};

bool row_bias_supported(const RowBiasArgs& args);
cudaError_t launch_add_row_bias(const RowBiasArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
