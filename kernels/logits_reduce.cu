#include "kernels/logits_reduce.h"

#include <cfloat>
#include <cstdint>

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kVectors = 4;  // float4 loads in flight per thread: a 256,000-logit row is 16 rounds, not 500

// Calls use(index, value) for every logit of the row, float4 loads where the row is 16-byte aligned
// and its length a multiple of 4 (then kVectors of them in flight per thread).
template <typename Use>
__device__ inline void for_each_logit(const float* row, int vocab, bool vector, Use&& use) {
  if (!vector) {
    for (int i = threadIdx.x; i < vocab; i += kThreads) use(i, row[i]);
    return;
  }
  const float4* row4 = reinterpret_cast<const float4*>(row);
  const int quads = vocab / 4;
  for (int base = threadIdx.x; base < quads; base += kThreads * kVectors) {
    float4 v[kVectors];
#pragma unroll
    for (int u = 0; u < kVectors; ++u) {
      const int q = base + u * kThreads;
      v[u] = q < quads ? row4[q] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < kVectors; ++u) {
      const int q = base + u * kThreads;
      if (q >= quads) break;
      use(4 * q, v[u].x);
      use(4 * q + 1, v[u].y);
      use(4 * q + 2, v[u].z);
      use(4 * q + 3, v[u].w);
    }
  }
}

struct MaxIndex {
  float value;
  int index;
};

__device__ MaxIndex better(MaxIndex a, MaxIndex b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

// One block per row: pass 1 finds the max (and its index), pass 2 sums exp(l - max). (One logit
// a load: 33 µs for the argmax of a 256,000-logit row, `ncu`, H100.)
__global__ void __launch_bounds__(kThreads) logits_reduce_kernel(LogitsReduceArgs a) {
  const float* row = a.logits + static_cast<int64_t>(blockIdx.x) * a.vocab;
  __shared__ MaxIndex warp_best[kThreads / 32];
  __shared__ float warp_sum[kThreads / 32];
  const bool vector = a.vocab % 4 == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0;
  MaxIndex best{-FLT_MAX, 0x7fffffff};
  for_each_logit(row, a.vocab, vector, [&](int i, float v) { best = better(best, {v, i}); });
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
  for_each_logit(row, a.vocab, vector, [&](int, float v) { sum += __expf(v - best.value); });
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
