#include "kernels/tp_all_reduce.h"

#include <cstdio>

#include "kernels/programmatic_launch.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = kThreads * 4;  // floats a block sums per item (one float4 a thread)
// A peer that has not arrived after this long is gone (its host thread failed): trap rather than
// hang the process.
constexpr unsigned long long kBarrierTimeoutNs = 30ull * 1000 * 1000 * 1000;

__device__ inline unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Every rank's block b arrives before any reads: the partial rows were written by kernels before
// this one in each rank's stream, so a rank's arrival says its rows are complete.
__device__ void barrier(const TpReduceArgs& a) {
  __shared__ unsigned generation;
  if (threadIdx.x == 0) generation = ++a.counters[blockIdx.x];
  __syncthreads();
  if (threadIdx.x < a.ranks) {
    const unsigned g = generation;
    __threadfence_system();
    volatile unsigned* to = a.flags[threadIdx.x] + blockIdx.x * kMaxTpRanks + a.rank;
    *to = g;
    volatile unsigned* from = a.flags[a.rank] + blockIdx.x * kMaxTpRanks + threadIdx.x;
    const unsigned long long start = global_timer_ns();
    // ≥, not ==: a peer may already have moved on to the next round and written g + 1.
    while (static_cast<int>(*from - g) < 0) {
      if (global_timer_ns() - start > kBarrierTimeoutNs) {
        printf("ssdq: tensor-parallel rank %d waited 30 s for rank %d at an all-reduce\n", a.rank, threadIdx.x);
        __trap();
      }
    }
    __threadfence_system();
  }
  __syncthreads();
}

// Launched programmatically: it waits for out_proj's partial rows, then lets the next layer's
// in_proj launch at once, so that its weights stream into L2 while this kernel waits on its peers.
template <bool kPeer>
__global__ void __launch_bounds__(kThreads) tp_reduce_kernel(TpReduceArgs a) {
  wait_for_previous_grid();
  allow_next_grid();
  if (kPeer) barrier(a);
  const int ranks = kPeer ? a.ranks : 1;
  const float* const* partials = kPeer ? a.partials : a.partials + a.rank;
  const int64_t chunks = (a.width + kChunk - 1) / kChunk, items = a.rows * chunks;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t row = item / chunks, c = (item % chunks) * kChunk + threadIdx.x * 4;
    if (c >= a.width) continue;
    float scale = 1.f;
    if (a.folded_norm) {
      float ss = __ldcv(partials[0] + a.rows * a.width + row);
      for (int q = 1; q < ranks; ++q) ss += __ldcv(partials[q] + a.rows * a.width + row);
      scale = rsqrtf(ss / a.norm_width + a.eps);
    }
    const int64_t at = row * a.width + c;
    float4 sum = __ldcv(reinterpret_cast<const float4*>(partials[0] + at));
    for (int q = 1; q < ranks; ++q) {
      const float4 p = __ldcv(reinterpret_cast<const float4*>(partials[q] + at));
      sum.x += p.x;
      sum.y += p.y;
      sum.z += p.z;
      sum.w += p.w;
    }
    float v[4] = {sum.x, sum.y, sum.z, sum.w};
    float4* out = reinterpret_cast<float4*>(a.residual + at);
    float4 r = a.assign ? make_float4(0.f, 0.f, 0.f, 0.f) : *out;
    float* rv = &r.x;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float x = a.folded_norm ? v[i] * scale : v[i];
      if (a.bias) x += a.bias[c + i];
      rv[i] += x;
    }
    *out = r;
  }
}

bool common_supported(const TpReduceArgs& a) {
  if (a.rows <= 0 || a.width <= 0 || a.width % 4 != 0 || !a.residual) return false;
  if (a.ranks < 1 || a.ranks > kMaxTpRanks || a.rank < 0 || a.rank >= a.ranks) return false;
  if (a.folded_norm && !(a.norm_width > 0.f)) return false;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return aligned(a.residual);
}

int blocks_for(const TpReduceArgs& a) {
  const int64_t items = a.rows * ((a.width + kChunk - 1) / kChunk);
  return static_cast<int>(items < kTpReduceMaxBlocks ? items : kTpReduceMaxBlocks);
}

}  // namespace

bool peer_all_reduce_supported(const TpReduceArgs& a) {
  if (!common_supported(a) || !a.counters) return false;
  for (int q = 0; q < a.ranks; ++q)
    if (!a.partials[q] || !a.flags[q] || reinterpret_cast<uintptr_t>(a.partials[q]) % 16 != 0) return false;
  return true;
}

cudaError_t launch_peer_all_reduce(const TpReduceArgs& a, cudaStream_t stream) {
  if (!peer_all_reduce_supported(a)) return cudaErrorInvalidValue;
  return launch_kernel(tp_reduce_kernel<true>, LaunchShape{dim3(blocks_for(a)), dim3(kThreads)}, stream, a);
}

bool tp_residual_add_supported(const TpReduceArgs& a) {
  return common_supported(a) && a.partials[a.rank] && reinterpret_cast<uintptr_t>(a.partials[a.rank]) % 16 == 0;
}

cudaError_t launch_tp_residual_add(const TpReduceArgs& a, cudaStream_t stream) {
  if (!tp_residual_add_supported(a)) return cudaErrorInvalidValue;
  return launch_kernel(tp_reduce_kernel<false>, LaunchShape{dim3(blocks_for(a)), dim3(kThreads)}, stream, a);
}

}  // namespace ssdq::kernels
