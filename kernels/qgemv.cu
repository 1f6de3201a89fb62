#include "kernels/qgemv.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "kernels/bulk_copy.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/quant_epilogue.cuh"
#include "kernels/rmsnorm_row.cuh"
#include "kernels/row_stream.cuh"
#include "kernels/tensor_core.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane
constexpr int kStreamMaxRows = 4;  // kStream's rows (its x rows in shared memory: m·k bytes)

// Two packed int4 words (8 columns each) become int8x4 words: even columns in `even`, odd columns
// in `odd`. (n ^ 8) + 0x78 ^ 0x80 maps a nibble n to its two's-complement value in each byte
// without carries between bytes.
__device__ inline void unpack_int4(uint32_t packed, int& even, int& odd) {
  const uint32_t lo = packed & 0x0F0F0F0Fu, hi = (packed >> 4) & 0x0F0F0F0Fu;
  even = static_cast<int>(((lo ^ 0x08080808u) + 0x78787878u) ^ 0x80808080u);
  odd = static_cast<int>(((hi ^ 0x08080808u) + 0x78787878u) ^ 0x80808080u);
}

__host__ __device__ constexpr bool takes_fp16_input(QgemvKind kind) {
  return kind == QgemvKind::kW4A16 || kind == QgemvKind::kW8A16;
}

// Where the int8 input rows are: global memory (read through the non-coherent cache) or the
// block's shared copy built by the norm prologue.
// With offsets set (W4A8, int4_input): x in shared memory already rearranged for the int4 pieces.
struct Int8Input {
  const int8_t* x;
  int64_t ldx;
  bool shared;
  const int* offsets = nullptr;  // [m, k / 32]: −8·Σx over each 32-column piece
  int pieces = 0;
  __device__ inline uint4 load(int row, int index) const {  // the index-th 16 bytes of row
    const uint4* p = reinterpret_cast<const uint4*>(x + row * ldx) + index;
    return shared ? *p : __ldg(p);
  }
};

// W4A8's input rearranged once per block (when m·k ≤ kInt4InputMaxBytes): per row and 32-column
// piece the words e0 o0 e1 o1 e2 o2 e3 o3 (e_j: bytes of columns 8j, 8j+2, 8j+4, 8j+6; o_j: 8j+1,
// 8j+3, …), the order in which a packed int4 word's low and high nibbles come, and −8·Σx over the
// piece. The pieces then take their nibbles as q + 8 ∈ [0, 15] with one xor and one mask each
// (unpack_int4_offset) and add the offset back: the same integer sums, ~half the instructions.
constexpr int kInt4InputMaxBytes = 16 * 1024;
__host__ __device__ inline bool uses_int4_input(const QgemvArgs& a) {
  return a.kind == QgemvKind::kW4A8 && static_cast<int64_t>(a.m) * a.k <= kInt4InputMaxBytes;
}
// W4A8 kStream always takes the rearranged input, for up to 32 KB of rows (36 KB of shared memory):
// 2.7b out_proj (k 5,120) and 8B-like out_proj (k 8,192) at four rows.
constexpr int kStreamInt4InputMaxBytes = 32 * 1024;
__host__ __device__ inline bool w4a8_stream_fits(const QgemvArgs& a) {
  return static_cast<int64_t>(a.m) * a.k <= kStreamInt4InputMaxBytes;
}
__host__ __device__ inline size_t int4_input_bytes(const QgemvArgs& a) {
  const size_t rows = static_cast<size_t>(a.m) * a.k;
  return rows + rows / 8;
}
// The dynamic shared memory of a launch: W4A8's rearranged input, or the norm prologue's rows.
__host__ __device__ inline size_t qgemv_shared_bytes(const QgemvArgs& a) {
  const size_t rows = static_cast<size_t>(a.m) * a.k;
  return uses_int4_input(a) ? int4_input_bytes(a) : a.norm_residual ? rows : 0;
}

// The norm prologue's int8 input (the bits add_rmsnorm writes): emit(r, i, q) for element i of
// row r, each thread its elements i ≡ threadIdx.x (mod kThreads) in increasing order, so a warp
// emits 32 consecutive elements at a time. (Keeping a thread's elements in registers between the
// reduction and the quantization measured slower end to end: more registers, fewer blocks an SM.)
// The values and weights come kNormBatch elements a thread at a time, and the RMS pass's values
// kNormScaleBatch at a time, all of a batch's loads issued before the first is used: one after the
// other, each element's round trip to L2 lay on the prologue's path while the block's weights waited.
constexpr int kNormBatch = 8, kNormScaleBatch = 4;
template <int kThreads, typename Emit>
__device__ inline void for_each_normed_int8(const QgemvArgs& a, Emit&& emit) {
  const float inv_x_scale = __frcp_rn(a.x_scale);
  for (int r = 0; r < a.m; ++r) {
    const float* row = a.norm_residual + static_cast<int64_t>(r) * a.k;
    const float scale = rmsnorm_row_scale<kThreads, kNormScaleBatch>(row, a.k, a.norm_eps);
    for (int i0 = threadIdx.x; i0 < a.k; i0 += kNormBatch * kThreads) {
      float v[kNormBatch], w[kNormBatch];
#pragma unroll
      for (int u = 0; u < kNormBatch; ++u) {
        const int i = i0 + u * kThreads;
        v[u] = i < a.k ? row[i] : 0.f;
        w[u] = i < a.k ? __ldg(a.norm_weight + i) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kNormBatch; ++u) {
        const int i = i0 + u * kThreads;
        if (i >= a.k) break;  // W4A8 (k a multiple of 32): the same in a whole warp, as int4_input needs
        const float normed = rmsnorm_value(v[u], scale, w[u]);
        int q;
        if (!quantize_int8_by_reciprocal(normed, inv_x_scale, &q)) q = quantize_int8(normed, a.x_scale);
        emit(r, i, q);
      }
    }
  }
}

// The norm prologue (QgemvArgs::norm_residual), or the given x.
template <int kThreads>
__device__ inline Int8Input int8_input(const QgemvArgs& a, int8_t* shared) {
  if (!a.norm_residual) return {a.x_int8, a.ldx, false};
  for_each_normed_int8<kThreads>(a, [&](int r, int i, int q) { shared[static_cast<int64_t>(r) * a.k + i] = static_cast<int8_t>(q); });
  __syncthreads();
  return {shared, a.k, true};
}

// Where byte b (0..31) of row r's rearranged piece p lies in shared memory: piece after piece
// (kGroupMajor false), or for the lane-a-group kernel each 16-byte half of a piece at
// [r][p % 4][half][p / 4], so that lanes reading consecutive groups' halves read consecutive 16 bytes.
template <bool kGroupMajor>
__device__ inline int int4_input_offset(int k, int r, int p, int b) {
  if constexpr (!kGroupMajor) return r * k + 32 * p + b;
  return r * k + ((p % 4) * 2 + b / 16) * (k / 128) * 16 + (p / 4) * 16 + b % 16;
}

// W4A8's rearranged input (uses_int4_input) in shared memory, from x or, with the norm prologue,
// straight from the normalized values: a warp quantizes one 32-column piece, each lane writes its
// byte where the piece's words put it and the warp adds the piece's values (no second pass).
template <int kThreads, bool kGroupMajor = false>
__device__ inline Int8Input int4_input(const QgemvArgs& a, int8_t* shared) {
  const int pieces = a.k / 32;
  int* offsets = reinterpret_cast<int*>(shared + static_cast<size_t>(a.m) * a.k);
  if (a.norm_residual) {
    const int lane = threadIdx.x % 32, byte = lane / 8 * 8 + lane % 2 * 4 + lane % 8 / 2;  // column lane's place
    for_each_normed_int8<kThreads>(a, [&](int r, int i, int q) {  // k a multiple of 32: whole warps, one piece
      shared[int4_input_offset<kGroupMajor>(a.k, r, i / 32, byte)] = static_cast<int8_t>(q);
      const int sum = __reduce_add_sync(0xffffffffu, q);
      if (lane == 0) offsets[r * pieces + i / 32] = -8 * sum;
    });
  } else {
    const Int8Input x8{a.x_int8, a.ldx, false};
    for (int i = threadIdx.x; i < a.m * pieces; i += kThreads) {
      const int r = i / pieces, p = i % pieces;
      const uint4 x0 = x8.load(r, 2 * p), x1 = x8.load(r, 2 * p + 1);
      const uint32_t x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
      uint32_t out[8];
      int sum = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[2 * j] = __byte_perm(x[2 * j], x[2 * j + 1], 0x6420);
        out[2 * j + 1] = __byte_perm(x[2 * j], x[2 * j + 1], 0x7531);
        sum = __dp4a(static_cast<int>(x[2 * j]), 0x01010101, sum);
        sum = __dp4a(static_cast<int>(x[2 * j + 1]), 0x01010101, sum);
      }
      *reinterpret_cast<uint4*>(shared + int4_input_offset<kGroupMajor>(a.k, r, p, 0)) = make_uint4(out[0], out[1], out[2], out[3]);
      *reinterpret_cast<uint4*>(shared + int4_input_offset<kGroupMajor>(a.k, r, p, 16)) = make_uint4(out[4], out[5], out[6], out[7]);
      offsets[i] = -8 * sum;
    }
  }
  __syncthreads();
  Int8Input result{shared, a.k, true};
  result.offsets = offsets;
  result.pieces = pieces;
  return result;
}

// A packed int4 word's nibbles as q + 8, unsigned (n ^ 8 = q + 8 for a two's-complement nibble n):
// the low ones as bytes, the high ones as bytes times 16.
__device__ inline uint32_t low_nibbles_offset(uint32_t w) { return (w & 0x0F0F0F0Fu) ^ 0x08080808u; }
__device__ inline uint32_t high_nibbles_offset16(uint32_t w) { return (w & 0xF0F0F0F0u) ^ 0x80808080u; }

