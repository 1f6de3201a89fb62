#include "kernels/hadamard_quant.h"

#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/block_reduce.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/quant_epilogue.cuh"
#include "kernels/tensor_core.cuh"
#include "model/hadamard_base.h"

namespace ssdq::kernels {
namespace {

// The normalization and the output format of one rotated value; inv_out_scale = __frcp_rn(out_scale).
__device__ inline void store_output(const HadamardQuantArgs& a, float inv_out_scale, int64_t at, float rotated) {
  const float v = __fmul_rn(rotated, a.normalize);
  if (a.out_type == ElementType::kS8) {
    static_cast<int8_t*>(a.out)[at] = quantize_int8_fast(v, a.out_scale, inv_out_scale);
  } else if (a.out_type == ElementType::kF16) {
    static_cast<__half*>(a.out)[at] = __float2half_rn(v);
  } else {
    static_cast<float*>(a.out)[at] = v;
  }
}

// kRowPerBlock (prefill rows, and decode rows before sm_90), one block a row: 256 threads and
// four blocks an SM for many rows (2,048 rows, H100: 134 µs at n = 5120, K 20; 112 µs at n = 8192,
// K 1 — 144 / 159 µs with 512 threads), 512 threads for a few rows, where a lone row is
// latency-bound (12.4 µs against 17.6 µs with 256).
constexpr int kManyRowsThreads = 256, kFewRowsThreads = 512;
constexpr int kMaxBaseOrder = 28;  // the largest H_K the artifacts use (hadamard_quant_supported)
constexpr int kGatedBatch = 8;     // elements of y and z a thread loads before computing

// The butterfly stages h = 1, 2, 4, … < count over the first count values of v (a power of two
// ≤ kSize), in place and in the CPU's order; every index is a constant after unrolling.
template <int kSize>
__device__ inline void butterfly_stages(float (&v)[kSize], int count = kSize) {
#pragma unroll
  for (int h = 1; h < kSize; h *= 2)
#pragma unroll
    for (int e = 0; e < kSize; ++e)
      if (h < count && e < count && !(e & h)) {
        const float u = v[e], w = v[e + h];
        v[e] = __fadd_rn(u, w);
        v[e + h] = __fsub_rn(u, w);
      }
}

// The butterfly stages h = 1, 2, 4, … < m of every block of m (the row x in shared memory, n = K·m),
// each element through the same additions in the same order as the CPU's stage-by-stage loop.
// Two implementations: in registers for m ≥ kWarpSpan, and in shared memory for any m.
constexpr int kWarpSpan = 256;        // elements a warp transforms in registers: 8 a lane
constexpr int kMaxColumns = 32;  // m / kWarpSpan: the values a thread holds for the stages h ≥ 256

// The stages h < 256 of the warp's 256 consecutive elements, lane holding 8·lane … 8·lane + 7:
// h = 1, 2, 4 in registers, h = 8 … 128 with the partner lane's value through a shuffle.
__device__ inline void warp_butterfly_stages(float (&v)[8], int lane) {
  butterfly_stages(v);
#pragma unroll
  for (int s = 1; s < 32; s *= 2) {  // h = 8·s: element 8·lane + e pairs with lane ^ s
    // lower lane: v + partner, upper: partner − v; as fma(v, ±1, partner), one rounding either way
    const float sign = lane & s ? -1.f : 1.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = __fmaf_rn(v[e], sign, __shfl_xor_sync(0xffffffffu, v[e], s));
  }
}

// Stages 256 … m/2 of a row in `x` (256 ≤ m ≤ 8192): item = (block of m, column j0 < 256), a thread
// an item from first_item in steps of item_step, its m/256 values j0 + 256·r in registers;
// put(offset in the row, value) takes each result.
template <class Put>
__device__ inline void column_stages(const float* x, int n, int m, int first_item, int item_step, Put put) {
  const int columns = m / kWarpSpan;
  for (int item = first_item; item < n / columns; item += item_step) {
    const int at = item / kWarpSpan * m + item % kWarpSpan;
    float v[kMaxColumns];
#pragma unroll
    for (int r = 0; r < kMaxColumns; ++r) v[r] = r < columns ? x[at + r * kWarpSpan] : 0.f;
    butterfly_stages(v, columns);
#pragma unroll
    for (int r = 0; r < kMaxColumns; ++r) {
      if (r >= columns) break;
      put(at + r * kWarpSpan, v[r]);
    }
  }
}

// Stages h < 256: a warp takes 256 consecutive elements, 8 a lane (stages 1, 2, 4 in registers,
// 8 … 128 with the partner lane's value through a shuffle); stages 256 … m/2: a thread takes the
// m/256 elements j0 + 256·r of one block of m and runs them in registers. Needs 256 ≤ m ≤ 8192.
template <int kThreads>
__device__ inline void butterfly_in_registers(float* x, int n, int m) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  for (int c = warp; c < n / kWarpSpan; c += kThreads / 32) {
    float4* at = reinterpret_cast<float4*>(x + c * kWarpSpan + 8 * lane);
    const float4 lo = at[0], hi = at[1];
    float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    warp_butterfly_stages(v, lane);
    at[0] = make_float4(v[0], v[1], v[2], v[3]);
    at[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
  if (m == kWarpSpan) return;
  __syncthreads();
  column_stages(x, n, m, threadIdx.x, kThreads, [x](int i, float v) { x[i] = v; });
}

// Any m: two stages per pass where possible, a thread taking the quad (i, i+h, i+2h, i+3h) through
// stage h and then 2h.
template <int kThreads>
__device__ inline void butterfly_in_shared_memory(float* x, int n, int m) {
  const int log_m = __ffs(m) - 1;
  int h = 1, log_h = 0;
  for (; 4 * h <= m; h *= 4, log_h += 2) {
    __syncthreads();
    for (int p = threadIdx.x; p < n / 4; p += kThreads) {
      const int block = p >> (log_m - 2), r = p & (m / 4 - 1);
      const int i = block * m + ((r >> log_h) << (log_h + 2)) + (r & (h - 1));
      const float x0 = x[i], x1 = x[i + h], x2 = x[i + 2 * h], x3 = x[i + 3 * h];
      const float s01 = __fadd_rn(x0, x1), d01 = __fsub_rn(x0, x1), s23 = __fadd_rn(x2, x3), d23 = __fsub_rn(x2, x3);
      x[i] = __fadd_rn(s01, s23);
      x[i + 2 * h] = __fsub_rn(s01, s23);
      x[i + h] = __fadd_rn(d01, d23);
      x[i + 3 * h] = __fsub_rn(d01, d23);
    }
  }
  if (h < m) {  // one stage left when log2(m) is odd
    __syncthreads();
    for (int p = threadIdx.x; p < n / 2; p += kThreads) {
      const int block = p >> (log_m - 1), r = p & (m / 2 - 1);
      const int i = block * m + ((r >> log_h) << (log_h + 1)) + (r & (h - 1)), j = i + h;
      const float u = x[i], v = x[j];
      x[i] = __fadd_rn(u, v);
      x[j] = __fsub_rn(u, v);
    }
  }
}

// Output A of the H_K mix of one column: Σ_k ±v[k] in k's order, each sign H_K[k][A] a
// compile-time constant (model/hadamard_base.h), so a term is one add or subtract with the generic
// loop's single rounding (acc + (±v)) and no load of the sign.
template <int K, int A, int... Ks>
__device__ inline float mix_output(const float (&v)[K], std::integer_sequence<int, Ks...>) {
  float acc = 0.f;
  ((acc = std::integral_constant<int, hadamard_base_entry(K, Ks, A)>::value > 0 ? __fadd_rn(acc, v[Ks])
                                                                                : __fsub_rn(acc, v[Ks])),
   ...);
  return acc;
}

// Outputs first … first + count - 1 of the column, each handed to store(a2, value).
template <int K, typename Store, int... As>
__device__ inline void mix_outputs(const float (&v)[K], int first, int count, const Store& store,
                                   std::integer_sequence<int, As...> order) {
  ((As >= first && As < first + count ? store(As, mix_output<K, As>(v, order)) : void()), ...);
}

// The norm weights' loads: V consecutive floats (V = 4: one 16-byte load).
template <int V>
__device__ inline void load_floats(const float* from, float (&to)[V]) {
  if constexpr (V == 4) {
    const float4 f = *reinterpret_cast<const float4*>(from);
    to[0] = f.x, to[1] = f.y, to[2] = f.z, to[3] = f.w;
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) to[e] = from[e];
  }
}

// Group [g0, g0 + group_size) of the row: x = y·silu(z), returning the scale 1/RMS of the group.
// A thread takes V consecutive elements at a time (V = 4: 16-byte loads); kGatedBatch elements' y
// and z are loaded before any is used: the loads are in flight together rather than each behind
// the previous element's silu (its division branches).
template <int kThreads, int V>
__device__ inline float gate_group(const HadamardQuantArgs& a, const float* y, const float* z, float* x, int g0) {
  constexpr int kVectors = kGatedBatch / V, kStride = kThreads * V;
  float sum = 0.f;
  for (int i0 = threadIdx.x * V; i0 < a.group_size; i0 += kGatedBatch * kThreads) {
    float yv[kVectors][V], zv[kVectors][V];
#pragma unroll
    for (int u = 0; u < kVectors; ++u) {
      const int i = i0 + u * kStride;
      if (i < a.group_size) {
        load_floats(y + g0 + i, yv[u]);
        load_floats(z + g0 + i, zv[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kVectors; ++u) {
      const int i = i0 + u * kStride;
      if (i >= a.group_size) break;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float g = __fmul_rn(yv[u][e], silu(zv[u][e]));
        x[g0 + i + e] = g;
        sum += g * g;
      }
    }
  }
  return rsqrtf(block_sum<kThreads>(sum) / a.group_size + a.eps);
}

// The same with y's and z's rows already in shared memory (x holds y's, zs z's): every operand a
// shared-memory load, the summation in gate_group<kThreads, 1>'s order.
template <int kThreads>
__device__ inline float gate_group_staged(const HadamardQuantArgs& a, float* x, const float* zs, int g0) {
  float sum = 0.f;
  for (int i = g0 + threadIdx.x; i < g0 + a.group_size; i += kThreads) {
    const float g = __fmul_rn(x[i], silu(zs[i]));
    x[i] = g;
    sum += g * g;
  }
  return rsqrtf(block_sum<kThreads>(sum) / a.group_size + a.eps);
}

// x = (x · scale) · w over the group, V consecutive elements a step (kGatedBatch loaded at once).
template <int kThreads, int V>
__device__ inline void scale_group(const HadamardQuantArgs& a, float* x, int g0, float scale) {
  constexpr int kVectors = kGatedBatch / V, kStride = kThreads * V;
  for (int i0 = threadIdx.x * V; i0 < a.group_size; i0 += kGatedBatch * kThreads) {
    float wv[kVectors][V];
#pragma unroll
    for (int u = 0; u < kVectors; ++u) {
      const int i = i0 + u * kStride;
      if (i < a.group_size) load_floats(a.norm_weight + g0 + i, wv[u]);
    }
#pragma unroll
    for (int u = 0; u < kVectors; ++u) {
      const int i = i0 + u * kStride;
      if (i >= a.group_size) break;
#pragma unroll
      for (int e = 0; e < V; ++e) x[g0 + i + e] = __fmul_rn(__fmul_rn(x[g0 + i + e], scale), wv[u][e]);
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// How the gated norm reads y and z: one float at a time, four (every row and group start 16-byte
// aligned), or both rows copied into shared memory first (cp.async, the whole row in flight; aligned,
// and only where the 2n floats still let four 256-thread blocks share an SM: 2.7b's n = 5120 63.2 →
// 59.6 µs, while 8B-like's n = 8192 went 100 → 130 µs with one block an SM fewer).
enum class GatedLoads { kScalar, kVector, kStaged };
constexpr int kStagedMaxWidth = 7168;

bool gated_rows_aligned(const HadamardQuantArgs& a) {
  return a.z && a.group_size % 4 == 0 && a.ldy % 4 == 0 && a.z_stride % 4 == 0 && aligned16(a.y) && aligned16(a.z) &&
         aligned16(a.norm_weight);
}

// One block per row; the row lives in shared memory. kOrder: K when the mix is unrolled with
// H_K's signs as constants (K 12, 20 or 28: the orders hadamard_quant_supported takes), else 0.
// kLoads: how the gated norm reads y and z (GatedLoads); with kStaged, x = [y | z], 2n floats.
template <int kThreads, int kOrder, GatedLoads kLoads>
__global__ void __launch_bounds__(kThreads, 1024 / kThreads) hadamard_quant_kernel(HadamardQuantArgs a) {
  wait_for_previous_grid();
  allow_next_grid();
  extern __shared__ __align__(16) float x[];
  const int64_t row = blockIdx.x;
  const float* y = a.y + row * a.ldy;
  if (a.z) {
    const float* z = a.z + row * a.z_stride;
    if constexpr (kLoads == GatedLoads::kStaged) {
      float* zs = x + a.n;
      for (int i = 4 * threadIdx.x; i < a.n; i += 4 * kThreads) {
        cp_async_16(x + i, y + i);
        cp_async_16(zs + i, z + i);
      }
      cp_async_commit();
      cp_async_wait_all();
      __syncthreads();
      for (int g0 = 0; g0 < a.n; g0 += a.group_size) scale_group<kThreads, 4>(a, x, g0, gate_group_staged<kThreads>(a, x, zs, g0));
    } else {
      constexpr int V = kLoads == GatedLoads::kVector ? 4 : 1;
      for (int g0 = 0; g0 < a.n; g0 += a.group_size) scale_group<kThreads, V>(a, x, g0, gate_group<kThreads, V>(a, y, z, x, g0));
    }
  } else {
    for (int i = threadIdx.x; i < a.n; i += kThreads) x[i] = y[i];
  }
  const int m = a.n / a.base_order;
  if (a.rotate && m >= kWarpSpan && m <= kWarpSpan * kMaxColumns) {
    butterfly_in_registers<kThreads>(x, a.n, m);
  } else if (a.rotate) {
    butterfly_in_shared_memory<kThreads>(x, a.n, m);
  }
  __syncthreads();
  const float inv_out_scale = __frcp_rn(a.out_scale);
  if constexpr (kOrder > 1) {
    // The H_K mix as below (a thread a column, or two sharing it), every index a constant.
    const int split = m < kThreads ? 2 : 1, per_thread = kOrder / split;
    for (int t = threadIdx.x; t < m * split; t += kThreads) {
      const int b = t % m, first = t / m * per_thread;
      float v[kOrder];
#pragma unroll
      for (int k = 0; k < kOrder; ++k) v[k] = x[k * m + b];
      const int64_t column = row * a.n + b;
      mix_outputs<kOrder>(
          v, first, per_thread, [&](int a2, float acc) { store_output(a, inv_out_scale, column + a2 * m, acc); },
          std::make_integer_sequence<int, kOrder>{});
    }
    return;
  }
  if (a.rotate && a.base_order > 1) {
    // The H_K mix: a thread takes column b of the K blocks, reads its K values once and stores
    // the outputs, each summed over k in order.
    __shared__ int8_t signs[kMaxBaseOrder * kMaxBaseOrder];
    for (int i = threadIdx.x; i < a.base_order * a.base_order; i += kThreads) signs[i] = a.base_matrix[i];
    __syncthreads();
    // With fewer columns than threads, two threads share a column, each storing half of its K
    // outputs (K is even: 12, 20 or 28).
    const int K = a.base_order, split = m < kThreads ? 2 : 1, per_thread = K / split;
    for (int t = threadIdx.x; t < m * split; t += kThreads) {
      const int b = t % m, first = t / m * per_thread;
      float v[kMaxBaseOrder];  // registers: every index below is a constant after unrolling
#pragma unroll
      for (int k = 0; k < kMaxBaseOrder; ++k) v[k] = k < K ? x[k * m + b] : 0.f;
      for (int a2 = first; a2 < first + per_thread; ++a2) {
        float acc = 0.f;
#pragma unroll
        for (int k = 0; k < kMaxBaseOrder; ++k)
          if (k < K) acc = __fadd_rn(acc, signs[k * K + a2] > 0 ? v[k] : -v[k]);
        store_output(a, inv_out_scale, row * a.n + a2 * m + b, acc);
      }
    }
    return;
  }
  for (int i = threadIdx.x; i < a.n; i += kThreads) store_output(a, inv_out_scale, row * a.n + i, x[i]);
}

// kCluster: kClusterBlocks blocks share a row. With n = K·m, block r owns positions
// [r·span, (r+1)·span) of each of the K blocks of m (span = m / kClusterBlocks): it runs the
// butterfly stages h < span there; then it finishes positions t ∈ [r·tw, (r+1)·tw) of every
// block's slice (tw = span / kClusterBlocks) with the remaining stages h = span, 2·span, … as a
// kClusterBlocks-point transform over the slices (read from the other blocks' shared memory), and
// mixes those columns over the K blocks. Every output is the same additions in the same order as
// the one-block kernel. Without rotation, block r normalizes and stores its own positions.
// A decode row is latency-bound: the block is as wide as allowed, so each thread holds at most
// kClusterPerThread elements and every index is a shift or a mask.
constexpr int kClusterBlocks = 8, kLogClusterBlocks = 3;
constexpr int kClusterThreads = 1024;
constexpr int kClusterPerThread = 3;  // n ≤ 24576 → at most 3072 elements a block
constexpr int kClusterMaxGroups = 64;

__device__ inline int log2_of(int power_of_two) { return __ffs(power_of_two) - 1; }

__global__ void __launch_bounds__(kClusterThreads) hadamard_quant_cluster_kernel(HadamardQuantArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  constexpr int C = kClusterBlocks, T = kClusterThreads;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.y;
  const int segments = a.rotate ? a.base_order : 1, m = a.n / segments;
  const int span = m / C, owned = segments * span;
  const int log_span = a.rotate ? log2_of(span) : 0;
  extern __shared__ float slices[];
  float* local = slices;            // [segments][span]
  float* finished = slices + owned; // [segments][C][tw]
  __shared__ float group_partial[kClusterMaxGroups];
  __shared__ float group_scale[kClusterMaxGroups];
  __shared__ int8_t signs[kMaxBaseOrder * kMaxBaseOrder];
  // Element e of this block is column (e / span)·m + rank·span + e % span of the row.
  auto column = [&](int e) {
    return a.rotate ? ((e >> log_span) * m) + rank * span + (e & (span - 1)) : rank * span + e;
  };
  // Constants first, while the previous kernel may still be running.
  if (a.rotate && a.base_matrix)
    for (int i = threadIdx.x; i < segments * segments; i += T) signs[i] = a.base_matrix[i];
  float norm_weight[kClusterPerThread];
#pragma unroll
  for (int j = 0; j < kClusterPerThread; ++j) {
    const int e = threadIdx.x + j * T;
    norm_weight[j] = a.z && e < owned ? a.norm_weight[column(e)] : 0.f;
  }
  const float inv_out_scale = __frcp_rn(a.out_scale);
  float gate[kClusterPerThread];  // silu(z) at this thread's columns
  auto load_gates = [&] {
    const float* z = a.z + row * a.z_stride;
#pragma unroll
    for (int j = 0; j < kClusterPerThread; ++j) {
      const int e = threadIdx.x + j * T;
      gate[j] = e < owned ? silu(z[column(e)]) : 0.f;
    }
  };
  if (a.z && a.z_before_previous_grid) load_gates();
  wait_for_previous_grid();
  allow_next_grid();

  const float* y = a.y + row * a.ldy;
  if (a.z) {
    if (!a.z_before_previous_grid) load_gates();
    const int groups = a.n / a.group_size;
    float g[kClusterPerThread];
    int group[kClusterPerThread];
#pragma unroll
    for (int j = 0; j < kClusterPerThread; ++j) {
      const int e = threadIdx.x + j * T;
      g[j] = 0.f;
      group[j] = -1;
      if (e < owned) {
        const int col = column(e);
        g[j] = __fmul_rn(y[col], gate[j]);
        group[j] = groups == 1 ? 0 : col / a.group_size;
      }
    }
    for (int gi = 0; gi < groups; ++gi) {
      // Skip (block-uniformly) the groups none of this block's columns fall in: at the 8B-like
      // shape (one K block of 8192, 8 groups) each block's slice is one group.
      bool touched = false;
      for (int k = 0; k < segments && !touched; ++k) {
        const int first = k * m + rank * span, last = first + span;  // [first, last)
        touched = first < (gi + 1) * a.group_size && gi * a.group_size < last;
      }
      if (!touched) {
        if (threadIdx.x == 0) group_partial[gi] = 0.f;
        continue;
      }
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kClusterPerThread; ++j)
        if (group[j] == gi) sum = __fmaf_rn(g[j], g[j], sum);
      sum = block_sum<T>(sum);
      if (threadIdx.x == 0) group_partial[gi] = sum;
    }
    cluster.sync();  // every block's partial sums are written
    if (threadIdx.x < groups) {
      float total = 0.f;
#pragma unroll
      for (int r = 0; r < C; ++r) total += *cluster.map_shared_rank(&group_partial[threadIdx.x], r);
      group_scale[threadIdx.x] = rsqrtf(total / a.group_size + a.eps);
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kClusterPerThread; ++j) {
      const int e = threadIdx.x + j * T;
      if (e < owned) local[e] = __fmul_rn(__fmul_rn(g[j], group_scale[group[j]]), norm_weight[j]);
    }
  } else {
    for (int e = threadIdx.x; e < owned; e += T) local[e] = y[column(e)];
  }

  if (!a.rotate) {
    for (int e = threadIdx.x; e < owned; e += T) store_output(a, inv_out_scale, row * a.n + column(e), local[e]);
  } else {
    const int half_span = span / 2, log_half_span = log_span - 1;
    for (int h = 1, log_h = 0; h < span; h *= 2, ++log_h) {
      __syncthreads();
      for (int p = threadIdx.x; p < segments * half_span; p += T) {
        const int k = p >> log_half_span, q = p & (half_span - 1);
        const int i = (k << log_span) + ((q >> log_h) << (log_h + 1)) + (q & (h - 1)), j = i + h;
        const float u = local[i], v = local[j];
        local[i] = __fadd_rn(u, v);
        local[j] = __fsub_rn(u, v);
      }
    }
    cluster.sync();  // every block's local stages are done
    const int log_tw = log_span - kLogClusterBlocks, tw = 1 << log_tw;
    for (int e = threadIdx.x; e < segments * tw; e += T) {
      const int k = e >> log_tw, t = e & (tw - 1);
      float v[C];
#pragma unroll
      for (int c = 0; c < C; ++c) v[c] = *cluster.map_shared_rank(&local[(k << log_span) + (rank << log_tw) + t], c);
      butterfly_stages(v);
#pragma unroll
      for (int c = 0; c < C; ++c) finished[(((k << kLogClusterBlocks) + c) << log_tw) + t] = v[c];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < owned; e += T) {  // e = (a2, c, t)
      const int a2 = e >> (log_tw + kLogClusterBlocks), ct = e & ((C << log_tw) - 1);
      float acc;
      if (segments > 1) {
        acc = 0.f;
        for (int k = 0; k < segments; ++k) {
          const float v = finished[(k << (log_tw + kLogClusterBlocks)) + ct];
          acc = __fadd_rn(acc, signs[k * segments + a2] > 0 ? v : -v);
        }
      } else {
        acc = finished[ct];
      }
      const int c = ct >> log_tw, t = ct & (tw - 1);
      store_output(a, inv_out_scale, row * a.n + a2 * m + c * span + (rank << log_tw) + t, acc);
    }
  }
  cluster.sync();  // no block leaves while another may still read its shared memory
#endif
}

// kRegisters: one block a row of n/8 threads, the row in registers at 8 consecutive elements a
// thread. The gated norm's sums reduce inside each warp (a warp lies in one norm group) and each
// thread adds its group's warp partials after one barrier; the stages h < 256 run inside the warp
// (three in registers, five by shuffles), the stages 256 … m/2 and the H_K mix each after one
// shared-memory exchange. For decode rows, where kCluster's cluster barriers and distributed
// shared memory cost more than they share. kOrder: K, the mix unrolled with H_K's signs as constants.
constexpr int kRegistersPerThread = kWarpSpan / 32, kRegistersMaxWidth = kRegistersPerThread * 1024;

__device__ inline void load_eight(const float* from, float (&to)[kRegistersPerThread]) {
  const float4 lo = reinterpret_cast<const float4*>(from)[0], hi = reinterpret_cast<const float4*>(from)[1];
  to[0] = lo.x, to[1] = lo.y, to[2] = lo.z, to[3] = lo.w, to[4] = hi.x, to[5] = hi.y, to[6] = hi.z, to[7] = hi.w;
}

__device__ inline void store_eight(float* to, const float (&from)[kRegistersPerThread]) {
  reinterpret_cast<float4*>(to)[0] = make_float4(from[0], from[1], from[2], from[3]);
  reinterpret_cast<float4*>(to)[1] = make_float4(from[4], from[5], from[6], from[7]);
}

template <int kOrder>
__global__ void __launch_bounds__(1024) hadamard_quant_registers_kernel(HadamardQuantArgs a) {
  __shared__ __align__(16) float x[kRegistersMaxWidth];
  __shared__ float warp_sum[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, first = kRegistersPerThread * threadIdx.x;
  const int threads = static_cast<int>(blockDim.x), m = a.n / kOrder;
  const int64_t row = blockIdx.x;
  float v[kRegistersPerThread], weight[kRegistersPerThread], gate[kRegistersPerThread];
  if (a.z) load_eight(a.norm_weight + first, weight);
  auto load_gates = [&] {
    load_eight(a.z + row * a.z_stride + first, gate);
#pragma unroll
    for (int e = 0; e < kRegistersPerThread; ++e) gate[e] = silu(gate[e]);
  };
  if (a.z && a.z_before_previous_grid) load_gates();
  wait_for_previous_grid();
  allow_next_grid();

  load_eight(a.y + row * a.ldy + first, v);
  if (a.z) {
    if (!a.z_before_previous_grid) load_gates();
    float sum = 0.f;
#pragma unroll
    for (int e = 0; e < kRegistersPerThread; ++e) {
      v[e] = __fmul_rn(v[e], gate[e]);
      sum = __fmaf_rn(v[e], v[e], sum);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) warp_sum[warp] = sum;
    __syncthreads();
    const int group_warps = a.group_size / kWarpSpan, group_first = warp / group_warps * group_warps;
    float total = 0.f;
    for (int w = group_first; w < group_first + group_warps; ++w) total += warp_sum[w];
    const float scale = rsqrtf(total / a.group_size + a.eps);
#pragma unroll
    for (int e = 0; e < kRegistersPerThread; ++e) v[e] = __fmul_rn(__fmul_rn(v[e], scale), weight[e]);
  }

  warp_butterfly_stages(v, lane);
  const float inv_out_scale = __frcp_rn(a.out_scale);
  const int columns = m / kWarpSpan;
  if (kOrder == 1 && columns == 1) {
#pragma unroll
    for (int e = 0; e < kRegistersPerThread; ++e) store_output(a, inv_out_scale, row * a.n + first + e, v[e]);
    return;
  }
  store_eight(x + first, v);
  __syncthreads();
  if (columns > 1) {  // stages h ≥ 256: straight to the output without an H_K mix
    column_stages(x, a.n, m, threadIdx.x, threads, [&](int i, float c) {
      if (kOrder == 1) {
        store_output(a, inv_out_scale, row * a.n + i, c);
      } else {
        x[i] = c;
      }
    });
    if (kOrder == 1) return;
    __syncthreads();
  }
  if constexpr (kOrder > 1) {
    // The H_K mix: a worker takes column b, reads its K values once and stores K / split outputs.
    const int split = 4 * m <= threads ? 4 : 2 * m <= threads ? 2 : 1, per_worker = kOrder / split;
    for (int w = threadIdx.x; w < m * split; w += threads) {
      const int b = w % m;
      float c[kOrder];
#pragma unroll
      for (int k = 0; k < kOrder; ++k) c[k] = x[k * m + b];
      const int64_t column = row * a.n + b;
      mix_outputs<kOrder>(
          c, w / m * per_worker, per_worker,
          [&](int a2, float acc) { store_output(a, inv_out_scale, column + a2 * m, acc); },
          std::make_integer_sequence<int, kOrder>{});
    }
  }
}

bool power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

// The shapes kCluster splits: the row's K blocks of m divide into 8 slices, and with rotation
// each slice again into 8 (m ≥ 64); a handful of norm groups.
bool cluster_shape_ok(const HadamardQuantArgs& a) {
  const int m = a.rotate ? a.n / a.base_order : a.n;
  if (m % kClusterBlocks != 0 || a.rows > 65535 || a.n / kClusterBlocks > kClusterPerThread * kClusterThreads) return false;
  if (a.rotate && (m / kClusterBlocks) % kClusterBlocks != 0) return false;
  return !a.z || a.n / a.group_size <= kClusterMaxGroups;
}

bool use_cluster(const HadamardQuantArgs& a) {
  switch (a.schedule) {
    case HadamardQuantSchedule::kRowPerBlock:
    case HadamardQuantSchedule::kRegisters: return false;
    case HadamardQuantSchedule::kCluster: return true;
    case HadamardQuantSchedule::kAuto: break;
  }
  return a.rows <= kHadamardDecodeMaxRows && cluster_shape_ok(a) && device_is_sm90_or_newer();
}

bool common_supported(const HadamardQuantArgs& a) {
  const int k = a.base_order;
  if (a.rotate) {
    if (!(k == 1 || k == 12 || k == 20 || k == kMaxBaseOrder) || a.n <= 0 || a.n % k != 0 || !power_of_two(a.n / k)) return false;
    if (k > 1 && !a.base_matrix) return false;
  } else if (a.n <= 0 || k != 1) {
    return false;
  }
  if (a.n > 24576 || a.rows <= 0 || a.rows > 2147483647 || !a.y || a.ldy < a.n || !a.out) return false;
  if (a.out_type != ElementType::kS8 && a.out_type != ElementType::kF16 && a.out_type != ElementType::kF32) return false;
  if (a.out_type == ElementType::kS8 && !(a.out_scale > 0.f)) return false;
  return !a.z || (a.norm_weight && a.group_size > 0 && a.n % a.group_size == 0 && a.z_stride >= a.n);
}

cudaError_t launch_cluster(const HadamardQuantArgs& a, cudaStream_t stream) {
  const int owned = (a.rotate ? a.n / a.base_order / kClusterBlocks * a.base_order : a.n / kClusterBlocks);
  const LaunchShape shape{dim3(kClusterBlocks, static_cast<unsigned>(a.rows)), dim3(kClusterThreads),
                          2 * sizeof(float) * owned, kClusterBlocks};
  return launch_kernel(hadamard_quant_cluster_kernel, shape, stream, a);
}

template <int kThreads, int kOrder, GatedLoads kLoads>
cudaError_t launch_rows_with(const HadamardQuantArgs& a, size_t shared, cudaStream_t stream) {
  const auto kernel = hadamard_quant_kernel<kThreads, kOrder, kLoads>;
  if (const cudaError_t status = allow_dynamic_shared(kernel, shared); status != cudaSuccess) return status;
  return launch_kernel(kernel, LaunchShape{dim3(static_cast<unsigned>(a.rows)), dim3(kThreads), shared}, stream, a);
}

// Whether the host copy of H_K (K 12, 20 or 28) is the matrix the unrolled kernels spell.
bool is_builtin_base(const int8_t* h, int k) {
  static const std::vector<int8_t> h12 = hadamard_base_matrix(12), h20 = hadamard_base_matrix(20),
                                   h28 = hadamard_base_matrix(28);
  const std::vector<int8_t>& builtin = k == 12 ? h12 : k == 20 ? h20 : h28;
  return std::memcmp(h, builtin.data(), builtin.size()) == 0;
}

// The shapes kRegisters takes: rotated rows of at most 8192 (n/8 threads), m ≥ 256, H_K the
// built-in one (its host copy given), 16-byte aligned rows, norm groups of whole warps.
bool registers_shape_ok(const HadamardQuantArgs& a) {
  const int k = a.base_order, m = a.n / k;
  if (!a.rotate || a.n > kRegistersMaxWidth || m < kWarpSpan || m > kWarpSpan * kMaxColumns) return false;
  if (k > 1 && !(a.base_matrix_host && is_builtin_base(a.base_matrix_host, k))) return false;
  if (a.ldy % 4 != 0 || !aligned16(a.y)) return false;
  return !a.z || (a.group_size % kWarpSpan == 0 && a.z_stride % 4 == 0 && aligned16(a.z) && aligned16(a.norm_weight));
}

bool use_registers(const HadamardQuantArgs& a) {
  switch (a.schedule) {
    case HadamardQuantSchedule::kRegisters: return true;
    case HadamardQuantSchedule::kAuto: return a.rows <= kHadamardDecodeMaxRows && registers_shape_ok(a);
    case HadamardQuantSchedule::kRowPerBlock:
    case HadamardQuantSchedule::kCluster: break;
  }
  return false;
}

cudaError_t launch_registers(const HadamardQuantArgs& a, cudaStream_t stream) {
  const LaunchShape shape{dim3(static_cast<unsigned>(a.rows)), dim3(a.n / kRegistersPerThread)};
  switch (a.base_order) {
    case 12: return launch_kernel(hadamard_quant_registers_kernel<12>, shape, stream, a);
    case 20: return launch_kernel(hadamard_quant_registers_kernel<20>, shape, stream, a);
    case 28: return launch_kernel(hadamard_quant_registers_kernel<28>, shape, stream, a);
    default: return launch_kernel(hadamard_quant_registers_kernel<1>, shape, stream, a);
  }
}

template <int kThreads, int kOrder>
cudaError_t launch_rows_order(const HadamardQuantArgs& a, size_t shared, cudaStream_t stream) {
  const bool aligned = gated_rows_aligned(a);
  if (aligned && a.n <= kStagedMaxWidth) return launch_rows_with<kThreads, kOrder, GatedLoads::kStaged>(a, 2 * shared, stream);
  if constexpr (kOrder != 20 && kOrder != 28) {  // with the 20- and 28-term mixes the vector loads spill registers
    if (aligned) return launch_rows_with<kThreads, kOrder, GatedLoads::kVector>(a, shared, stream);
  }
  return launch_rows_with<kThreads, kOrder, GatedLoads::kScalar>(a, shared, stream);
}

// The unrolled mix where the host copy of H_K is given (and is the built-in one), the generic
// kernel otherwise.
template <int kThreads>
cudaError_t launch_rows(const HadamardQuantArgs& a, size_t shared, cudaStream_t stream) {
  const int k = a.base_order;
  if (a.rotate && a.base_matrix_host && (k == 12 || k == 20 || k == 28) && is_builtin_base(a.base_matrix_host, k)) {
    switch (k) {
      case 12: return launch_rows_order<kThreads, 12>(a, shared, stream);
      case 20: return launch_rows_order<kThreads, 20>(a, shared, stream);
      default: return launch_rows_order<kThreads, 28>(a, shared, stream);
    }
  }
  return launch_rows_order<kThreads, 0>(a, shared, stream);
}

}  // namespace

bool hadamard_quant_supported(const HadamardQuantArgs& a) {
  if (!common_supported(a)) return false;
  if (a.schedule == HadamardQuantSchedule::kCluster) return cluster_shape_ok(a) && device_is_sm90_or_newer();
  if (a.schedule == HadamardQuantSchedule::kRegisters) return registers_shape_ok(a);
  return true;
}

cudaError_t launch_hadamard_quant(const HadamardQuantArgs& a, cudaStream_t stream) {
  if (!hadamard_quant_supported(a)) return cudaErrorInvalidValue;
  if (use_registers(a)) return launch_registers(a, stream);
  if (use_cluster(a)) return launch_cluster(a, stream);
  const size_t shared = sizeof(float) * a.n;
  // The wide block while the rows leave SMs idle (decode batches), the narrow one for prefill.
  const int sms = current_device_attribute(cudaDevAttrMultiProcessorCount);
  return int64_t(a.rows) * kManyRowsThreads < int64_t(sms) * 1024 ? launch_rows<kFewRowsThreads>(a, shared, stream)
                                                          : launch_rows<kManyRowsThreads>(a, shared, stream);
}

}  // namespace ssdq::kernels
