// The W4A16 projection above the decode GEMV's rows (prefill, and decode batches over 16) on Hopper:
// CUTLASS's mixed-input GEMM (int4 weights through the register file, fp16 activations, wgmma fed
// by TMA), so the int4 weights are never expanded in memory. Each weight is dequantized in registers exactly as kernels/weight_unpack.h kF16 writes it,
//   w16[n, c] = fp16_rn(float(q[n, c]) · s_w[n, c / group_size]),
// then out[m, n] = Σ_c x[m, c]·w16[n, c] in fp32 (another summation order than cuBLASLt's over the
// expanded weights: equal within float tolerance, not bit for bit). Machine code for sm_90a only;
// elsewhere the caller expands the weights and runs kernels/gemm.h.
//
// Lifecycle (as CUTLASS's): gemm_w4a16_supported → gemm_w4a16_workspace_bytes → launch_gemm_w4a16.
// The workspace holds the weight scales transposed to [groups, n] (CUTLASS reads scales n-major).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ssdq::kernels {

// Tiles of weight rows × tokens: 128 × 128 and 128 × 256 with two warp groups on a tile, 64 × 128
// ping-pong. kAuto, as measured on an H100 (docs/kernels/gemm.md, "W4A16 on CUTLASS's mixed-input
// GEMM"): 128 × 256 above kGemmW4A16FewRows rows, else 128 × 128 from 8,192 weight rows, else 64 × 128.
enum class GemmW4A16Tile { kAuto, k128x128, k128x256, k64x128 };
constexpr int64_t kGemmW4A16FewRows = 256;

struct GemmW4A16Args {
  int64_t m = 0, n = 0, k = 0;
  const void* x = nullptr;          // [m, k] fp16, row stride ldx (elements)
  int64_t ldx = 0;
  const void* w = nullptr;          // [n, k] int4, two's complement, packed two a byte (column 2j low nibble), rows k/2 bytes apart
  const float* w_scales = nullptr;  // [n, k / group_size]
  int group_size = 0;
  float* out = nullptr;             // [m, n] fp32, row stride ldout
  int64_t ldout = 0;
  void* workspace = nullptr;        // gemm_w4a16_workspace_bytes, 16-byte aligned
  GemmW4A16Tile tile = GemmW4A16Tile::kAuto;
};

// An sm_90 device; k a multiple of 64 and of group_size, group_size a multiple of 64 (a tile's k),
// n and ldout multiples of 4, ldx a multiple of 8, 16-byte aligned operands.
bool gemm_w4a16_supported(const GemmW4A16Args& args);
size_t gemm_w4a16_workspace_bytes(const GemmW4A16Args& args);
cudaError_t launch_gemm_w4a16(const GemmW4A16Args& args, cudaStream_t stream);

}  // namespace ssdq::kernels
