// Calibration statistics of one activation point on the device: rows of fp32 values folded into
// running per-channel statistics, exactly as calib/channel_stats.h `ChannelStats::add_rows` folds
// them on the CPU (its CPU reference):
//   absmax[c]     the largest |x| of channel c (exact: a maximum does not depend on order)
//   sums[c]       Σ x in double (rows summed in slices, the slices' sums added in slice order:
//                 the same bits for the same rows, within double rounding of the CPU's order)
//   histogram[b]  counts of |x| in bin b = float bits of |x| >> 20 (2048 bins, pooled channels)
//   top[c, 0..31] the 32 largest |x| of channel c, unordered (the same multiset as the CPU's heap)
// A non-finite value is not folded in; the smallest flat index row · width + c of one is kept
// in `first_bad` (initialise it to UINT64_MAX) so the caller can name the token and channel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ssdq::kernels {

inline constexpr int kChannelStatsHistogramBins = 2048;
inline constexpr int kChannelStatsTopValues = 32;

struct ChannelStatsArgs {
  int64_t rows = 0;
  int width = 0;
  const float* data = nullptr;  // row r at data + r * stride
  int64_t stride = 0;
  float* absmax = nullptr;                   // [width], running
  double* sums = nullptr;                    // [width], running, or null
  unsigned long long* histogram = nullptr;   // [kChannelStatsHistogramBins], running, or null
  float* top = nullptr;                      // [width, kChannelStatsTopValues], running, or null
  unsigned long long* first_bad = nullptr;   // required
  void* workspace = nullptr;                 // channel_stats_workspace_bytes(args), 256-byte aligned
};

bool channel_stats_supported(const ChannelStatsArgs& args);
size_t channel_stats_workspace_bytes(const ChannelStatsArgs& args);
// Two kernels on `stream` (slices, then the fold of the slices in order); no allocation.
cudaError_t launch_channel_stats(const ChannelStatsArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
