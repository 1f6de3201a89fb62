// Bytes that a later kernel of the stream will read (its weights), fetched into L2 by an earlier
// kernel, so that DRAM works while the kernels between them wait on latency. A kernel that takes
// these issues them before it waits for the previous grid (prefetch_l2_share in
// kernels/programmatic_launch.cuh).
#pragma once

namespace ssdq::kernels {

struct L2Prefetch {
  const void* p = nullptr;  // 16-byte aligned
  long long bytes = 0;      // a multiple of 16; 0: none
};
constexpr int kL2PrefetchRanges = 2;

}  // namespace ssdq::kernels