// A packed int4 word's nibbles as q + 8 ∈ [0, 15], one per byte: low nibbles (even columns) in
// `even`, high nibbles in `odd`.
__device__ inline void unpack_int4_offset(uint32_t packed, int& even, int& odd) {
  even = static_cast<int>(low_nibbles_offset(packed));
  odd = static_cast<int>(low_nibbles_offset(packed >> 4));
}

// acc + Σ (q + 8)·x over one packed int4 word's 8 columns, against the rearranged input's two words
// for them (x_even: the even columns, x_odd: the odd ones).
__device__ inline int dot_int4_offset_word(uint32_t packed, uint32_t x_even, uint32_t x_odd, int acc) {
  int even, odd;
  unpack_int4_offset(packed, even, odd);
  acc = __dp4a(even, static_cast<int>(x_even), acc);
  return __dp4a(odd, static_cast<int>(x_odd), acc);
}

template <QgemvKind KIND>
struct Piece {  // columns covered by one 16-byte weight load
  static constexpr int kCols = KIND == QgemvKind::kW8A8 || KIND == QgemvKind::kW8A16 ? 16 : 32;
};

// Σ over the piece's columns of x·w for one row: exact int32 for int8 inputs, fp32 for fp16.
template <QgemvKind KIND>
__device__ inline void piece_dot(const QgemvArgs& a, const Int8Input& x8, const uint4& wv, int row, int piece, int& iacc,
                                 float& facc) {
  const uint32_t w[4] = {wv.x, wv.y, wv.z, wv.w};
  if constexpr (KIND == QgemvKind::kW8A8) {
    const uint4 xv = x8.load(row, piece);
    iacc = __dp4a(static_cast<int>(w[0]), static_cast<int>(xv.x), iacc);
    iacc = __dp4a(static_cast<int>(w[1]), static_cast<int>(xv.y), iacc);
    iacc = __dp4a(static_cast<int>(w[2]), static_cast<int>(xv.z), iacc);
    iacc = __dp4a(static_cast<int>(w[3]), static_cast<int>(xv.w), iacc);
  } else if constexpr (KIND == QgemvKind::kW4A8) {
    if (x8.offsets) {  // int4_input's rearranged rows
      const uint4* xp = reinterpret_cast<const uint4*>(x8.x + row * x8.ldx) + 2 * piece;
      const uint4 x0 = xp[0], x1 = xp[1];
      const uint32_t x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
      iacc += x8.offsets[row * x8.pieces + piece];
#pragma unroll
      for (int j = 0; j < 4; ++j) iacc = dot_int4_offset_word(w[j], x[2 * j], x[2 * j + 1], iacc);
      return;
    }
    const uint4 x0 = x8.load(row, 2 * piece), x1 = x8.load(row, 2 * piece + 1);
    const uint32_t x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // weight word j: columns 8j..8j+7 of the piece
      int even, odd;
      unpack_int4(w[j], even, odd);
      iacc = __dp4a(even, static_cast<int>(__byte_perm(x[2 * j], x[2 * j + 1], 0x6420)), iacc);
      iacc = __dp4a(odd, static_cast<int>(__byte_perm(x[2 * j], x[2 * j + 1], 0x7531)), iacc);
    }
  } else if constexpr (KIND == QgemvKind::kW8A16) {
    const uint4* xp = reinterpret_cast<const uint4*>(a.x_f16 + row * a.ldx) + 2 * piece;
    const uint4 xv[2] = {__ldg(xp), __ldg(xp + 1)};  // columns 0..7, 8..15
    const __half2* x2 = reinterpret_cast<const __half2*>(xv);
    float even = 0.f, odd = 0.f;  // two chains (against one: no measured change, 8B-like head 4.33 ms)
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // weight word j: columns 4j..4j+3, one signed byte each
      float wf[4];
      int8x4_to_float(w[j], wf);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float2 xf = __half22float2(x2[2 * j + i]);
        even = fmaf(wf[2 * i], xf.x, even);
        odd = fmaf(wf[2 * i + 1], xf.y, odd);
      }
    }
    facc += even + odd;
  } else {
    const uint4* xp = reinterpret_cast<const uint4*>(a.x_f16 + row * a.ldx) + 4 * piece;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint4 xv = __ldg(xp + j);  // columns 8j..8j+7
      const __half2* x2 = reinterpret_cast<const __half2*>(&xv);
      int even, odd;
      unpack_int4(w[j], even, odd);
      float ef[4], of[4];
      int8x4_to_float(static_cast<uint32_t>(even), ef);
      int8x4_to_float(static_cast<uint32_t>(odd), of);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 xf = __half22float2(x2[i]);
        facc = fmaf(ef[i], xf.x, facc);
        facc = fmaf(of[i], xf.y, facc);
      }
    }
  }
}

__device__ inline void store(const QgemvArgs& a, int row, int col, float y) {
  store_projection(a.out, a.out_type, row * a.ldout + col, y, a.bias, col, a.accumulate);
}

// The int4 kinds, one warp per output column; lane l loads pieces l, l + 32, ... of the weight row.
// After each round of 32 pieces the lanes of a group (group_size / 32 consecutive
// lanes for int4) reduce their sums, and lane r applies the round's groups to row r's fp32 chain
// in increasing group order — the order the CPU reference uses.
template <int M, QgemvKind KIND>
__global__ void __launch_bounds__(kThreads) qgemv_kernel(QgemvArgs a) {
  __shared__ float group_sums[kWarps][M][32];
  extern __shared__ __align__(16) int8_t normed[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = blockIdx.x * kWarps + warp;
  constexpr int kCols = Piece<KIND>::kCols;
  const int pieces = a.k / kCols;
  const uint4* w = static_cast<const uint4*>(a.w) + static_cast<int64_t>(col) * pieces;  // 16 bytes a piece
  if (col < a.n) prefetch_l2(w, pieces * 16ll, lane);
  prefetch_l2_share(a.l2_prefetch);
  wait_for_previous_grid();
  allow_next_grid();
  const Int8Input x8 = takes_fp16_input(KIND)                          ? Int8Input{}
                       : KIND == QgemvKind::kW4A8 && uses_int4_input(a) ? int4_input<kThreads>(a, normed)
                                                                        : int8_input<kThreads>(a, normed);
  if (col >= a.n) return;
  const int lanes_per_group = a.group_size / kCols;  // a power of two ≤ 32 (qgemv_supported)
  const int groups = a.k / a.group_size;
  const float* scales = a.w_scales + static_cast<int64_t>(col) * groups;
  float y = 0.f;  // lane r < m: row r's chain
  const bool leader = lane % lanes_per_group == 0;
  for (int base = 0; base < pieces; base += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = base + 32 * u + lane;
      wv[u] = p < pieces ? __ldg(w + p) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int first = base + 32 * u;
      if (first >= pieces) break;
      const int p = first + lane;
#pragma unroll
      for (int r = 0; r < M; ++r) {
        if (r >= a.m) break;
        int iacc = 0;
        float facc = 0.f;
        if (p < pieces) piece_dot<KIND>(a, x8, wv[u], r, p, iacc, facc);
        for (int offset = lanes_per_group / 2; offset > 0; offset >>= 1) {
          if constexpr (KIND == QgemvKind::kW4A8) {
            iacc += __shfl_xor_sync(0xffffffffu, iacc, offset);
          } else {
            facc += __shfl_xor_sync(0xffffffffu, facc, offset);
          }
        }
        if (leader)
          group_sums[warp][r][lane / lanes_per_group] =
              KIND == QgemvKind::kW4A8 ? static_cast<float>(iacc) : facc;
      }
      __syncwarp();
      if (lane < a.m) {
        const int first_group = first / lanes_per_group;
        const int round_groups = min(32 / lanes_per_group, groups - first_group);
        for (int j = 0; j < round_groups; ++j)
          y = __fmaf_rn(group_sums[warp][lane][j], scales[first_group + j], y);
      }
      __syncwarp();
    }
  }
  if (lane < a.m) store(a, lane, col, KIND == QgemvKind::kW4A8 ? __fmul_rn(y, a.x_scale) : y);
}

// W8A8: kSplitWarps warps share a column (1: one warp a column; 4: kSplitK), each streaming a
// contiguous part of the row; their int32 sums meet in shared memory (exact in any order) and one
// lane applies the epilogue. Splitting k helps projections with few columns and several rows.
template <int M, int kSplitWarps>
__global__ void __launch_bounds__(kThreads) qgemv_w8a8_kernel(QgemvArgs a) {
  __shared__ int partial[kWarps][M];
  extern __shared__ __align__(16) int8_t normed[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, part = warp % kSplitWarps;
  const int col = blockIdx.x * (kWarps / kSplitWarps) + warp / kSplitWarps;
  const int pieces = a.k / Piece<QgemvKind::kW8A8>::kCols;
  const int begin = pieces * part / kSplitWarps, end = pieces * (part + 1) / kSplitWarps;
  if (col < a.n) prefetch_l2(static_cast<const uint4*>(a.w) + static_cast<int64_t>(col) * pieces + begin, (end - begin) * 16ll, lane);
  prefetch_l2_share(a.l2_prefetch);
  wait_for_previous_grid();
  allow_next_grid();
  const Int8Input x8 = int8_input<kThreads>(a, normed);
  int acc[M];
#pragma unroll
  for (int r = 0; r < M; ++r) acc[r] = 0;
  if (col < a.n) {
    const uint4* w = static_cast<const uint4*>(a.w) + static_cast<int64_t>(col) * pieces + begin;
    float unused = 0.f;
    stream_row_pieces<kUnroll>(w, end - begin, lane, [&](int p, const uint4& wv) {
#pragma unroll
      for (int r = 0; r < M; ++r)
        if (r < a.m) piece_dot<QgemvKind::kW8A8>(a, x8, wv, r, begin + p, acc[r], unused);
    });
  }
#pragma unroll
  for (int r = 0; r < M; ++r) {
    int v = acc[r];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) partial[warp][r] = v;
  }
  __syncthreads();
  if (col >= a.n || part != 0 || lane >= a.m) return;
  int v = 0;
#pragma unroll
  for (int j = 0; j < kSplitWarps; ++j) v += partial[warp + j][lane];
  store(a, lane, col, scale_per_channel(v, a.w_scales[col], a.x_scale));
}

