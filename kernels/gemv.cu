#include "kernels/gemv.h"

#include <algorithm>
#include <cstring>

#include "kernels/block_reduce.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/row_stream.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane (8 measured slower on an H200)

// Input row r, as bf16, into `row` (shared or global memory), by the whole block of kThreads: the
// one piece of code that builds a row, so that rows built by the GEMV's prologue and by
// gemv_inputs_kernel have the same bits. `write_sums`: this block writes the row's sums of squares
// (GemvArgs::sum_squares) when asked for.
__device__ void build_input_row(const GemvArgs& a, int r, __nv_bfloat16* row, bool write_sums) {
  if (a.input == GemvInput::kBf16) {
    const __nv_bfloat16* src = a.x + r * a.ldx;
    for (int i = threadIdx.x; i < a.k; i += kThreads) row[i] = src[i];
  } else if (a.input == GemvInput::kRmsNorm) {
    const float* src = a.residual + static_cast<int64_t>(r) * a.k;
    float sum = 0.f;
    for (int i = threadIdx.x; i < a.k; i += kThreads) sum += src[i] * src[i];
    const float scale = rsqrtf(block_sum<kThreads>(sum) / a.k + a.eps);
    for (int i = threadIdx.x; i < a.k; i += kThreads) row[i] = __float2bfloat16_rn(src[i] * scale * a.norm_weight[i]);
  } else {
    const __nv_bfloat16* y = a.y + static_cast<int64_t>(r) * a.k;
    const __nv_bfloat16* z = a.z + r * a.z_stride;
    for (int g0 = 0; g0 < a.k; g0 += a.group_size) {
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
  }
}

// Writes the m input rows, as bf16, into shared memory.
__device__ void load_inputs(const GemvArgs& a, __nv_bfloat16* xs) {
  for (int r = 0; r < a.m; ++r) build_input_row(a, r, xs + static_cast<int64_t>(r) * a.k, blockIdx.x == 0);
  __syncthreads();
}

// GemvArgs::staged: row blockIdx.x's normalised input, built once into global memory.
__global__ void __launch_bounds__(kThreads) gemv_inputs_kernel(GemvArgs a) {
  wait_for_previous_grid();
  allow_next_grid();
  build_input_row(a, blockIdx.x, a.staged + static_cast<int64_t>(blockIdx.x) * a.k, true);
}

__device__ inline void accumulate8(const uint4& w, const uint4& x, float& acc) {
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 wf = __bfloat1622float2(w2[i]);
    const float2 xf = __bfloat1622float2(x2[i]);
    acc = fmaf(wf.x, xf.x, acc);
    acc = fmaf(wf.y, xf.y, acc);
  }
}

// Column `col` of the M rows staged in xs: lanes stream the weight row in 16-byte pieces, and each
// row's sum runs in one order whatever M is and whichever warp takes the column.
template <int M>
__device__ inline void gemv_column(const GemvArgs& a, const __nv_bfloat16* xs, int col, int lane) {
  const uint4* w = reinterpret_cast<const uint4*>(a.w + static_cast<int64_t>(col) * a.k);
  const int pieces = a.k / 8;
  float acc[M];
#pragma unroll
  for (int r = 0; r < M; ++r) acc[r] = 0.f;
  stream_row_pieces<kUnroll>(w, pieces, lane, [&](int p, const uint4& wv) {
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const uint4 xv = reinterpret_cast<const uint4*>(xs + static_cast<int64_t>(r) * a.k)[p];
      accumulate8(wv, xv, acc[r]);
    }
  });
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float v = acc[r];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) {
      if (a.out_type == ElementType::kF32) {
        float* out = static_cast<float*>(a.out) + r * a.ldout + col;
        *out = a.accumulate ? *out + v : v;
      } else {
        static_cast<__nv_bfloat16*>(a.out)[r * a.ldout + col] = __float2bfloat16_rn(v);
      }
    }
  }
}

// A warp per output column. A single row (the decode step) has a grid over all the columns, a
// column a warp. Several rows whose inputs are wide (m·k bf16 of at least kWideInputBytes) have one
// wave of blocks whose warps walk the columns two at a time, so the rows are staged once per block
// rather than once per kWarps columns (at 8 rows of 2.7b's in_proj a grid over the columns would read 53 MB of
// input rows from L2 beside 54 MB of weights), and their norms are built once a row beforehand
// (GemvArgs::staged). Narrow rows (the bundled model, k = 256) stage again faster than a warp walks
// its columns one after another.
constexpr int64_t kWideInputBytes = 16 * 1024;
inline bool wide_rows(int m, int k) { return m > 1 && static_cast<int64_t>(m) * k * 2 >= kWideInputBytes; }

