#include "kernels/channel_stats.h"

#include <algorithm>

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 128;  // channels per block: a warp reads 32 consecutive channels of a row
constexpr int kMinSliceRows = 512;  // a slice's top list warms up once, then mostly compares
constexpr int kRowsInFlight = 8;    // loads a thread issues before it folds them
constexpr int kMaxSlices = 256;
constexpr size_t kWorkspaceBudget = size_t{64} << 20;  // bounds the slices of a wide point with top values

struct Slicing {
  int slices;
  int64_t rows_per_slice;
};

Slicing slicing(const ChannelStatsArgs& a) {
  const size_t per_slice = static_cast<size_t>(a.width) * (sizeof(double) + (a.top ? kChannelStatsTopValues * 4 : 0));
  const int64_t by_budget = std::max<int64_t>(1, static_cast<int64_t>(kWorkspaceBudget / per_slice));
  const int64_t by_rows = std::max<int64_t>(1, a.rows / kMinSliceRows);
  const int64_t slices = std::min<int64_t>({kMaxSlices, by_budget, by_rows});
  const int64_t rows_per_slice = (a.rows + slices - 1) / slices;
  return {static_cast<int>((a.rows + rows_per_slice - 1) / rows_per_slice), rows_per_slice};
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// Keeps the kChannelStatsTopValues largest values offered, sorted largest first in registers
// (every index static), starting from zeros as ChannelStats's heap does. A value enters only
// when it beats `floor`: the smallest kept, or a bound known to be no larger than the final
// 32nd largest (the running list's smallest), so most offers are one compare.
struct TopList {
  float v[kChannelStatsTopValues];
  float floor = 0.f;
  __device__ void clear(float start_floor) {
#pragma unroll
    for (int k = 0; k < kChannelStatsTopValues; ++k) v[k] = 0.f;
    floor = start_floor;
  }
  __device__ void offer(float value) {
    if (!(value > floor)) return;
#pragma unroll
    for (int k = 0; k < kChannelStatsTopValues; ++k) {  // the value sinks to its place
      const float kept = v[k];
      v[k] = fmaxf(kept, value);
      value = fminf(kept, value);
    }
    floor = fmaxf(floor, v[kChannelStatsTopValues - 1]);
  }
};

__global__ void __launch_bounds__(kThreads) channel_stats_slice_kernel(ChannelStatsArgs a, int64_t rows_per_slice,
                                                                       double* slice_sums, float* slice_top) {
  __shared__ unsigned int histogram[kChannelStatsHistogramBins];
  if (a.histogram)
    for (int b = threadIdx.x; b < kChannelStatsHistogramBins; b += kThreads) histogram[b] = 0;
  __syncthreads();
  const int c = blockIdx.x * kThreads + threadIdx.x;
  const int slice = blockIdx.y;
  const int64_t r0 = slice * rows_per_slice, r1 = min(a.rows, r0 + rows_per_slice);
  float largest = 0.f;
  double sum = 0.0;
  TopList top;
  if (c < a.width && a.top) {
    // Values at or below the running list's smallest cannot enter the final list.
    const float* running = a.top + static_cast<int64_t>(c) * kChannelStatsTopValues;
    float smallest = running[0];
    for (int k = 1; k < kChannelStatsTopValues; ++k) smallest = fminf(smallest, running[k]);
    top.clear(smallest);
  } else {
    top.clear(0.f);
  }
  if (c < a.width) {
    const float* __restrict__ column = a.data + c;
    for (int64_t base = r0; base < r1; base += kRowsInFlight) {
      // The group's loads are issued before any of its atomics, so each warp keeps
      // kRowsInFlight rows in flight instead of one.
      float values[kRowsInFlight];
#pragma unroll
      for (int j = 0; j < kRowsInFlight; ++j) values[j] = base + j < r1 ? __ldg(column + (base + j) * a.stride) : 0.f;
#pragma unroll
      for (int j = 0; j < kRowsInFlight; ++j) {
        if (base + j >= r1) break;
        const float value = values[j];
        if (!isfinite(value)) {
          atomicMin(a.first_bad, static_cast<unsigned long long>((base + j) * a.width + c));
          continue;
        }
        const float magnitude = fabsf(value);
        largest = fmaxf(largest, magnitude);
        sum += static_cast<double>(value);
        // A plain shared atomic: neighbouring channels rarely share a bin (8 per octave), so
        // grouping a warp's equal bins first costs more than the few colliding lanes it saves.
        if (a.histogram) atomicAdd(&histogram[__float_as_uint(magnitude) >> 20], 1u);
        if (a.top) top.offer(magnitude);
      }
    }
    // |x| ≥ 0, so its bits order as unsigned integers: the maximum is exact whatever the order.
    atomicMax(reinterpret_cast<unsigned int*>(a.absmax + c), __float_as_uint(largest));
    if (a.sums) slice_sums[static_cast<int64_t>(slice) * a.width + c] = sum;
    if (a.top) {
      float* out = slice_top + (static_cast<int64_t>(slice) * a.width + c) * kChannelStatsTopValues;
      for (int k = 0; k < kChannelStatsTopValues; ++k) out[k] = top.v[k];
    }
  }
  if (!a.histogram) return;
  __syncthreads();
  for (int b = threadIdx.x; b < kChannelStatsHistogramBins; b += kThreads)
    if (histogram[b]) atomicAdd(a.histogram + b, static_cast<unsigned long long>(histogram[b]));
}

// One thread a channel: the slices' sums added in slice order, their top values merged with the
// running ones.
__global__ void __launch_bounds__(kThreads) channel_stats_fold_kernel(ChannelStatsArgs a, int slices,
                                                                      const double* slice_sums,
                                                                      const float* slice_top) {
  const int c = blockIdx.x * kThreads + threadIdx.x;
  if (c >= a.width) return;
  if (a.sums) {
    double sum = a.sums[c];
    for (int s = 0; s < slices; ++s) sum += slice_sums[static_cast<int64_t>(s) * a.width + c];
    a.sums[c] = sum;
  }
  if (!a.top) return;
  TopList top;
  top.clear(0.f);
  float* running = a.top + static_cast<int64_t>(c) * kChannelStatsTopValues;
  for (int k = 0; k < kChannelStatsTopValues; ++k) top.offer(running[k]);
  for (int s = 0; s < slices; ++s) {
    const float* values = slice_top + (static_cast<int64_t>(s) * a.width + c) * kChannelStatsTopValues;
    for (int k = 0; k < kChannelStatsTopValues; ++k) top.offer(values[k]);
  }
  for (int k = 0; k < kChannelStatsTopValues; ++k) running[k] = top.v[k];
}

}  // namespace

