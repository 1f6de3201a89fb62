#include "kernels/gemv.h"

#include <cmath>

#include "kernels/block_reduce.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/tensor_core.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Group [g0, g0 + group_size) of the gated norm of input row r, as bf16, into `row` (shared or
// global memory), by the whole block of kThreads. `write_sums`: this block writes the group's sum
// of squares (GemvArgs::sum_squares) when asked for.
__device__ void build_gated_group(const GemvArgs& a, int r, int g0, __nv_bfloat16* row, bool write_sums) {
  const __nv_bfloat16* y = a.y + static_cast<int64_t>(r) * a.k;
  const __nv_bfloat16* z = a.z + r * a.z_stride;
  float sum = 0.f;
  for (int i = threadIdx.x; i < a.group_size; i += kThreads) {
    const float g = __bfloat162float(y[g0 + i]) * silu(__bfloat162float(z[g0 + i]));
    sum += g * g;
  }
  const float total = block_sum<kThreads>(sum);
  const float scale = a.sum_squares ? 1.f : rsqrtf(total / a.group_size + a.eps);
  if (a.sum_squares && write_sums && threadIdx.x == 0) a.sum_squares[r * (a.k / a.group_size) + g0 / a.group_size] = total;
  for (int i = threadIdx.x; i < a.group_size; i += kThreads) {
    const float g = __bfloat162float(y[g0 + i]) * silu(__bfloat162float(z[g0 + i]));
    row[g0 + i] = __float2bfloat16_rn(g * scale * a.norm_weight[g0 + i]);
  }
}

// Norm group `group` of input row r (the RMSNorm has one, the whole row), by the whole block: the
// one piece of code that builds a row, so that rows built by the GEMV's prologue and by
// gemv_inputs_kernel have the same bits.
__device__ void build_input_group(const GemvArgs& a, int r, int group, __nv_bfloat16* row, bool write_sums) {
  if (a.input == GemvInput::kRmsNorm) {
    const float* src = a.residual + static_cast<int64_t>(r) * a.k;
    float sum = 0.f;
    for (int i = threadIdx.x; i < a.k; i += kThreads) sum += src[i] * src[i];
    const float scale = rsqrtf(block_sum<kThreads>(sum) / a.k + a.eps);
    for (int i = threadIdx.x; i < a.k; i += kThreads) row[i] = __float2bfloat16_rn(src[i] * scale * a.norm_weight[i]);
  } else {
    build_gated_group(a, r, group * a.group_size, row, write_sums);
  }
}

int norm_groups(const GemvArgs& a) { return a.input == GemvInput::kGatedRmsNorm ? a.k / a.group_size : 1; }

// Input row r, as bf16, by the whole block (the GEMV's prologue).
__device__ void build_input_row(const GemvArgs& a, int r, __nv_bfloat16* row, bool write_sums) {
  if (a.input == GemvInput::kBf16) {
    const __nv_bfloat16* src = a.x + r * a.ldx;
    for (int i = threadIdx.x; i < a.k; i += kThreads) row[i] = src[i];
  } else if (a.input == GemvInput::kRmsNorm) {
    build_input_group(a, r, 0, row, write_sums);
  } else {
    for (int g0 = 0; g0 < a.k; g0 += a.group_size) build_gated_group(a, r, g0, row, write_sums);
  }
}

// GemvArgs::staged: norm group blockIdx.y of row blockIdx.x, built once into global memory.
__global__ void __launch_bounds__(kThreads) gemv_inputs_kernel(GemvArgs a) {
  wait_for_previous_grid();
  allow_next_grid();
  build_input_group(a, blockIdx.x, blockIdx.y, a.staged + static_cast<int64_t>(blockIdx.x) * a.k, true);
}