// W8A8 for a few rows (kStream): one wave of blocks. Warp w of the grid takes columns w,
// w + warps, w + 2·warps, … and, per column, issues all of its lane's 16-byte pieces (up to kPer,
// i.e. 32·kPer·16 bytes of the row) before using any; the int8 rows sit in shared memory, built
// once per block by the norm prologue or copied, so the prologue is paid per block, not per
// column. Int32 sums: the same bits as every other schedule. (Issuing the first column's loads
// before the wait and each next column's before this one's reduction measured ~1.5 % slower end
// to end: 98 → 118 registers, fewer blocks an SM.) At one row and k ≤ 4,096 (in_proj) a warp loads
// its next column before the current one's dot products (kW8A8StreamLoadsAhead: 80 registers), so
// it always has a column in flight; that variant runs one block of kInProjBlockThreads an SM.
template <int M, int kPer>
constexpr bool kW8A8StreamLoadsAhead = M == 1 && kPer == 8;
// A minimum of 0 blocks an SM is none: an explicit 1 makes nvcc take 87 registers at one row, not 48.
template <int M, int kPer, int kBlockThreads>
__global__ void __launch_bounds__(kBlockThreads, kBlockThreads > kThreads ? 1 : kW8A8StreamLoadsAhead<M, kPer> ? 3 : 0)
    qgemv_w8a8_stream_kernel(QgemvArgs a) {
  constexpr bool kAhead = kW8A8StreamLoadsAhead<M, kPer>;
  constexpr int kBlockWarps = kBlockThreads / 32;
  extern __shared__ __align__(16) int8_t rows[];
  const int lane = threadIdx.x % 32, warps = gridDim.x * kBlockWarps;
  const int pieces = a.k / Piece<QgemvKind::kW8A8>::kCols;
  const uint4* weights = static_cast<const uint4*>(a.w);
  int col = blockIdx.x * kBlockWarps + threadIdx.x / 32;
  if (col < a.n) prefetch_l2(weights + static_cast<int64_t>(col) * pieces, pieces * 16ll, lane);
  prefetch_l2_share(a.l2_prefetch);
  wait_for_previous_grid();
  allow_next_grid();
  if (a.norm_residual) {
    int8_input<kBlockThreads>(a, rows);  // ends with a barrier
  } else {
    for (int r = 0; r < a.m; ++r)
      for (int i = threadIdx.x; i < pieces; i += kBlockThreads)
        reinterpret_cast<uint4*>(rows + static_cast<int64_t>(r) * a.k)[i] = __ldg(reinterpret_cast<const uint4*>(a.x_int8 + r * a.ldx) + i);
    __syncthreads();
  }
  const Int8Input x8{rows, a.k, true};
  if constexpr (kAhead) {  // one round a column (k ≤ 4,096); the next column's loads before this one's dots
    uint4 cur[kPer], next[kPer];
    auto load = [&](int c, uint4 (&to)[kPer]) {
      const uint4* w = weights + static_cast<int64_t>(c) * pieces;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int p = lane + 32 * u;
        to[u] = c < a.n && p < pieces ? __ldcs(w + p) : make_uint4(0, 0, 0, 0);
      }
    };
    load(col, cur);
    for (; col < a.n; col += warps) {
      load(col + warps, next);
      int acc = 0;
      float unused = 0.f;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int p = lane + 32 * u;
        if (p < pieces) piece_dot<QgemvKind::kW8A8>(a, x8, cur[u], 0, p, acc, unused);
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
      if (lane == 0) store(a, 0, col, scale_per_channel(acc, a.w_scales[col], a.x_scale));
#pragma unroll
      for (int u = 0; u < kPer; ++u) cur[u] = next[u];
    }
    return;
  }
  for (; col < a.n; col += warps) {
    const uint4* w = weights + static_cast<int64_t>(col) * pieces;
    int acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0;
    float unused = 0.f;
    stream_row_pieces<kPer, /*kEvictFirst=*/true>(w, pieces, lane, [&](int p, const uint4& wv) {
#pragma unroll
      for (int r = 0; r < M; ++r)
        if (r < a.m) piece_dot<QgemvKind::kW8A8>(a, x8, wv, r, p, acc[r], unused);
    });
#pragma unroll
    for (int r = 0; r < M; ++r) {
      int v = acc[r];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
      acc[r] = v;
    }
#pragma unroll
    for (int r = 0; r < M; ++r)
      if (lane == r && r < a.m) store(a, r, col, scale_per_channel(acc[r], a.w_scales[col], a.x_scale));
  }
}

