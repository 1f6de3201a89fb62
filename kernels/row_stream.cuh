// Streaming one weight row through a warp for the decode GEMVs (gemv, qgemv): lane l takes the
// 16-byte pieces l, l + 32, l + 64, …, with kUnroll loads in flight before the first is used, and
// calls use(piece, value) for each of its pieces in increasing order.
#pragma once

#include <cuda_runtime.h>

namespace ssdq::kernels {

// kEvictFirst: the loads are marked streaming (`__ldcs`: the rows are read once, so L1 and L2 may
// drop them first), as the one-wave W8A8 GEMV reads its weights.
template <int kUnroll, bool kEvictFirst = false, typename Use>
__device__ inline void stream_row_pieces(const uint4* row, int pieces, int lane, Use&& use) {
  for (int base = lane; base < pieces; base += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = base + 32 * u;
      wv[u] = p >= pieces ? make_uint4(0, 0, 0, 0) : kEvictFirst ? __ldcs(row + p) : __ldg(row + p);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = base + 32 * u;
      if (p >= pieces) break;
      use(p, wv[u]);
    }
  }
}

}  // namespace ssdq::kernels
