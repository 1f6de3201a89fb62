// The sm_90a (wgmma) kernel behind kernels/gemm_s8_grouped.h; launch_gemm_s8_grouped picks it on
// sm_90 devices for GemmS8GroupedTile::kWgmma (and kAuto). Not for direct use: it assumes the
// arguments passed gemm_s8_grouped_supported.
#pragma once

#include <cuda_runtime.h>

#include "kernels/gemm_s8_grouped.h"

namespace ssdq::kernels {

// Beyond gemm_s8_grouped_supported: k and group_size multiples of 128 (the folds between k tiles).
bool gemm_s8_grouped_wgmma_supported(const GemmS8GroupedArgs& args);
cudaError_t launch_gemm_s8_grouped_wgmma(const GemmS8GroupedArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