// The int4 kinds for a few rows (kStream): the W8A8 stream kernel's schedule — one wave of blocks,
// each warp walking columns with all of its lane's pieces of a row (up to kPer) in flight. W4A8
// works on int4_input's rearranged rows, built once per block; W4A16 reads its fp16 rows through
// L1. Round u of a lane's pieces is 32 consecutive pieces, so group g of the round is lanes g·lpg …
// (lpg = group_size / 32 lanes a group). All rounds' dot products first (independent), then each
// group's sum by shuffles (W4A8: the exact int32 sum, then rounded to float), held by every lane of
// the group, then every lane runs each row's fp32 chain over the groups in increasing order (the
// CPU's), taking a group's sum and scale from its first lane; lane r stores row r.
// kGroupLanes: lpg as a constant (the chain's shuffles unrolled), or 0 to take it from the arguments.
// kSkipPastRow: rounds past the row's last piece are skipped (a uniform branch) rather than run
// predicated off; it costs registers (kPer 8: 64 → 72, a block an SM fewer, 8B-like W4A8 TPOT 3.63 →
// 3.72 ms), so only where rows leave rounds empty. Up to two rows at least four blocks an SM (≤ 64
// registers; kPer 5 took 72 unbounded).
template <int M, int kPer, int kGroupLanes, QgemvKind KIND, bool kSkipPastRow>
__global__ void __launch_bounds__(kThreads, M <= 2 ? 4 : 1) qgemv_int4_stream_kernel(QgemvArgs a) {
  static_assert(KIND == QgemvKind::kW4A8 || KIND == QgemvKind::kW4A16, "int4 weights");
  constexpr bool kInt8X = KIND == QgemvKind::kW4A8;
  extern __shared__ __align__(16) int8_t rows[];
  const int lane = threadIdx.x % 32, warps = gridDim.x * kWarps;
  const int pieces = a.k / Piece<KIND>::kCols;
  const uint4* weights = static_cast<const uint4*>(a.w);
  const int lanes_per_group = kGroupLanes > 0 ? kGroupLanes : a.group_size / Piece<KIND>::kCols;
  const int groups = a.k / a.group_size;
  int col = blockIdx.x * kWarps + threadIdx.x / 32;
  if (col < a.n) prefetch_l2(weights + static_cast<int64_t>(col) * pieces, pieces * 16ll, lane);
  prefetch_l2_share(a.l2_prefetch);
  wait_for_previous_grid();
  allow_next_grid();
  const Int8Input x8 = kInt8X ? int4_input<kThreads>(a, rows) : Int8Input{};  // W4A16 reads its fp16 x through L1
  for (; col < a.n; col += warps) {
    const uint4* w = weights + static_cast<int64_t>(col) * pieces;
    const float* scales = a.w_scales + static_cast<int64_t>(col) * groups;
    float y[M];
#pragma unroll
    for (int r = 0; r < M; ++r) y[r] = 0.f;
    for (int base = 0; base < pieces; base += 32 * kPer) {
      uint4 wv[kPer];
      float scale[kPer];  // of the group the lane's piece belongs to
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int p = base + 32 * u + lane;
        wv[u] = p < pieces ? __ldcs(w + p) : make_uint4(0, 0, 0, 0);
        scale[u] = p < pieces ? __ldg(scales + p / lanes_per_group) : 0.f;
      }
      float sum[kPer][M];  // the lane's group's sum (W4A8: the int32 sum rounded to float)
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        if (kSkipPastRow && base + 32 * u >= pieces) break;  // past the row in every lane
#pragma unroll
        for (int r = 0; r < M; ++r) {
          int acc = 0;
          float facc = 0.f;
          const int p = base + 32 * u + lane;
          if (r < a.m && p < pieces) piece_dot<KIND>(a, x8, wv[u], r, p, acc, facc);
          for (int offset = lanes_per_group / 2; offset > 0; offset >>= 1) {
            if constexpr (kInt8X) {
              acc += __shfl_xor_sync(0xffffffffu, acc, offset);
            } else {
              facc += __shfl_xor_sync(0xffffffffu, facc, offset);
            }
          }
          sum[u][r] = kInt8X ? static_cast<float>(acc) : facc;
        }
      }
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int first = base + 32 * u;  // the round's first piece (the same in every lane)
        if (kSkipPastRow && first >= pieces) break;
        const int round_groups = min(32 / lanes_per_group, groups - first / lanes_per_group);  // ≤ 0 past the row
        if constexpr (kGroupLanes > 0) {
          // Every shuffle first, unconditionally, so they issue back to back; then the chain's FMAs.
          constexpr int kRoundGroups = 32 / kGroupLanes;
          float s[kRoundGroups], v[kRoundGroups][M];
#pragma unroll
          for (int h = 0; h < kRoundGroups; ++h) {
            s[h] = __shfl_sync(0xffffffffu, scale[u], h * kGroupLanes);
#pragma unroll
            for (int r = 0; r < M; ++r) v[h][r] = __shfl_sync(0xffffffffu, sum[u][r], h * kGroupLanes);
          }
#pragma unroll
          for (int h = 0; h < kRoundGroups; ++h)
#pragma unroll
            for (int r = 0; r < M; ++r)
              if (h < round_groups) y[r] = __fmaf_rn(v[h][r], s[h], y[r]);
        } else {
          for (int h = 0; h < round_groups; ++h) {
            const int source = h * lanes_per_group;
            const float s = __shfl_sync(0xffffffffu, scale[u], source);
#pragma unroll
            for (int r = 0; r < M; ++r) y[r] = __fmaf_rn(__shfl_sync(0xffffffffu, sum[u][r], source), s, y[r]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < M; ++r)
      if (lane == r && r < a.m) store(a, r, col, kInt8X ? __fmul_rn(y[r], a.x_scale) : y[r]);
  }
}

// W4A8 with groups of 128 columns (the recipes'), up to 4 rows, k a multiple of 512 up to 8,192: one
// lane a group. Lane g reads group g's four 16-byte pieces of the column (64 contiguous bytes) and
// its scale, and sums the group's exact int32 dot product alone — no shuffles between lanes — from
// int4_input's rows laid out group-major (consecutive lanes read consecutive 16 bytes). The sums and
// scales go through shared memory to lanes r < m, which run row r's fp32 chain over the groups in
// increasing order (the CPU's) with 16-byte reads. A warp loads its next column's pieces into the
// registers the dot products have just freed before it runs the chain, so the loads are in flight
// during it; at one row and one group a lane (every in_proj) it loads them before the dot products
// instead, into a second set of registers (74 against 64), so a warp always has a column in flight;
// that variant runs one block of kInProjBlockThreads an SM. kGroupsPerLane: 1 (k ≤ 4,096) or 2 (k ≤
// 8,192). kBlockThreads: 256, kInProjBlockThreads for the loads-ahead variant (one block an SM), or
// kOutProjBlockThreads at one row and k 8,192 (two an SM).
constexpr int kLaneGroupMaxGroups = 64;
__host__ __device__ inline bool w4a8_lane_group_fits(const QgemvArgs& a) {
  return a.kind == QgemvKind::kW4A8 && a.group_size == 128 && a.k % 512 == 0 && a.k / 128 <= kLaneGroupMaxGroups &&
         a.m <= kStreamMaxRows && w4a8_stream_fits(a);
}
template <int M, int kGroupsPerLane>
constexpr bool kLaneGroupLoadsAhead = M == 1 && kGroupsPerLane == 1;
template <int M, int kGroupsPerLane, int kBlockThreads>
__global__ void __launch_bounds__(kBlockThreads, kBlockThreads > kThreads && kLaneGroupLoadsAhead<M, kGroupsPerLane> ? 1
                                                 : kBlockThreads > kThreads                ? 2
                                                 : kLaneGroupLoadsAhead<M, kGroupsPerLane> ? 3
                                                 : M == 1                                  ? 4
                                                 : M == 2                                  ? 3
                                                                                           : 1)
    qgemv_w4a8_lane_group_kernel(QgemvArgs a) {
  constexpr bool kAhead = kLaneGroupLoadsAhead<M, kGroupsPerLane>;
  constexpr int kBlockWarps = kBlockThreads / 32;
  extern __shared__ __align__(16) int8_t rows[];
  __shared__ __align__(16) float group_sums[kBlockWarps][M][32 * kGroupsPerLane];
  __shared__ __align__(16) float group_scales[kBlockWarps][32 * kGroupsPerLane];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = gridDim.x * kBlockWarps;
  const int groups = a.k / 128, pieces = a.k / 32;
  const uint4* weights = static_cast<const uint4*>(a.w);
  int col = blockIdx.x * kBlockWarps + warp;
  uint4 wv[kGroupsPerLane][4], next_wv[kGroupsPerLane][4];  // next_*: kAhead only
  float scale[kGroupsPerLane], next_scale[kGroupsPerLane];
  // Group g = lane + 32·q of column c (nothing past the row or the columns).
  auto load_column = [&](int c, uint4 (&to_wv)[kGroupsPerLane][4], float (&to_scale)[kGroupsPerLane]) {
#pragma unroll
    for (int q = 0; q < kGroupsPerLane; ++q) {
      const int g = lane + 32 * q;
      if (c < a.n && g < groups) {
        const uint4* w = weights + static_cast<int64_t>(c) * pieces + 4 * g;
#pragma unroll
        for (int j = 0; j < 4; ++j) to_wv[q][j] = __ldcs(w + j);
        to_scale[q] = __ldg(a.w_scales + static_cast<int64_t>(c) * groups + g);
      }
    }
  };
  load_column(col, wv, scale);
  prefetch_l2_share(a.l2_prefetch);
  wait_for_previous_grid();
  allow_next_grid();
  const Int8Input x8 = int4_input<kBlockThreads, /*kGroupMajor=*/true>(a, rows);
  const uint4* x_halves = reinterpret_cast<const uint4*>(rows);  // [r][piece in group][half][group]
  for (; col < a.n; col += warps) {
    if constexpr (kAhead) load_column(col + warps, next_wv, next_scale);
#pragma unroll
    for (int q = 0; q < kGroupsPerLane; ++q) {
      const int g = lane + 32 * q;
      if (g >= groups) break;
#pragma unroll
      for (int r = 0; r < M; ++r) {
        if (r >= a.m) break;
        const int4 offsets = *reinterpret_cast<const int4*>(x8.offsets + r * pieces + 4 * g);
        int acc = offsets.x + offsets.y + offsets.z + offsets.w;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t w[4] = {wv[q][j].x, wv[q][j].y, wv[q][j].z, wv[q][j].w};
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint4 x = x_halves[((r * 4 + j) * 2 + h) * groups + g];
            acc = dot_int4_offset_word(w[2 * h], x.x, x.y, acc);
            acc = dot_int4_offset_word(w[2 * h + 1], x.z, x.w, acc);
          }
        }
        group_sums[warp][r][g] = static_cast<float>(acc);
      }
      group_scales[warp][g] = scale[q];
    }
    if constexpr (kAhead) {
#pragma unroll
      for (int q = 0; q < kGroupsPerLane; ++q) {
        scale[q] = next_scale[q];
#pragma unroll
        for (int j = 0; j < 4; ++j) wv[q][j] = next_wv[q][j];
      }
    } else {
      load_column(col + warps, wv, scale);
    }
    __syncwarp();
    if (lane < a.m) {
      const float4* sums = reinterpret_cast<const float4*>(group_sums[warp][lane]);
      const float4* scales = reinterpret_cast<const float4*>(group_scales[warp]);
      float y = 0.f;
      for (int g4 = 0; g4 < groups / 4; ++g4) {
        const float4 v = sums[g4], s = scales[g4];
        y = __fmaf_rn(v.x, s.x, y);
        y = __fmaf_rn(v.y, s.y, y);
        y = __fmaf_rn(v.z, s.z, y);
        y = __fmaf_rn(v.w, s.w, y);
      }
      store(a, lane, col, __fmul_rn(y, a.x_scale));
    }
    __syncwarp();
  }
}

