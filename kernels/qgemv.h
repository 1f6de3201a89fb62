// Quantized projections for decode (m ≤ 16 rows): out[m, n] (+)= x[m, k] · w[n, k]ᵀ with weights
// streamed once in their stored width (int8, or int4 packed two per byte):
//   kW8A8: int8 x (one static scale s_x), int8 w per output channel (s_w[n])
//   kW4A8: int8 x (s_x), int4 w per group of group_size input columns (s_w[n, g])
//   kW4A16: fp16 x, int4 w per group (s_w[n, g])
//   kW8A16: fp16 x, int8 w per group of 16..512 columns (s_w[n, g]): a head-to-toe lm_head at
//           decode (one row per sequence), weight-only like the CPU's float head
// The integer cases reproduce runtime/quantized_ops.h `linear_forward` bit for bit: exact int32
// dot products per weight group (dp4a), then the fp32 chain y ← fma(float(acc_g), s_w[n, g], y)
// over g in increasing order from y = 0, then y·s_x, then + bias[n]; with accumulate,
// out ← out + that. W4A16 sums x·q in fp32 per group and scales once per group; W8A16 scales
// each 16-column piece's fp32 sum by its group's scale; with w_mma_layout (W8A16 and W4A16) each
// group's sum comes from the tensor cores, whose fp32 additions are not all rounded to nearest.
// None of the float kinds is bit-exact to the CPU's dequantize-then-GEMM: a different summation order.
// int4 packing is model/quantizer.h `pack_int4` of the row-major [n, k] matrix (column 2i in the
// low nibble, 2i+1 in the high nibble of byte i of a row).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/element_type.h"
#include "kernels/l2_prefetch.h"