// The sums: mma.sync.m16n8k16 tiles, the M ≤ 16 input rows as the rows of A (rows M..15 zero) and
// 8 weight rows as the columns of B. A tensor core computes each output from its own row of A and
// column of B, so a row's bits do not depend on the rows beside it, and every order below depends
// on k alone: the same bits at 1 row as at 16, and at any split of the columns into tiles. Up to 8
// rows the kernel (kHigh false) loads no rows 8..15 and keeps those words of A zero.
//
// Lane (g, q) = (lane / 4, lane % 4) loads 16 bytes of weight row g of the tile at k offset 8q of
// its warp's 32-wide slice, and 16 bytes of input rows g and g + 8 at the same offset. Lane (g, q)'s words of
// A and B hold k slots 2q, 2q+1, 2q+8, 2q+9 of an mma; mapping those slots onto the lane's own
// 8 consecutive k values (the first mma takes values 0..3, the second 4..7) lets both operands come
// straight from 16-byte loads without shuffles: a sum over k does not care which slot holds which k,
// and the mapping is fixed, so the bits are too.
//
// A block's 8 warps split k: warp w takes the 32 values at 256·j + 32·w of every step j, its chain
// of mmas running over j in order; the 8 partial sums of an output are then added warp 0 first.
constexpr int kSliceK = 32;
constexpr int kBlockK = kWarps * kSliceK;
// 16-byte weight loads a lane has in flight: kTiles tiles × kSteps steps.
constexpr int kLoadsPerLane = 4;
// Three blocks an SM (at most 85 registers a thread): with two, 2.7b's in_proj and out_proj grids
// took two waves (docs/kernels/gemm.md).
constexpr int kMinBlocksPerSm = 3;

struct RowSlice {
  const __nv_bfloat16* row;  // input row g of this lane, or null where g ≥ m
  const __nv_bfloat16* high;  // input row g + 8, or null where g + 8 ≥ m
  int k, warp, q;
  __device__ int offset(int step) const { return step * kBlockK + warp * kSliceK + 8 * q; }
};

template <int kTiles, int kSteps>
__device__ inline void load_weight_steps(const uint4* const (&rows)[kTiles], const RowSlice& s, int first, int steps,
                                         uint4 (&w)[kSteps][kTiles]) {
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    const int k = s.offset(first + j);
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
      w[j][t] = rows[t] && first + j < steps && k < s.k ? __ldg(rows[t] + k / 8) : make_uint4(0, 0, 0, 0);
  }
}