// W4A8 with groups of 128 on the tensor cores (kMmaTiles), up to 4 rows, straight from the row-major
// packed weights (sm_90: bulk copies). A warp takes a tile of 16 columns and runs mma.sync m16n8k32
// (unsigned int8 × int8 → int32) over each group. Lane (g, q) reads the 16 bytes q of the group's
// 64 in columns g and g + 8 of the tile: word j holds input columns 32q + 8j … + 7, its low nibbles
// the even ones, which int4_input's rearranged piece 4G + q holds as word e_j, its high nibbles the
// odd ones (o_j). A dot product does not care which k slot of the MMA a column takes, so the words
// feed the fragments as they are: the low nibbles as q + 8 (one LOP3) against e_j, the high nibbles
// as 16·(q + 8) (one LOP3, no shift) against o_j into a second accumulator, shifted right by 4
// (exact). With the group's −8·Σx the two give the CPU's int32 sum, which lane (g, q) takes into
// its fp32 chains in registers — columns g and g + 8 against x rows 2q and 2q + 1 — in group order.
// Up to 8 x rows cost the MMA nothing more, where the dp4a kernels' work grows with every row.
// The weights reach shared memory by bulk copies, a tile a slot (its 16 rows at a pitch of k/2 + 64
// bytes, so that lanes of rows g and g + 1 read different banks, and its scales), every slot's first
// tile requested before the block waits for the previous grid: tens of kilobytes in flight an SM
// for a few instructions. Tile t goes to block t mod gridDim (one block an SM), the block's j-th
// tile to warp (slot) j mod slots, which requests its next tile itself once done with the last, so
// no wait runs ahead of the request it waits for (an mbarrier tells only its current phase from the
// one before).
// kAuto takes it from three rows: H100, TPOT with every fitting W4A8 projection on it, batch 4: 2.7b
// 2.994 → 2.732 ms, 8B-like 4.990 → 4.992 ms; batch 2: 2.7b 2.314 → 2.343 ms, 8B-like 4.031 → 4.258
// ms; batch 1 (in_proj alone): 2.7b 1.636 → 1.697 ms (docs/kernels/quantized_projections.md).
constexpr int kMmaTilesAutoMinRows = 3;
constexpr int kMmaTilesStageBudget = 140 * 1024;  // shared memory for the tiles in flight in a block
constexpr int kMmaTilesRowPad = 64;
__host__ __device__ inline int mma_tiles_stage_bytes(const QgemvArgs& a) {
  return 16 * (a.k / 2 + kMmaTilesRowPad) + 16 * (a.k / 128) * static_cast<int>(sizeof(float));
}
__host__ __device__ inline bool w4a8_mma_tiles_fits(const QgemvArgs& a) {
  return a.kind == QgemvKind::kW4A8 && a.group_size == 128 && a.k % 512 == 0 && a.m <= kStreamMaxRows &&
         w4a8_stream_fits(a) && reinterpret_cast<uintptr_t>(a.w_scales) % 16 == 0 &&
         mma_tiles_stage_bytes(a) <= kMmaTilesStageBudget;  // k ≤ 16,384
}
__host__ __device__ inline int mma_tiles_input_bytes(const QgemvArgs& a) {  // int4_input's + group offsets, 16-aligned
  return static_cast<int>((int4_input_bytes(a) + static_cast<size_t>(a.m) * (a.k / 128) * sizeof(int) + 15) / 16 * 16);
}
// Packed words j and j + 1 of columns g (w_j, w_j1) and g + 8 (v_j, v_j1) against the rearranged
// input's words for them, x = (e_j, o_j, e_j+1, o_j+1): the low nibbles into lo, the high ones
// (times 16) into hi.
__device__ inline void mma_int4_words(int (&lo)[4], int (&hi)[4], uint32_t w_j, uint32_t v_j, uint32_t w_j1,
                                      uint32_t v_j1, const uint4& x) {
  const uint32_t a_lo[4] = {low_nibbles_offset(w_j), low_nibbles_offset(v_j), low_nibbles_offset(w_j1),
                            low_nibbles_offset(v_j1)};
  const uint32_t a_hi[4] = {high_nibbles_offset16(w_j), high_nibbles_offset16(v_j), high_nibbles_offset16(w_j1),
                            high_nibbles_offset16(v_j1)};
  mma_u8s8_16832(lo, a_lo, x.x, x.z);
  mma_u8s8_16832(hi, a_hi, x.y, x.w);
}

template <int M, int kBlockThreads>
__global__ void __launch_bounds__(kBlockThreads, 1) qgemv_w4a8_mma_tiles_kernel(QgemvArgs a, int slots) {
  extern __shared__ __align__(16) int8_t rows[];
  const int slot = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int groups = a.k / 128, tiles = (a.n + 15) / 16, row_bytes = a.k / 2, pitch = row_bytes + kMmaTilesRowPad;
  const int block_tiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int stage_bytes = mma_tiles_stage_bytes(a);
  int8_t* const stages = rows + mma_tiles_input_bytes(a);
  int8_t* stage = stages + slot * stage_bytes;
  uint64_t* barriers = reinterpret_cast<uint64_t*>(stages + slots * stage_bytes);
  uint64_t* barrier = &barriers[slot];
  // The block's j-th tile into this slot: lanes 0–15 a row's bytes, lanes 16–31 its scales.
  auto request = [&](int j) {
    const int tile = blockIdx.x + j * gridDim.x, valid_rows = min(16, a.n - 16 * tile);
    if (lane == 0) bulk_barrier_expect(barrier, valid_rows * groups * (64 + static_cast<int>(sizeof(float))));
    __syncwarp();
    const int r = lane % 16, col = 16 * tile + r;
    if (r >= valid_rows) return;
    if (lane < 16) {
      bulk_copy_to_shared(stage + r * pitch, static_cast<const int8_t*>(a.w) + int64_t(col) * row_bytes, row_bytes,
                          barrier);
    } else {
      bulk_copy_to_shared(stage + 16 * pitch + r * groups * static_cast<int>(sizeof(float)),
                          a.w_scales + int64_t(col) * groups, groups * static_cast<int>(sizeof(float)), barrier);
    }
  };
  if (threadIdx.x < slots) bulk_barrier_init(&barriers[threadIdx.x]);
  __syncthreads();
  if (slot < min(slots, block_tiles)) request(slot);
  prefetch_l2_share(a.l2_prefetch);
  wait_for_previous_grid();
  allow_next_grid();
  const Int8Input x8 = int4_input<kBlockThreads>(a, rows);
  int* group_offsets = reinterpret_cast<int*>(rows + int4_input_bytes(a));  // [m][groups]: −8·Σx over the group
  for (int i = threadIdx.x; i < a.m * groups; i += kBlockThreads) {
    const int4 o = *reinterpret_cast<const int4*>(x8.offsets + 4 * i);
    group_offsets[i] = o.x + o.y + o.z + o.w;
  }
  __syncthreads();
  if (slot >= slots) return;
  // B's column n = g: x row g (M > 1; a row past m stands in, its sums unused), or the one row.
  const int x_row = M == 1 ? 0 : g < a.m ? g : 0;
  const uint4* x_pieces = reinterpret_cast<const uint4*>(rows + static_cast<int64_t>(x_row) * a.k) + 2 * q;
  const uint4* w_g = reinterpret_cast<const uint4*>(stage + g * pitch) + q;
  const uint4* w_g8 = reinterpret_cast<const uint4*>(stage + (g + 8) * pitch) + q;
  const float* scales = reinterpret_cast<const float*>(stage + 16 * pitch);
  int use = 0;
  for (int j = slot; j < block_tiles; j += slots, ++use) {
    const int tile = blockIdx.x + j * gridDim.x;
    bulk_barrier_wait(barrier, use & 1);
    // C element e: column g + 8·(e / 2) of the tile against x row 2q + e % 2 (rows past the tile's
    // valid ones hold stale bytes; their sums are never stored).
    float y[4] = {0.f, 0.f, 0.f, 0.f};
    for (int group4 = 0; group4 < groups; group4 += 4) {
      const float4 s0 = *reinterpret_cast<const float4*>(scales + g * groups + group4);
      const float4 s1 = *reinterpret_cast<const float4*>(scales + (g + 8) * groups + group4);
      const float scale0[4] = {s0.x, s0.y, s0.z, s0.w}, scale1[4] = {s1.x, s1.y, s1.z, s1.w};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int group = group4 + u;
        const uint4 w0 = w_g[4 * group], w1 = w_g8[4 * group];
        const uint4 x0 = x_pieces[8 * group], x1 = x_pieces[8 * group + 1];  // e0 o0 e1 o1, e2 o2 e3 o3
        int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
        mma_int4_words(lo, hi, w0.x, w1.x, w0.y, w1.y, x0);
        mma_int4_words(lo, hi, w0.z, w1.z, w0.w, w1.w, x1);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (M == 1 && e % 2 == 1) continue;  // one row: every column n of B is x row 0
          const int n = M == 1 ? 0 : min(2 * q + e % 2, a.m - 1);
          const int sum = lo[e] + (hi[e] >> 4) + group_offsets[n * groups + group];
          y[e] = __fmaf_rn(static_cast<float>(sum), e < 2 ? scale0[u] : scale1[u], y[e]);
        }
      }
    }
    __syncwarp();  // every lane's reads of the stage are done before it is refilled
    if (j + slots < block_tiles) request(j + slots);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int n = 2 * q + e % 2, col = tile * 16 + g + 8 * (e / 2);
      if ((M == 1 ? q == 0 && e % 2 == 0 : n < a.m) && col < a.n) store(a, n, col, __fmul_rn(y[e], a.x_scale));
    }
  }
}

// W8A16 (the head-to-toe lm_head), one warp per output column streaming its row with
// kW8A16Unroll loads in flight (all of a 4,096-column row at once): each piece's fp32 dot is
// scaled by its group's scale as it arrives and the lanes' sums meet by shuffles at the end — a
// float sum in another order than the CPU's group chain (qgemv_test's fp32 tolerance). The
// int4 kernel's per-round group chain ran the 8B-like head (256,000 × 4,096) at ~2 TB/s.
constexpr int kW8A16Unroll = 8;
template <int M>
__global__ void __launch_bounds__(kThreads) qgemv_w8a16_kernel(QgemvArgs a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = blockIdx.x * kWarps + warp;
  const int pieces = a.k / Piece<QgemvKind::kW8A16>::kCols;
  const uint4* w = static_cast<const uint4*>(a.w) + static_cast<int64_t>(col) * pieces;
  if (col < a.n) prefetch_l2(w, pieces * 16ll, lane);
  prefetch_l2_share(a.l2_prefetch);
  wait_for_previous_grid();
  allow_next_grid();
  if (col >= a.n) return;  // the whole warp: col is the warp's
  const int group_shift = __ffs(a.group_size / Piece<QgemvKind::kW8A16>::kCols) - 1;  // pieces a group: a power of two
  const float* scales = a.w_scales + static_cast<int64_t>(col) * (a.k / a.group_size);
  const Int8Input no_int8_input{};
  float y[M];
#pragma unroll
  for (int r = 0; r < M; ++r) y[r] = 0.f;
  stream_row_pieces<kW8A16Unroll>(w, pieces, lane, [&](int p, const uint4& wv) {
    const float scale = __ldg(scales + (p >> group_shift));
#pragma unroll
    for (int r = 0; r < M; ++r) {
      if (r >= a.m) break;
      int unused = 0;
      float dot = 0.f;
      piece_dot<QgemvKind::kW8A16>(a, no_int8_input, wv, r, p, unused, dot);
      y[r] = __fmaf_rn(dot, scale, y[r]);
    }
  });
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float v = y[r];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0 && r < a.m) store(a, r, col, v);
  }
}