// Columns col and col + 1 (where it exists) of the M rows staged in xs, a lane's pieces of both
// weight rows against each input piece converted once: half the shared-memory reads and
// conversions a weight byte of gemv_column, and each column's sums in gemv_column's order (the
// same fmaf chain over the same values), so the same bits.
template <int M>
__device__ inline void gemv_column_pair(const GemvArgs& a, const __nv_bfloat16* xs, int col, int lane) {
  const bool second = col + 1 < a.n;
  const uint4* w0 = reinterpret_cast<const uint4*>(a.w + static_cast<int64_t>(col) * a.k);
  const uint4* w1 = second ? w0 + a.k / 8 : w0;
  const int pieces = a.k / 8;
  float acc0[M], acc1[M];
#pragma unroll
  for (int r = 0; r < M; ++r) acc0[r] = acc1[r] = 0.f;
  for (int base = lane; base < pieces; base += 32 * kUnroll) {
    uint4 v0[kUnroll], v1[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = base + 32 * u;
      v0[u] = p >= pieces ? make_uint4(0, 0, 0, 0) : __ldg(w0 + p);
      v1[u] = p >= pieces ? make_uint4(0, 0, 0, 0) : __ldg(w1 + p);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = base + 32 * u;
      if (p >= pieces) break;
      float2 f0[4], f1[4];
      const __nv_bfloat162* h0 = reinterpret_cast<const __nv_bfloat162*>(&v0[u]);
      const __nv_bfloat162* h1 = reinterpret_cast<const __nv_bfloat162*>(&v1[u]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        f0[i] = __bfloat1622float2(h0[i]);
        f1[i] = __bfloat1622float2(h1[i]);
      }
#pragma unroll
      for (int r = 0; r < M; ++r) {
        const uint4 xv = reinterpret_cast<const uint4*>(xs + static_cast<int64_t>(r) * a.k)[p];
        const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 xf = __bfloat1622float2(x2[i]);
          acc0[r] = fmaf(f0[i].x, xf.x, acc0[r]);
          acc0[r] = fmaf(f0[i].y, xf.y, acc0[r]);
          acc1[r] = fmaf(f1[i].x, xf.x, acc1[r]);
          acc1[r] = fmaf(f1[i].y, xf.y, acc1[r]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float v = acc0[r], u = acc1[r];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      v += __shfl_xor_sync(0xffffffffu, v, offset);
      u += __shfl_xor_sync(0xffffffffu, u, offset);
    }
    if (lane == 0) {
      for (int c = 0; c < (second ? 2 : 1); ++c) {
        const float sum = c == 0 ? v : u;
        if (a.out_type == ElementType::kF32) {
          float* out = static_cast<float*>(a.out) + r * a.ldout + col + c;
          *out = a.accumulate ? *out + sum : sum;
        } else {
          static_cast<__nv_bfloat16*>(a.out)[r * a.ldout + col + c] = __float2bfloat16_rn(sum);
        }
      }
    }
  }
}

// kColumns: 1, a column a warp at a time (gemv_column), or 2 (gemv_column_pair), for wide rows.
template <int M, int kColumns>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvArgs a) {
  extern __shared__ __align__(16) unsigned char shared[];
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(shared);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first = (blockIdx.x * kWarps + warp) * kColumns, stride = gridDim.x * kWarps * kColumns;
  if (first < a.n) prefetch_l2(a.w + static_cast<int64_t>(first) * a.k, a.k * 2ll * kColumns, lane);
  wait_for_previous_grid();
  allow_next_grid();
  load_inputs(a, xs);
  for (int col = first; col < a.n; col += stride) {
    if constexpr (kColumns == 2) {
      gemv_column_pair<M>(a, xs, col, lane);
    } else {
      gemv_column<M>(a, xs, col, lane);
    }
  }
}

// A grid over all the columns (kColumns 1), or one wave of blocks walking column pairs.
template <int M, int kColumns>
cudaError_t launch_kernel_rows(const GemvArgs& a, size_t shared, cudaStream_t stream) {
  if (const cudaError_t status = allow_dynamic_shared(gemv_kernel<M, kColumns>, shared); status != cudaSuccess)
    return status;
  int64_t blocks = (a.n + kWarps - 1) / kWarps;
  if (kColumns == 2) {
    int per_sm = 0;
    if (const cudaError_t status = resident_blocks_per_sm<gemv_kernel<M, kColumns>>(kThreads, shared, &per_sm);
        status != cudaSuccess)
      return status;
    const int64_t wave = int64_t(per_sm > 0 ? per_sm : 1) * current_device_attribute(cudaDevAttrMultiProcessorCount);
    blocks = std::max<int64_t>(1, std::min<int64_t>((a.n + 2 * kWarps - 1) / (2 * kWarps), wave));
  }
  return launch_kernel(gemv_kernel<M, kColumns>, LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), shared},
                       stream, a);
}

template <int M>
cudaError_t launch_rows(const GemvArgs& a, cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(M) * a.k * sizeof(__nv_bfloat16);
  if constexpr (M > 1) {
    if (wide_rows(M, a.k)) return launch_kernel_rows<M, 2>(a, shared, stream);
  }
  return launch_kernel_rows<M, 1>(a, shared, stream);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_shape_supported(int m, int n, int k) {
  return m >= 1 && m <= kGemvMaxRows && n >= 1 && k >= 8 && k % 8 == 0 &&
         static_cast<int64_t>(m) * k * sizeof(__nv_bfloat16) <= kGemvMaxInputBytes;
}

bool gemv_supported(const GemvArgs& a) {
  if (!gemv_shape_supported(a.m, a.n, a.k)) return false;
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
    // The norms once a row (the prologue's code), then the GEMV over the bf16 rows: where the rows
    // are wide enough for one wave of blocks, whose every block would otherwise build them all.
    if (const cudaError_t status = launch_kernel(gemv_inputs_kernel, LaunchShape{dim3(a.m), dim3(kThreads), 0}, stream, a);
        status != cudaSuccess)
      return status;
    a.input = GemvInput::kBf16;
    a.x = a.staged;
    a.ldx = a.k;
    a.sum_squares = nullptr;
  }
  switch (a.m) {
    case 1: return launch_rows<1>(a, stream);
    case 2: return launch_rows<2>(a, stream);
    case 3: return launch_rows<3>(a, stream);
    case 4: return launch_rows<4>(a, stream);
    case 5: return launch_rows<5>(a, stream);
    case 6: return launch_rows<6>(a, stream);
    case 7: return launch_rows<7>(a, stream);
    case 8: return launch_rows<8>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ssdq::kernels