// kTiles: tiles of 8 columns a warp computes at once (each input load serves all of them). kHigh:
// rows 8..15 of A are loaded (m > 8).
template <int kTiles, bool kHigh>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) gemv_kernel(GemvArgs a, bool rows_in_global, int64_t shared_row_stride) {
  constexpr int kSteps = kLoadsPerLane / kTiles;
  constexpr int kSlots = kHigh ? 128 : 64;  // a tile's outputs: 8 or 16 rows × 8 columns
  extern __shared__ __align__(16) unsigned char shared[];
  __shared__ float partial[kWarps][kTiles][kSlots];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int first_column = blockIdx.x * 8 * kTiles;
  const int steps = (a.k + kBlockK - 1) / kBlockK;
  const uint4* rows[kTiles];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const int col = first_column + 8 * t + g;
    rows[t] = col < a.n ? reinterpret_cast<const uint4*>(a.w + static_cast<int64_t>(col) * a.k) : nullptr;
  }
  RowSlice slice{nullptr, nullptr, a.k, warp, q};
  // The first weights are read before the previous kernel has finished: they do not depend on it.
  uint4 w[kSteps][kTiles];
  load_weight_steps<kTiles, kSteps>(rows, slice, 0, steps, w);
  wait_for_previous_grid();
  allow_next_grid();
  if (rows_in_global) {
    if (g < a.m) slice.row = a.x + g * a.ldx;
    if (kHigh && g + 8 < a.m) slice.high = a.x + (g + 8) * a.ldx;
  } else {
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(shared);
    for (int r = 0; r < a.m; ++r) build_input_row(a, r, xs + r * shared_row_stride, blockIdx.x == 0);
    __syncthreads();
    if (g < a.m) slice.row = xs + g * shared_row_stride;
    if (kHigh && g + 8 < a.m) slice.high = xs + (g + 8) * shared_row_stride;
  }
  float acc[kTiles][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
  for (int step = 0; step < steps; step += kSteps) {
    uint4 x[kSteps], xh[kSteps];
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const int k = slice.offset(step + j);
      const bool inside = step + j < steps && k < a.k;
      x[j] = slice.row && inside ? *reinterpret_cast<const uint4*>(slice.row + k) : make_uint4(0, 0, 0, 0);
      xh[j] = kHigh && slice.high && inside ? *reinterpret_cast<const uint4*>(slice.high + k) : make_uint4(0, 0, 0, 0);
    }
    uint4 next[kSteps][kTiles];
    if (step + kSteps < steps) load_weight_steps<kTiles, kSteps>(rows, slice, step + kSteps, steps, next);
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      if (step + j >= steps) break;  // the same for the whole warp: steps past k run no mma at all
      // A's words: row g's k slots (2q, 2q+1), row g + 8's, row g's (2q+8, 2q+9), row g + 8's.
      const uint32_t low[4] = {x[j].x, xh[j].x, x[j].y, xh[j].y}, high[4] = {x[j].z, xh[j].z, x[j].w, xh[j].w};
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        mma_bf16_16816(acc[t], low, w[j][t].x, w[j][t].y);
        mma_bf16_16816(acc[t], high, w[j][t].z, w[j][t].w);
      }
    }
    if (step + kSteps < steps) {
#pragma unroll
      for (int j = 0; j < kSteps; ++j)
#pragma unroll
        for (int t = 0; t < kTiles; ++t) w[j][t] = next[j][t];
    }
  }
  // Lane (g, q) holds rows g and g + 8, columns 2q and 2q + 1 of each tile (acc[t][0..1], [2..3]);
  // slot 8·row + column.
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    partial[warp][t][2 * lane] = acc[t][0];
    partial[warp][t][2 * lane + 1] = acc[t][1];
    if (kHigh) {
      partial[warp][t][64 + 2 * lane] = acc[t][2];
      partial[warp][t][64 + 2 * lane + 1] = acc[t][3];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTiles * kSlots; i += kThreads) {
    const int t = i / kSlots, slot = i % kSlots, row = slot / 8, col = first_column + 8 * t + slot % 8;
    if (row >= a.m || col >= a.n) continue;
    float sum = partial[0][t][slot];
#pragma unroll
    for (int other = 1; other < kWarps; ++other) sum += partial[other][t][slot];
    if (a.out_type == ElementType::kF32) {
      float* out = static_cast<float*>(a.out) + row * a.ldout + col;
      *out = a.accumulate ? *out + sum : sum;
    } else {
      static_cast<__nv_bfloat16*>(a.out)[row * a.ldout + col] = __float2bfloat16_rn(sum);
    }
  }
}

// Rows of an input in shared memory are 64 bytes further apart than k, so that the two rows one
// phase of a 16-byte load reads fall in different banks.
constexpr int kSharedRowPad = 32;

template <int kTiles, bool kHigh>
cudaError_t launch_tiles(const GemvArgs& a, bool rows_in_global, cudaStream_t stream) {
  const int64_t stride = a.k + kSharedRowPad;
  const size_t shared = rows_in_global ? 0 : static_cast<size_t>(a.m) * stride * sizeof(__nv_bfloat16);
  const auto kernel = gemv_kernel<kTiles, kHigh>;
  if (const cudaError_t status = allow_dynamic_shared(kernel, shared); status != cudaSuccess) return status;
  const int64_t blocks = (a.n + 8 * kTiles - 1) / (8 * kTiles);
  return launch_kernel(kernel, LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), shared}, stream, a,
                       rows_in_global, stride);
}

// Tiles a warp computes at once: two share each input load (measured faster than one or four on
// 2.7b's and 8B-like's in_proj and 8B-like's out_proj, docs/kernels/gemm.md), unless the grid of
// one-tile blocks spreads over the SMs much more evenly (each SM's share rounded up is what the
// launch takes: 2.7b's out_proj, 320 blocks against 160). It depends on n alone, and a row's bits
// on none of it.
int tiles_per_warp(int n) {
  const double sms = current_device_attribute(cudaDevAttrMultiProcessorCount);
  auto spread = [&](int tiles) {
    const double per_sm = std::ceil((n + 8.0 * tiles - 1) / (8 * tiles)) / sms;
    return per_sm / std::ceil(per_sm);
  };
  return spread(1) > spread(2) + 0.1 ? 1 : 2;
}