// The fp16-input kinds with an mma layout's weights (pack_w8a16_mma_layout, pack_w4a16_mma_layout):
// a warp a tile of 16 columns, m16n8k16 fp16 MMAs with fp32 sums (the columns as the MMA's rows,
// up to 8 x rows an n8 tile), each group's sums scaled into y. A lane's one 16-byte load is its A
// fragments for two k16 steps (int8) or four (int4), turned into fp16 exactly: a byte b as b ^ 0x80
// under the exponent of 1024 (1024 + b + 128) minus 1152; a stored nibble q + 8 as 1024 + q + 8
// minus 1032 (low nibbles of each half) or (1024 + 16·(q + 8))/16 − 72 (high nibbles). About a
// quarter of the CUDA-core kernels' instructions a weight: those streamed the 8B-like heads at
// 2.2–2.4 TB/s (int8, ~100 instructions a 16-byte piece) and 1.2 TB/s (int4).
constexpr int kMmaWarps = 4;
constexpr int kMmaUnroll = 8;  // 16-byte loads in flight per lane
__device__ inline uint32_t int8x2_to_half2(uint32_t biased, uint32_t selector) {
  const uint32_t bits = __byte_perm(biased, 0x64646464u, selector);
  const __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&bits), __half2half2(__ushort_as_half(0x6480)));  // 1152
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <QgemvKind KIND>
struct MmaLoad {  // input columns (k16 steps) one lane's 16-byte load of the mma layout covers
  static constexpr int kCols = mma_layout_columns(KIND);
  static constexpr int kSteps = kCols / 16;
};
// The A fragment of k16 step `step` of a lane's 16-byte load.
template <QgemvKind KIND>
__device__ inline void mma_a_fragment(const uint4& wv, int step, uint32_t (&af)[4]) {
  const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
  if constexpr (KIND == QgemvKind::kW8A16) {
    const uint32_t w0 = words[2 * step] ^ 0x80808080u, w1 = words[2 * step + 1] ^ 0x80808080u;
    af[0] = int8x2_to_half2(w0, 0x5140);
    af[1] = int8x2_to_half2(w0, 0x7362);
    af[2] = int8x2_to_half2(w1, 0x5140);
    af[3] = int8x2_to_half2(w1, 0x7362);
  } else {  // nibble j of the word: the low half of af[j % 4] for j < 4, its high half for j ≥ 4
    const uint32_t w = words[step];
    const __half2 bias = __half2half2(__ushort_as_half(0x6408));  // 1032
    const __half2 sixteenth = __half2half2(__ushort_as_half(0x2c00)), minus_72 = __half2half2(__ushort_as_half(0xd480));
    const uint32_t bits[4] = {(w & 0x000f000fu) | 0x64006400u, (w & 0x00f000f0u) | 0x64006400u,
                              ((w >> 8) & 0x000f000fu) | 0x64006400u, ((w >> 8) & 0x00f000f0u) | 0x64006400u};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __half2 h = *reinterpret_cast<const __half2*>(&bits[j]);
      const __half2 v = j % 2 == 0 ? __hsub2(h, bias) : __hfma2(h, sixteenth, minus_72);
      af[j] = *reinterpret_cast<const uint32_t*>(&v);
    }
  }
}

template <QgemvKind KIND, int kNTiles>  // n8 tiles of x rows: 1 (m ≤ 8) or 2 (m ≤ 16)
__global__ void __launch_bounds__(kMmaWarps * 32) qgemv_mma_kernel(QgemvArgs a) {
  constexpr int kSteps = MmaLoad<KIND>::kSteps, kChunkCols = MmaLoad<KIND>::kCols;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int tile = blockIdx.x * kMmaWarps + warp, tiles = (a.n + 15) / 16, chunks = a.k / kChunkCols;
  const uint4* tile_w = static_cast<const uint4*>(a.w) + static_cast<int64_t>(tile) * chunks * 32;
  if (tile < tiles) prefetch_l2(tile_w, chunks * 512ll, lane);
  prefetch_l2_share(a.l2_prefetch);
  wait_for_previous_grid();
  allow_next_grid();
  if (tile >= tiles) return;  // the whole warp
  const int col0 = tile * 16 + g, col1 = col0 + 8, groups = a.k / a.group_size, chunks_per_group = a.group_size / kChunkCols;
  const float* scales0 = a.w_scales + static_cast<int64_t>(min(col0, a.n - 1)) * groups;
  const float* scales1 = a.w_scales + static_cast<int64_t>(min(col1, a.n - 1)) * groups;
  const uint32_t* x_rows[kNTiles];  // x row g + 8j from column 2q, as half2 words
  bool x_valid[kNTiles];
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    x_valid[j] = g + 8 * j < a.m;
    x_rows[j] = reinterpret_cast<const uint32_t*>(a.x_f16 + static_cast<int64_t>(x_valid[j] ? g + 8 * j : 0) * a.ldx + 2 * q);
  }
  float y[kNTiles][4] = {}, acc[kNTiles][4] = {};
  int group = 0, group_left = chunks_per_group;  // chunks of the current group still to come
  for (int c0 = 0; c0 < chunks; c0 += kMmaUnroll) {
    uint4 wv[kMmaUnroll];
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u)
      wv[u] = c0 + u < chunks ? __ldg(tile_w + (c0 + u) * 32 + lane) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int c = c0 + u;
      if (c >= chunks) break;
#pragma unroll
      for (int step = 0; step < kSteps; ++step) {
        uint32_t af[4];
        mma_a_fragment<KIND>(wv[u], step, af);
        const int k_half2 = (kChunkCols * c + 16 * step) / 2;  // the step's first column, in half2 words
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          const uint32_t b0 = x_valid[j] ? __ldg(x_rows[j] + k_half2) : 0u;
          const uint32_t b1 = x_valid[j] ? __ldg(x_rows[j] + k_half2 + 4) : 0u;
          mma_f16_16816(acc[j], af, b0, b1);
        }
      }
      if (--group_left == 0) {  // the group's sums, scaled, into y
        group_left = chunks_per_group;
        const float scale0 = __ldg(scales0 + group), scale1 = __ldg(scales1 + group);
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          y[j][0] = __fmaf_rn(acc[j][0], scale0, y[j][0]);
          y[j][1] = __fmaf_rn(acc[j][1], scale0, y[j][1]);
          y[j][2] = __fmaf_rn(acc[j][2], scale1, y[j][2]);
          y[j][3] = __fmaf_rn(acc[j][3], scale1, y[j][3]);
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
        }
        ++group;
      }
    }
  }
  // Lane (g, q) holds x rows 8j + 2q, +1 of columns col0 (y[j][0..1]) and col1 (y[j][2..3]).
#pragma unroll
  for (int j = 0; j < kNTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = 8 * j + 2 * q + (e & 1), col = e < 2 ? col0 : col1;
      if (row < a.m && col < a.n) store(a, row, col, y[j][e]);
    }
}

