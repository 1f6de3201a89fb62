#include "kernels/logits_reduce.h"

#include <cfloat>

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 512;

struct MaxIndex {
  float value;
  int index;
};

__device__ MaxIndex better(MaxIndex a, MaxIndex b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

// One block per row: pass 1 finds the max (and its index), pass 2 sums exp(l - max).
__global__ void __launch_bounds__(kThreads) logits_reduce_kernel(LogitsReduceArgs a) {
  const float* row = a.logits + static_cast<int64_t>(blockIdx.x) * a.vocab;
  __shared__ MaxIndex warp_best[kThreads / 32];
  __shared__ float warp_sum[kThreads / 32];
  MaxIndex best{-FLT_MAX, 0x7fffffff};
  for (int i = threadIdx.x; i < a.vocab; i += kThreads) best = better(best, {row[i], i});
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxIndex other{__shfl_xor_sync(0xffffffffu, best.value, offset), __shfl_xor_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
  }
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  best = warp_best[0];
  for (int w = 1; w < kThreads / 32; ++w) best = better(best, warp_best[w]);
  if (a.argmax && threadIdx.x == 0) a.argmax[blockIdx.x] = best.index;
  if (!a.nll) return;
  float sum = 0.f;
  for (int i = threadIdx.x; i < a.vocab; i += kThreads) sum += __expf(row[i] - best.value);
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sum[w];
    a.nll[blockIdx.x] = logf(total) + best.value - row[a.targets[blockIdx.x]];
  }
}

}  // namespace

bool logits_reduce_supported(const LogitsReduceArgs& a) {
  return a.rows > 0 && a.rows <= 2147483647 && a.vocab > 0 && a.logits && (a.nll || a.argmax) &&
         (!a.nll || a.targets);
}

cudaError_t launch_logits_reduce(const LogitsReduceArgs& a, cudaStream_t stream) {
  if (!logits_reduce_supported(a)) return cudaErrorInvalidValue;
  logits_reduce_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
