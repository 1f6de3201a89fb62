#include "kernels/ssd_internals.h"

#include <cmath>

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxChunk = 256;
constexpr int kBlockP = 4, kBlockN = 8;  // the S_local block a thread keeps in registers
constexpr int kTokenTile = 16;         // tokens of x_scaled and B staged in shared memory at a time
constexpr int kCbTile = 64;            // C·Bᵀ tiles of 64 × 64 tokens
constexpr int kCbSlice = 32;           // dstate values staged at a time

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

__device__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// One block per (sequence · chunk, head): the chunk's dt, cumsum and LUT, its X_scaled rows, and
// S_local accumulated in registers over token tiles, stored with the chunk's decay exp(cs_{L-1}).
__global__ void __launch_bounds__(kThreads) ssd_internals_local_kernel(SsdInternalsArgs a, float* local,
                                                                       float* decay) {
  __shared__ float dt[kMaxChunk], cs[kMaxChunk], lut[kMaxChunk];
  extern __shared__ __align__(16) float tiles[];  // x_scaled [kTokenTile, P], then B [kTokenTile, N]
  const int chunks = (a.seqlen + a.chunk - 1) / a.chunk;
  const int b = blockIdx.x / chunks, k = blockIdx.x % chunks, h = blockIdx.y;
  const int P = a.headdim, N = a.dstate, H = a.heads, PN = P * N;
  const int g = h / (H / a.groups);
  float* xs_tile = tiles;
  float* b_tile = tiles + kTokenTile * P;
  const float A = a.A[h], bias = a.dt_bias[h];
  const int start = k * a.chunk, L = min(a.chunk, a.seqlen - start);
  const int64_t row0 = static_cast<int64_t>(b) * a.seqlen + start;
  for (int t = threadIdx.x; t < L; t += kThreads) {
    const float value = softplus(a.dt_raw[(row0 + t) * a.dt_stride + h] + bias);
    dt[t] = fminf(fmaxf(value, a.dt_min), a.dt_max);
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // the CPU's running sum, in its order
    float running = 0.f;
    for (int t = 0; t < L; ++t) {
      running += dt[t] * A;
      cs[t] = running;
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < L; t += kThreads) lut[t] = dt[t] * expf(cs[L - 1] - cs[t]);
  __syncthreads();
  // Each thread owns a 4 (p) × 8 (n) block of S_local: 12 shared-memory reads feed its 32
  // multiply-adds (two a multiply-add with one output a thread). Tokens are added in order,
  // so every output is the same sum as before.
  const int n_blocks = N / kBlockN;
  const int pb = threadIdx.x / n_blocks, nb = threadIdx.x % n_blocks;
  const bool owns = pb * kBlockP < P;
  float acc[kBlockP][kBlockN] = {};
  for (int t0 = 0; t0 < L; t0 += kTokenTile) {
    const int tokens = min(kTokenTile, L - t0);
    for (int i = threadIdx.x; i < kTokenTile * P; i += kThreads) {
      const int tt = i / P, p = i % P;
      float value = 0.f;
      if (tt < tokens) {
        const int64_t row = row0 + t0 + tt;
        value = lut[t0 + tt] * a.x[row * a.x_stride + h * P + p];
        a.x_scaled[row * (static_cast<int64_t>(H) * P) + h * P + p] = value;
      }
      xs_tile[i] = value;
    }
    for (int i = threadIdx.x; i < kTokenTile * N; i += kThreads) {
      const int tt = i / N, n = i % N;
      b_tile[i] = tt < tokens ? a.B[(row0 + t0 + tt) * a.bc_stride + g * N + n] : 0.f;
    }
    __syncthreads();
    if (owns) {
      for (int tt = 0; tt < kTokenTile; ++tt) {
        const float4 xv = *reinterpret_cast<const float4*>(xs_tile + tt * P + pb * kBlockP);
        const float4 b0 = *reinterpret_cast<const float4*>(b_tile + tt * N + nb * kBlockN);
        const float4 b1 = *reinterpret_cast<const float4*>(b_tile + tt * N + nb * kBlockN + 4);
        const float xr[kBlockP] = {xv.x, xv.y, xv.z, xv.w};
        const float br[kBlockN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
        for (int i = 0; i < kBlockP; ++i)
#pragma unroll
          for (int j = 0; j < kBlockN; ++j) acc[i][j] += xr[i] * br[j];
      }
    }
    __syncthreads();
  }
  if (owns) {
    float* out = local + (static_cast<int64_t>(blockIdx.x) * H + h) * PN;
#pragma unroll
    for (int i = 0; i < kBlockP; ++i) {
      float* row = out + (pb * kBlockP + i) * N + nb * kBlockN;
      *reinterpret_cast<float4*>(row) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
      *reinterpret_cast<float4*>(row + 4) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
    }
  }
  if (threadIdx.x == 0) decay[static_cast<int64_t>(blockIdx.x) * H + h] = expf(cs[L - 1]);
}

// One thread per (sequence, state element): S_passed carried over the chunks in order from the
// initial state, the largest |S_local| and |S_passed| raised into state_absmax (an exact maximum
// whatever the order of the atomics).
__global__ void ssd_internals_pass_kernel(SsdInternalsArgs a, const float* local, const float* decay) {
  const int64_t width = static_cast<int64_t>(a.heads) * a.headdim * a.dstate;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int b = blockIdx.y;
  if (i >= width) return;
  const int chunks = (a.seqlen + a.chunk - 1) / a.chunk;
  const int h = static_cast<int>(i / (static_cast<int64_t>(a.headdim) * a.dstate));
  float passed = a.initial_state ? a.initial_state[b * width + i] : 0.f;
  float largest = 0.f;
  for (int k = 0; k < chunks; ++k) {
    const int64_t at = static_cast<int64_t>(b) * chunks + k;
    const float s_local = local[at * width + i];
    passed = decay[at * a.heads + h] * passed + s_local;
    largest = fmaxf(largest, fmaxf(fabsf(s_local), fabsf(passed)));
  }
  atomicMax(reinterpret_cast<unsigned int*>(a.state_absmax + i), __float_as_uint(largest));
}

// One block per (sequence · chunk, group, pair of 64-token tiles with s ≤ t): the largest |C_t·B_s|
// of its causal part, raised into that chunk's cb entry (zeroed first).
__global__ void __launch_bounds__(kThreads) ssd_internals_cb_kernel(SsdInternalsArgs a) {
  __shared__ float c_tile[kCbTile][kCbSlice + 1], b_tile[kCbTile][kCbSlice + 1];
  __shared__ float warp_max[kThreads / 32];
  const int chunks = (a.seqlen + a.chunk - 1) / a.chunk;
  const int seq = blockIdx.x / chunks, k = blockIdx.x % chunks, g = blockIdx.y;
  int ti = 0, pair = blockIdx.z;  // pair → (ti, si), si ≤ ti
  while (pair > ti) pair -= ++ti;
  const int si = pair;
  const int start = k * a.chunk, L = min(a.chunk, a.seqlen - start);
  const int t0 = ti * kCbTile, s0 = si * kCbTile;
  if (t0 >= L) return;  // the whole block leaves together
  const int64_t row0 = static_cast<int64_t>(seq) * a.seqlen + start;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  float acc[4][4] = {};
  for (int n0 = 0; n0 < a.dstate; n0 += kCbSlice) {
    for (int i = threadIdx.x; i < kCbTile * kCbSlice; i += kThreads) {
      const int r = i / kCbSlice, n = i % kCbSlice;
      const bool in_n = n0 + n < a.dstate;
      const int64_t col = static_cast<int64_t>(g) * a.dstate + n0 + n;
      c_tile[r][n] = in_n && t0 + r < L ? a.C[(row0 + t0 + r) * a.bc_stride + col] : 0.f;
      b_tile[r][n] = in_n && s0 + r < L ? a.B[(row0 + s0 + r) * a.bc_stride + col] : 0.f;
    }
    __syncthreads();
    for (int n = 0; n < kCbSlice; ++n) {
      float cv[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        cv[i] = c_tile[ty * 4 + i][n];
        bv[i] = b_tile[tx * 4 + i][n];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += cv[i] * bv[j];
    }
    __syncthreads();
  }
  float largest = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int t = t0 + ty * 4 + i, s = s0 + tx * 4 + j;
      if (t < L && s <= t) largest = fmaxf(largest, fabsf(acc[i][j]));
    }
  for (int offset = 16; offset > 0; offset >>= 1) largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = largest;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) largest = fmaxf(largest, warp_max[w]);
    atomicMax(reinterpret_cast<unsigned int*>(a.cb + (static_cast<int64_t>(seq) * chunks + k) * a.groups + g),
              __float_as_uint(largest));
  }
}

}  // namespace