// Per group, four lanes per column (kQuad): a warp computes 8 columns; in group g lane j of a
// column's quad takes pieces j, j + 4, … of the group (group_size a multiple of 128 for int4), the
// quad adds its sums with two shuffles, and the quad's first lane extends each row's fp32 chain
// right away — the chain runs in registers, in group order, in 8 columns at once.
constexpr int kQuadWarps = 4;
constexpr int kQuadW4A8GroupsInFlight = 8;  // W4A8's lighter pieces leave room for more loads in flight
template <int M, QgemvKind KIND, int kGroupsInFlight>
__global__ void __launch_bounds__(kQuadWarps * 32) qgemv_quad_kernel(QgemvArgs a) {
  extern __shared__ __align__(16) int8_t normed[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, j = lane % 4;
  const int first_col = (blockIdx.x * kQuadWarps + warp) * 8, col = first_col + lane / 4;
  const bool active = col < a.n;  // inactive lanes still take part in the shuffles
  const int ppg = a.group_size / Piece<KIND>::kCols, groups = a.k / a.group_size;
  if (first_col < a.n)  // the warp's eight weight rows are contiguous
    prefetch_l2(static_cast<const uint4*>(a.w) + static_cast<int64_t>(first_col) * groups * ppg,
                static_cast<long long>(min(8, a.n - first_col)) * groups * ppg * 16, lane);
  prefetch_l2_share(a.l2_prefetch);
  wait_for_previous_grid();
  allow_next_grid();
  const Int8Input x8 = KIND == QgemvKind::kW4A16                       ? Int8Input{}
                       : KIND == QgemvKind::kW4A8 && uses_int4_input(a) ? int4_input<kQuadWarps * 32>(a, normed)
                                                                        : int8_input<kQuadWarps * 32>(a, normed);
  const uint4* w = static_cast<const uint4*>(a.w) + static_cast<int64_t>(active ? col : 0) * groups * ppg;
  const float* scales = a.w_scales + static_cast<int64_t>(active ? col : 0) * groups;
  float y[M];
#pragma unroll
  for (int r = 0; r < M; ++r) y[r] = 0.f;
  for (int g0 = 0; g0 < groups; g0 += kGroupsInFlight) {
    uint4 wv[kGroupsInFlight];
    float scale[kGroupsInFlight];
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {  // the first piece of each of the next kGroupsInFlight groups
      const bool in = active && g0 + u < groups;
      wv[u] = in ? __ldg(w + (g0 + u) * ppg + j) : make_uint4(0, 0, 0, 0);
      scale[u] = in && j == 0 ? __ldg(scales + g0 + u) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
      if (g0 + u >= groups) break;
      const int g = g0 + u;
#pragma unroll
      for (int r = 0; r < M; ++r) {
        if (r >= a.m) break;
        int iacc = 0;
        float facc = 0.f;
        if (active) {
          piece_dot<KIND>(a, x8, wv[u], r, g * ppg + j, iacc, facc);
          for (int q = j + 4; q < ppg; q += 4) piece_dot<KIND>(a, x8, __ldg(w + g * ppg + q), r, g * ppg + q, iacc, facc);
        }
        if constexpr (KIND == QgemvKind::kW4A8) {
          iacc += __shfl_xor_sync(0xffffffffu, iacc, 1);
          iacc += __shfl_xor_sync(0xffffffffu, iacc, 2);
          y[r] = __fmaf_rn(static_cast<float>(iacc), scale[u], y[r]);
        } else {
          facc += __shfl_xor_sync(0xffffffffu, facc, 1);
          facc += __shfl_xor_sync(0xffffffffu, facc, 2);
          y[r] = __fmaf_rn(facc, scale[u], y[r]);
        }
      }
    }
  }
  if (!active || j != 0) return;
#pragma unroll
  for (int r = 0; r < M; ++r)
    if (r < a.m) store(a, r, col, KIND == QgemvKind::kW4A8 ? __fmul_rn(y[r], a.x_scale) : y[r]);
}

// Launches kernel with the norm prologue's rows and W4A8's rearranged input (qgemv_shared_bytes).
template <typename Kernel>
cudaError_t launch(Kernel kernel, dim3 grid, int threads, const QgemvArgs& a, cudaStream_t stream) {
  const size_t shared = qgemv_shared_bytes(a);
  const cudaError_t status = allow_dynamic_shared(kernel, shared);
  if (status != cudaSuccess) return status;
  return launch_kernel(kernel, LaunchShape{grid, dim3(threads), shared}, stream, a);
}

// kStream: as many blocks as are resident at once (fewer when the columns run out).
// kKernel is a template argument because resident_blocks_per_sm caches per kernel.
template <void (*kKernel)(QgemvArgs), int kBlockThreads = kThreads>
cudaError_t launch_stream(const QgemvArgs& a, size_t shared, cudaStream_t stream) {
  if (const cudaError_t status = allow_dynamic_shared(kKernel, shared); status != cudaSuccess) return status;
  int per_sm = 0;
  if (const cudaError_t status = resident_blocks_per_sm<kKernel>(kBlockThreads, shared, &per_sm); status != cudaSuccess)
    return status;
  constexpr int kBlockWarps = kBlockThreads / 32;
  const int64_t wave = int64_t(per_sm > 0 ? per_sm : 1) * current_device_attribute(cudaDevAttrMultiProcessorCount);
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((a.n + kBlockWarps - 1) / kBlockWarps, wave));
  const LaunchShape shape{dim3(static_cast<unsigned>(blocks)), dim3(kBlockThreads), shared};
  return launch_kernel(kKernel, shape, stream, a);
}

// The one-row loads-ahead kernels (every in_proj: k ≤ 4,096) run one block of 512 threads an SM
// instead of three of 256: each block builds the norm prologue's int8 row once, so an SM builds it
// once rather than three times (the prologue was half of the 2.7b W4A8 in_proj's instructions), and
// the block's 40 K registers still leave room for a block of the out_proj before it, which keeps
// the programmatic launch's overlap (768 threads, 60 K registers, lost it: slower than 512).
// H100, batch-1 TPOT: 2.7b W4A8 −4 %, W8A8 −5 %; 8B-like W4A8 −2 %, W8A8 −3 %.
constexpr int kInProjBlockThreads = 512;
// The one-row W4A8 lane-group kernel where every lane takes two groups (k 8,192: the 8B-like
// out_proj) runs two blocks of 512 threads an SM instead of four of 256: the rearranged input is
// built twice an SM instead of four times. H100, batch-1 TPOT: 8B-like W4A8 −1.1 %; where only some
// lanes take a second group (2.7b, k 5,120: 160 blocks for 132 SMs) it measured +1.3 %, and the
// W8A8 stream kernel at k 5,120 / 8,192 as two 512-thread blocks an SM +8–9 %, so those stay at 256.
constexpr int kOutProjBlockThreads = 512;

// The int4 stream kernel for the arguments: kPer = 4 pieces a lane up to k = 4,096, with the rounds
// past the row skipped (2.7b's in_proj fills 2.5 of 4), 5 up to 5,120 (2.7b's out_proj exactly), else
// 8; the chain unrolled for the recipes' groups of 128. Before, every kPer round ran, 1.5 of them
// empty at 2.7b in_proj and 3 of 8 at its out_proj (ssdi8 W4A8 TPOT 2.32 → 2.24 ms, H100).
template <int M, QgemvKind KIND>
cudaError_t launch_int4_stream(const QgemvArgs& a, size_t shared, cudaStream_t stream) {
  const int rounds = (a.k / Piece<KIND>::kCols + 31) / 32;
  if (a.group_size == 128) {
    if (rounds <= 4) return launch_stream<qgemv_int4_stream_kernel<M, 4, 4, KIND, true>>(a, shared, stream);
    if (rounds <= 5) return launch_stream<qgemv_int4_stream_kernel<M, 5, 4, KIND, false>>(a, shared, stream);
    return launch_stream<qgemv_int4_stream_kernel<M, 8, 4, KIND, false>>(a, shared, stream);
  }
  return rounds <= 4 ? launch_stream<qgemv_int4_stream_kernel<M, 4, 0, KIND, true>>(a, shared, stream)
                     : launch_stream<qgemv_int4_stream_kernel<M, 8, 0, KIND, false>>(a, shared, stream);
}

template <int M>
cudaError_t launch_w4a8_lane_group(const QgemvArgs& a, cudaStream_t stream) {
  const size_t shared = int4_input_bytes(a);
  if constexpr (M == 1) {
    constexpr int kOut = kOutProjBlockThreads;
    if (a.k / 128 == kLaneGroupMaxGroups)
      return launch_stream<qgemv_w4a8_lane_group_kernel<M, 2, kOut>, kOut>(a, shared, stream);
  }
  if (a.k / 128 > 32) return launch_stream<qgemv_w4a8_lane_group_kernel<M, 2, kThreads>>(a, shared, stream);
  if constexpr (kLaneGroupLoadsAhead<M, 1>) {
    constexpr int kIn = kInProjBlockThreads;
    return launch_stream<qgemv_w4a8_lane_group_kernel<M, 1, kIn>, kIn>(a, shared, stream);
  } else {
    return launch_stream<qgemv_w4a8_lane_group_kernel<M, 1, kThreads>>(a, shared, stream);
  }
}

// kMmaTiles: one block an SM (fewer where there are fewer tiles) with a warp a slot, as many slots as
// the budget holds, up to the most tiles a block has.
template <int M>
cudaError_t launch_w4a8_mma_tiles(const QgemvArgs& a, cudaStream_t stream) {
  constexpr int kBlockThreads = kInProjBlockThreads;
  constexpr auto kKernel = qgemv_w4a8_mma_tiles_kernel<M, kBlockThreads>;
  const int64_t tiles = (a.n + 15) / 16;
  const int64_t blocks = std::min<int64_t>(tiles, current_device_attribute(cudaDevAttrMultiProcessorCount));
  const int64_t most = std::min<int64_t>(kMmaTilesStageBudget / mma_tiles_stage_bytes(a), kBlockThreads / 32);
  const int slots = static_cast<int>(std::clamp<int64_t>(most, 1, (tiles + blocks - 1) / blocks));
  const size_t shared = mma_tiles_input_bytes(a) + size_t(slots) * (mma_tiles_stage_bytes(a) + sizeof(uint64_t));
  if (const cudaError_t status = allow_dynamic_shared(kKernel, shared); status != cudaSuccess) return status;
  const LaunchShape shape{dim3(static_cast<unsigned>(blocks)), dim3(kBlockThreads), shared};
  return launch_kernel(kKernel, shape, stream, a, slots);
}

template <int M, QgemvKind KIND>
cudaError_t launch_mma(const QgemvArgs& a, cudaStream_t stream) {
  const dim3 grid(((a.n + 15) / 16 + kMmaWarps - 1) / kMmaWarps);
  return M <= 8 ? launch(qgemv_mma_kernel<KIND, 1>, grid, kMmaWarps * 32, a, stream)
                : launch(qgemv_mma_kernel<KIND, 2>, grid, kMmaWarps * 32, a, stream);
}