template <bool kHigh>
cudaError_t launch_rows(const GemvArgs& a, bool rows_in_global, cudaStream_t stream) {
  return tiles_per_warp(a.n) == 1 ? launch_tiles<1, kHigh>(a, rows_in_global, stream)
                                  : launch_tiles<2, kHigh>(a, rows_in_global, stream);
}

// Norms over m·k bf16 of at least kStagedInputBytes are built once a group beforehand
// (GemvArgs::staged, one block a row and norm group) rather than by every block, whose prologue
// otherwise delays its weight stream: 8B-like's out_proj at one row (8,192 wide) 59 → 26 µs;
// below it (2.7b's one-row norms, 5–10 KB) both ways measured alike (docs/kernels/gemm.md).
constexpr int64_t kStagedInputBytes = 16 * 1024;
inline bool wide_rows(int m, int k) { return static_cast<int64_t>(m) * k * 2 >= kStagedInputBytes; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether launch_gemv builds the rows in each block's shared memory: bf16 rows that 16-byte loads
// cannot read where they are, and norms not staged beforehand.
bool rows_in_shared(const GemvArgs& a) {
  if (a.input == GemvInput::kBf16) return !(aligned16(a.x) && a.ldx % 8 == 0);
  return !(a.staged && wide_rows(a.m, a.k));
}

}  // namespace

bool gemv_shape_supported(int m, int n, int k) {
  return m >= 1 && m <= kGemvMaxRows && n >= 1 && k >= 8 && k % 8 == 0;
}

bool gemv_supported(const GemvArgs& a) {
  if (!gemv_shape_supported(a.m, a.n, a.k)) return false;
  if (rows_in_shared(a) && static_cast<int64_t>(a.m) * a.k * sizeof(__nv_bfloat16) > kGemvMaxInputBytes) return false;
  if (!a.w || !aligned16(a.w) || !a.out || a.ldout < a.n) return false;
  if (a.accumulate && a.out_type != ElementType::kF32) return false;
  switch (a.input) {
    case GemvInput::kBf16: return !a.sum_squares && a.x && a.ldx >= a.k;
    case GemvInput::kRmsNorm: return !a.sum_squares && a.residual && a.norm_weight;
    case GemvInput::kGatedRmsNorm:
      return (!a.sum_squares || !a.accumulate) && a.y && a.z && a.norm_weight && a.group_size > 0 && a.k % a.group_size == 0 && a.z_stride >= a.k;
  }
  return false;
}

cudaError_t launch_gemv(const GemvArgs& given, cudaStream_t stream) {
  if (!gemv_supported(given)) return cudaErrorInvalidValue;
  GemvArgs a = given;
  if (a.staged && wide_rows(a.m, a.k) && a.input != GemvInput::kBf16) {
    // The norms once a row (the prologue's code), then the GEMV over the bf16 rows, read where they
    // are: wide rows that every block would otherwise build again.
    const LaunchShape shape{dim3(a.m, norm_groups(a)), dim3(kThreads), 0};
    if (const cudaError_t status = launch_kernel(gemv_inputs_kernel, shape, stream, a);
        status != cudaSuccess)
      return status;
    a.input = GemvInput::kBf16;
    a.x = a.staged;
    a.ldx = a.k;
    a.sum_squares = nullptr;
  }
  // Bf16 rows are read where they are when 16-byte loads can read them; otherwise, and for the
  // norms, each block builds them in shared memory.
  const bool rows_in_global = !rows_in_shared(a);
  return a.m > 8 ? launch_rows<true>(a, rows_in_global, stream) : launch_rows<false>(a, rows_in_global, stream);
}

}  // namespace ssdq::kernels