bool ssd_internals_supported(const SsdInternalsArgs& a) {
  return a.batch > 0 && a.seqlen > 0 && a.chunk > 0 && a.chunk <= kMaxChunk && a.heads > 0 && a.groups > 0 &&
         a.heads % a.groups == 0 && a.headdim > 0 && a.headdim % 8 == 0 && a.headdim <= 128 && a.dstate > 0 &&
         a.dstate % 8 == 0 && a.dstate <= 256 && a.headdim * a.dstate <= kBlockP * kBlockN * kThreads && a.x &&
         a.B && a.C && a.dt_raw && a.dt_bias && a.A && a.x_scaled && a.state_absmax && a.cb && a.workspace &&
         reinterpret_cast<uintptr_t>(a.workspace) % 256 == 0;
}

size_t ssd_internals_workspace_bytes(const SsdInternalsArgs& a) {
  const size_t chunk_heads = static_cast<size_t>(a.batch) * ssd_internals_chunks(a) * a.heads;
  return align256(chunk_heads * a.headdim * a.dstate * sizeof(float)) + align256(chunk_heads * sizeof(float));
}

cudaError_t launch_ssd_internals(const SsdInternalsArgs& a, cudaStream_t stream) {
  if (!ssd_internals_supported(a)) return cudaErrorInvalidValue;
  const int chunks = ssd_internals_chunks(a);
  const size_t chunk_heads = static_cast<size_t>(a.batch) * chunks * a.heads;
  float* local = static_cast<float*>(a.workspace);
  float* decay = reinterpret_cast<float*>(static_cast<char*>(a.workspace) +
                                          align256(chunk_heads * a.headdim * a.dstate * sizeof(float)));
  const size_t tile_bytes = static_cast<size_t>(kTokenTile) * (a.headdim + a.dstate) * sizeof(float);
  ssd_internals_local_kernel<<<dim3(a.batch * chunks, a.heads), kThreads, tile_bytes, stream>>>(a, local, decay);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  const int64_t width = static_cast<int64_t>(a.heads) * a.headdim * a.dstate;
  ssd_internals_pass_kernel<<<dim3(static_cast<unsigned>((width + 255) / 256), a.batch), 256, 0, stream>>>(a, local,
                                                                                                          decay);
  if ((status = cudaGetLastError()) != cudaSuccess) return status;
  status = cudaMemsetAsync(a.cb, 0, static_cast<size_t>(a.batch) * chunks * a.groups * sizeof(float), stream);
  if (status != cudaSuccess) return status;
  const int tiles = (a.chunk + kCbTile - 1) / kCbTile;
  ssd_internals_cb_kernel<<<dim3(a.batch * chunks, a.groups, tiles * (tiles + 1) / 2), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