template <int M>
cudaError_t launch_rows(const QgemvArgs& a, cudaStream_t stream) {
  const dim3 grid((a.n + kWarps - 1) / kWarps);
  switch (a.kind) {
    case QgemvKind::kW8A8:
      if constexpr (M <= kStreamMaxRows) {
        if (a.schedule == QgemvSchedule::kStream ||
            (a.schedule == QgemvSchedule::kAuto && static_cast<int64_t>(a.m) * a.k <= kQgemvNormMaxBytes))
        {
          const size_t shared = static_cast<size_t>(a.m) * a.k;
          if (a.k > 32 * 8 * Piece<QgemvKind::kW8A8>::kCols)
            return launch_stream<qgemv_w8a8_stream_kernel<M, 16, kThreads>>(a, shared, stream);
          if constexpr (kW8A8StreamLoadsAhead<M, 8>) {
            constexpr int kIn = kInProjBlockThreads;
            return launch_stream<qgemv_w8a8_stream_kernel<M, 8, kIn>, kIn>(a, shared, stream);
          } else {
            return launch_stream<qgemv_w8a8_stream_kernel<M, 8, kThreads>>(a, shared, stream);
          }
        }
      }
      if (a.schedule == QgemvSchedule::kSplitK || (a.schedule == QgemvSchedule::kAuto && a.n < 8192 && a.m >= 4)) {
        constexpr int kSplit = 4;
        return launch(qgemv_w8a8_kernel<M, kSplit>, dim3((a.n + kWarps / kSplit - 1) / (kWarps / kSplit)), kThreads, a,
                      stream);
      }
      return launch(qgemv_w8a8_kernel<M, 1>, grid, kThreads, a, stream);
    case QgemvKind::kW4A8:
    case QgemvKind::kW4A16: {
      if (a.w_mma_layout) return launch_mma<M, QgemvKind::kW4A16>(a, stream);  // kW4A16 only (qgemv_supported)
      const bool quad = a.schedule == QgemvSchedule::kQuad ||
                        (a.schedule == QgemvSchedule::kAuto && a.n >= 8192 && a.m <= 4 && a.group_size % 128 == 0);
      const dim3 quad_grid((a.n + 8 * kQuadWarps - 1) / (8 * kQuadWarps));
      if constexpr (M <= kStreamMaxRows) {
        if (a.schedule == QgemvSchedule::kMmaTiles ||
            (a.schedule == QgemvSchedule::kAuto && a.m >= kMmaTilesAutoMinRows && w4a8_mma_tiles_fits(a) &&
             device_is_sm90_or_newer()))
          return launch_w4a8_mma_tiles<M>(a, stream);
        if (a.schedule == QgemvSchedule::kLaneGroup ||
            (a.schedule == QgemvSchedule::kAuto && w4a8_lane_group_fits(a)))
          return launch_w4a8_lane_group<M>(a, stream);
        if (a.kind == QgemvKind::kW4A8 &&
            (a.schedule == QgemvSchedule::kStream || (a.schedule == QgemvSchedule::kAuto && w4a8_stream_fits(a))))
          return launch_int4_stream<M, QgemvKind::kW4A8>(a, int4_input_bytes(a), stream);
        if (a.kind == QgemvKind::kW4A16 &&
            (a.schedule == QgemvSchedule::kStream || (a.schedule == QgemvSchedule::kAuto && a.m == 1)))
          return launch_int4_stream<M, QgemvKind::kW4A16>(a, 0, stream);
      }
      if (a.kind == QgemvKind::kW4A8) {
        if (quad) return launch(qgemv_quad_kernel<M, QgemvKind::kW4A8, kQuadW4A8GroupsInFlight>, quad_grid, kQuadWarps * 32, a, stream);
        return launch(qgemv_kernel<M, QgemvKind::kW4A8>, grid, kThreads, a, stream);
      }
      if (quad) return launch(qgemv_quad_kernel<M, QgemvKind::kW4A16, kUnroll>, quad_grid, kQuadWarps * 32, a, stream);
      return launch(qgemv_kernel<M, QgemvKind::kW4A16>, grid, kThreads, a, stream);
    }
    case QgemvKind::kW8A16:
      if (a.w_mma_layout) return launch_mma<M, QgemvKind::kW8A16>(a, stream);
      return launch(qgemv_w8a16_kernel<M>, grid, kThreads, a, stream);
  }
  return cudaErrorInvalidValue;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool qgemv_supported(const QgemvArgs& a) {
  if (a.m < 1 || a.m > kQgemvMaxRows || a.n < 1 || a.k < 1) return false;
  if (!a.w || !aligned16(a.w) || !a.w_scales || !a.out || a.ldout < a.n) return false;
  if (a.out_type != ElementType::kF32 && a.out_type != ElementType::kBF16 && a.out_type != ElementType::kF16) return false;
  if (a.accumulate && a.out_type != ElementType::kF32) return false;
  for (const L2Prefetch& r : a.l2_prefetch)
    if (r.bytes < 0 || r.bytes % 16 != 0 || (r.bytes > 0 && (!r.p || !aligned16(r.p)))) return false;
  const bool float_input = takes_fp16_input(a.kind);
  if (a.norm_residual) {
    if (float_input || !a.norm_weight || !(a.x_scale > 0.f) || a.k % 16 != 0 ||
        static_cast<int64_t>(a.m) * a.k > kQgemvNormMaxBytes)
      return false;
  } else if (float_input) {
    if (!a.x_f16 || !aligned16(a.x_f16) || a.ldx < a.k || a.ldx % 8 != 0) return false;
  } else {
    if (!a.x_int8 || !aligned16(a.x_int8) || a.ldx < a.k || a.ldx % 16 != 0) return false;
  }
  if (a.schedule == QgemvSchedule::kLaneGroup && !w4a8_lane_group_fits(a)) return false;
  if (a.schedule == QgemvSchedule::kMmaTiles && !(w4a8_mma_tiles_fits(a) && device_is_sm90_or_newer())) return false;
  if (a.schedule == QgemvSchedule::kStream &&
      (a.m > kStreamMaxRows || (a.kind == QgemvKind::kW8A8   ? static_cast<int64_t>(a.m) * a.k > kQgemvNormMaxBytes
                                : a.kind == QgemvKind::kW4A8 ? !w4a8_stream_fits(a)
                                                             : a.kind != QgemvKind::kW4A16)))
    return false;
  if (a.kind == QgemvKind::kW8A8) return a.k % 16 == 0 && !a.w_mma_layout;
  if (a.w_mma_layout) {
    const int chunk = mma_layout_columns(a.kind);
    if (chunk == 0 || a.k % chunk != 0 || a.group_size % chunk != 0 || a.schedule != QgemvSchedule::kAuto) return false;
  }
  // Grouped kinds: a group spans a power of two of lanes, ≤ 32, at one 16-byte piece a lane.
  const int cols = a.kind == QgemvKind::kW8A16 ? 16 : 32, lanes = a.group_size / cols;
  if (a.kind == QgemvKind::kW8A16 && a.schedule == QgemvSchedule::kQuad) return false;  // int4 only
  if (a.schedule == QgemvSchedule::kQuad && a.group_size % 128 != 0) return false;
  if (a.schedule == QgemvSchedule::kSplitK) return false;  // W8A8 only (returned above)
  return a.group_size >= cols && a.group_size % cols == 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0 &&
         a.k % a.group_size == 0;
}

namespace {
// emit(r0, r1, k0) for each 16-column tile, chunk of 16·steps input columns, lane (g, q) and k16
// step, in the order the mma layouts store them: the lane's rows r0 = g and r1 = g + 8 of the tile
// and its first column in the step, 2q.
template <typename Emit>
void for_each_mma_lane_step(int64_t n, int64_t k, int steps, Emit&& emit) {
  const int64_t tiles = (n + 15) / 16, chunks = k / (16 * steps);
  for (int64_t t = 0; t < tiles; ++t)
    for (int64_t c = 0; c < chunks; ++c)
      for (int lane = 0; lane < 32; ++lane)
        for (int step = 0; step < steps; ++step)
          emit(16 * t + lane / 4, 16 * t + lane / 4 + 8, 16 * steps * c + 16 * step + 2 * (lane % 4));
}
}  // namespace

std::vector<int8_t> pack_w8a16_mma_layout(const int8_t* w, int64_t n, int64_t k) {
  if (n < 1 || k < 32 || k % 32 != 0) return {};
  std::vector<int8_t> packed(static_cast<size_t>((n + 15) / 16 * 16 * k), 0);
  auto at = [&](int64_t row, int64_t col) { return row < n ? w[row * k + col] : int8_t{0}; };
  int8_t* out = packed.data();
  for_each_mma_lane_step(n, k, 2, [&](int64_t r0, int64_t r1, int64_t k0) {
    const int8_t bytes[8] = {at(r0, k0),     at(r0, k0 + 1), at(r1, k0),     at(r1, k0 + 1),
                             at(r0, k0 + 8), at(r0, k0 + 9), at(r1, k0 + 8), at(r1, k0 + 9)};
    for (int b = 0; b < 8; ++b) *out++ = bytes[b];
  });
  return packed;
}

std::vector<int8_t> pack_w4a16_mma_layout(const int8_t* w, int64_t n, int64_t k) {
  if (n < 1 || k < 64 || k % 64 != 0) return {};
  std::vector<int8_t> packed(static_cast<size_t>((n + 15) / 16 * 16 * k / 2), 0);
  auto nibble = [&](int64_t row, int64_t col) {  // q + 8; a padding row holds q = 0
    return static_cast<uint32_t>(row < n ? w[row * k + col] + 8 : 8) & 0xFu;
  };
  int8_t* out = packed.data();
  for_each_mma_lane_step(n, k, 4, [&](int64_t r0, int64_t r1, int64_t k0) {
    // fragment register j's two elements: nibbles j (low half) and j + 4 (high half)
    const uint32_t lo[4] = {nibble(r0, k0), nibble(r1, k0), nibble(r0, k0 + 8), nibble(r1, k0 + 8)};
    const uint32_t hi[4] = {nibble(r0, k0 + 1), nibble(r1, k0 + 1), nibble(r0, k0 + 9), nibble(r1, k0 + 9)};
    uint32_t word = 0;
    for (int j = 0; j < 4; ++j) word |= lo[j] << (4 * j) | hi[j] << (4 * (j + 4));
    std::memcpy(out, &word, 4);
    out += 4;
  });
  return packed;
}

cudaError_t launch_qgemv(const QgemvArgs& a, cudaStream_t stream) {
  if (!qgemv_supported(a)) return cudaErrorInvalidValue;
  if (a.m == 1) return launch_rows<1>(a, stream);
  if (a.m == 2) return launch_rows<2>(a, stream);
  if (a.m <= 4) return launch_rows<4>(a, stream);
  if (a.m <= 8) return launch_rows<8>(a, stream);
  return launch_rows<16>(a, stream);
}

}  // namespace ssdq::kernels