bool channel_stats_supported(const ChannelStatsArgs& a) {
  return a.rows >= 0 && a.width > 0 && a.stride >= a.width && a.data && a.absmax && a.first_bad &&
         (a.rows == 0 || a.workspace) && reinterpret_cast<uintptr_t>(a.workspace) % 256 == 0 &&
         a.rows <= (int64_t{1} << 40);
}

size_t channel_stats_workspace_bytes(const ChannelStatsArgs& a) {
  if (a.rows <= 0 || a.width <= 0) return 0;
  const Slicing s = slicing(a);
  return align256(size_t(s.slices) * a.width * sizeof(double)) +
         (a.top ? align256(size_t(s.slices) * a.width * kChannelStatsTopValues * 4) : 0);
}

cudaError_t launch_channel_stats(const ChannelStatsArgs& a, cudaStream_t stream) {
  if (!channel_stats_supported(a)) return cudaErrorInvalidValue;
  if (a.rows == 0) return cudaSuccess;
  const Slicing s = slicing(a);
  double* slice_sums = static_cast<double*>(a.workspace);
  float* slice_top = reinterpret_cast<float*>(static_cast<char*>(a.workspace) +
                                              align256(size_t(s.slices) * a.width * sizeof(double)));
  const unsigned channel_blocks = (a.width + kThreads - 1) / kThreads;
  channel_stats_slice_kernel<<<dim3(channel_blocks, s.slices), kThreads, 0, stream>>>(a, s.rows_per_slice,
                                                                                      slice_sums, slice_top);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  if (!a.sums && !a.top) return cudaSuccess;
  channel_stats_fold_kernel<<<channel_blocks, kThreads, 0, stream>>>(a, s.slices, slice_sums, slice_top);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