namespace ssdq::kernels {

enum class QgemvKind { kW8A8, kW4A8, kW4A16, kW8A16 };
// How a row is split over lanes and warps (every schedule gives the same bits; they stay side by
// side while their speed is compared, docs/kernels/quantized_projections.md):
//   kSplitGroups: one column a warp; lane l takes 16-byte pieces l, l + 32, …; a group's lanes
//                 reduce by shuffles and one lane a row extends the chain after each round
//   kQuad:        eight columns a warp, four lanes a column; the chain stays in registers
//                 (group_size a multiple of 128)
//   kSplitK:      W8A8 only: four warps a column, each a quarter of k, int32 sums added in shared memory
//   kStream:      W8A8, W4A8 and W4A16, m ≤ 4: one wave of blocks, each warp walking columns with a
//                 whole round of its row's pieces (up to 8 KB a warp) in flight; int8 x in shared
//                 memory (W8A8: m·k ≤ 96 KB; W4A8: m·k ≤ 32 KB, the rows rearranged for the int4
//                 pieces), W4A16's fp16 x read through L1
//   kLaneGroup:   W4A8, groups of 128, m ≤ 4, k a multiple of 512 up to 8,192: kStream's columns with one
//                 lane a group (no shuffles), the chain through shared memory
//   kMmaTiles:    W4A8, groups of 128, m ≤ 4, k a multiple of 512 up to 16,384 (m·k ≤ 32 KB), sm_90:
//                 a warp a tile of 16 columns on the int8 tensor cores, the nibbles fed from the stored
//                 words as they are, the tiles brought into shared memory by bulk copies; the chain in
//                 registers
//   kAuto:        W4A8: kMmaTiles from 3 rows where it can run (sm_90), else kLaneGroup where it can
//                 run, else kStream where it can; W4A16: kStream at one row; otherwise int4: kQuad
//                 where it measured faster (n ≥ 8192 columns, m ≤ 4), else kSplitGroups;
//                 W8A8: kStream up to 4 rows, kSplitK below 8192 columns from 5 rows, else one
//                 warp a column
enum class QgemvSchedule { kAuto, kSplitGroups, kQuad, kSplitK, kStream, kLaneGroup, kMmaTiles };

struct QgemvArgs {
  QgemvKind kind = QgemvKind::kW8A8;
  int m = 0, n = 0, k = 0;
  const int8_t* x_int8 = nullptr;  // kW8A8 / kW4A8: [m, k], row stride ldx
  const __half* x_f16 = nullptr;   // kW4A16 / kW8A16: [m, k], row stride ldx
  int64_t ldx = 0;
  float x_scale = 1.f;             // s_x of the int8 input
  const void* w = nullptr;         // int8 [n, k] or packed int4 [n, k/2]; 16-byte aligned
  bool w_mma_layout = false;       // kW8A16 / kW4A16 with schedule kAuto: w is pack_w8a16_mma_layout's /
                                   // pack_w4a16_mma_layout's (the tensor-core kernel; k and group_size
                                   // multiples of 32 / 64)
  const float* w_scales = nullptr; // [n] (kW8A8) or [n, k / group_size]
  int group_size = 0;              // int4 kinds: a multiple of 32 dividing k; kW8A16: 16·2^j ≤ 512 dividing k
  const float* bias = nullptr;     // optional [n], added after scaling (SSDi8 mean correction)
  void* out = nullptr;             // [m, n], row stride ldout
  int64_t ldout = 0;
  ElementType out_type = ElementType::kF32;
  bool accumulate = false;         // out += (fp32 out only)
  // Optional prologue (int8 kinds): every block builds x itself, x = int8(rmsnorm(residual) ·
  // norm_weight, x_scale), from the fp32 residual [m, k] (row stride k) into shared memory — the
  // bits add_rmsnorm writes with out_type kS8 — so a decode layer needs no norm launch. x_int8 is
  // then unused. m·k ≤ kQgemvNormMaxBytes.
  const float* norm_residual = nullptr;
  const float* norm_weight = nullptr;
  float norm_eps = 1e-5f;
  // Optional: bytes a later kernel will read (the next layer's in_proj weights), fetched into L2
  // by every schedule before it waits for the previous grid (kernels/l2_prefetch.h).
  L2Prefetch l2_prefetch[kL2PrefetchRanges];
  QgemvSchedule schedule = QgemvSchedule::kAuto;
};

// kW8A16 weights in the order the tensor-core kernel loads them: for each tile of 16 columns (n
// padded to a multiple of 16 with zero rows) and each 32 input columns, 32 lanes × 16 bytes,
// lane (g, q) holding for the two k16 steps the bytes of mma.sync m16n8k16's A fragment: w[g][2q],
// w[g][2q+1], w[g+8][2q], w[g+8][2q+1], then the same at 2q+8, 2q+9 (rows relative to the tile,
// columns to the step). Empty unless k is a positive multiple of 32. The kernel then needs
// group_size a multiple of 32.
std::vector<int8_t> pack_w8a16_mma_layout(const int8_t* w, int64_t n, int64_t k);
// Input columns one lane's 16-byte load covers in the mma layouts: 32 (kW8A16), 64 (kW4A16), 0 for
// the kinds without one. With w_mma_layout, k and group_size are multiples of it.
constexpr int mma_layout_columns(QgemvKind kind) {
  return kind == QgemvKind::kW8A16 ? 32 : kind == QgemvKind::kW4A16 ? 64 : 0;
}
// kW4A16 weights (int4 values q ∈ [−8, 7], one a byte in w) in the tensor-core kernel's order: for
// each tile of 16 columns (zero rows padding n) and each 64 input columns, 32 lanes × 16 bytes,
// lane (g, q) holding one 32-bit word per k16 step whose nibble j (q + 8, unsigned) is the low
// element of A fragment register j % 4 for j < 4 and its high element for j ≥ 4 (registers: rows
// g, g + 8, g, g + 8 at columns 2q (+1), 2q (+1), 2q + 8 (+1), 2q + 8 (+1)). Empty unless k is a
// positive multiple of 64. The kernel then needs group_size a multiple of 64.
std::vector<int8_t> pack_w4a16_mma_layout(const int8_t* w, int64_t n, int64_t k);

constexpr int kQgemvMaxRows = 16;
constexpr int kQgemvNormMaxBytes = 96 * 1024;
bool qgemv_supported(const QgemvArgs& args);
cudaError_t launch_qgemv(const QgemvArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
