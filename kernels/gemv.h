// Projections for decode (m ≤ kGemvMaxRows rows): out[m, n] (+)= x[m, k] · w[n, k]ᵀ with bf16 weights streamed
// once with 16-byte loads into tensor-core tiles (fp32 accumulation), and the normalisation that precedes each projection
// fused into the prologue, so a decode layer needs no separate norm kernels:
//   kBf16:         x given (bf16)
//   kRmsNorm:      x = bf16(rmsnorm(residual) · weight)            (before in_proj; residual fp32)
//   kGatedRmsNorm: x = bf16(rmsnorm_group(y · silu(z)) · weight)  (before out_proj)
// The prologue rounds x to bf16 exactly as add_rmsnorm / gated_rmsnorm do, so results match the
// unfused path up to summation order. CPU reference: cpu::rmsnorm / cpu::gated_rmsnorm + cpu::matmul_wt.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

enum class GemvInput { kBf16, kRmsNorm, kGatedRmsNorm };

struct GemvArgs {
  int m = 0, n = 0, k = 0;
  GemvInput input = GemvInput::kBf16;
  const __nv_bfloat16* x = nullptr;  // kBf16: [m, k], row stride ldx
  int64_t ldx = 0;
  const float* residual = nullptr;   // kRmsNorm: [m, k] fp32, row stride k
  const __nv_bfloat16* y = nullptr;  // kGatedRmsNorm: [m, k], row stride k
  const __nv_bfloat16* z = nullptr;  //   row stride z_stride
  int64_t z_stride = 0;
  int group_size = 0;                //   channels per norm group
  const float* norm_weight = nullptr;  // kRmsNorm / kGatedRmsNorm: [k]
  float eps = 1e-5f;
  const __nv_bfloat16* w = nullptr;  // [n, k], 16-byte aligned rows
  void* out = nullptr;               // [m, n], row stride ldout
  int64_t ldout = 0;
  ElementType out_type = ElementType::kBF16;
  bool accumulate = false;           // out += (fp32 out only)
  // kGatedRmsNorm under tensor parallelism's folded norm (kernels/tp_all_reduce.h): x = bf16(g ·
  // weight) left unnormalised, and sum_squares[r · groups + group] = Σ g² of the group here.
  float* sum_squares = nullptr;
  // kRmsNorm / kGatedRmsNorm over 16 KB or more of input (m·k bf16): room [m, k] where one
  // launch builds each row's normalised input once, a block a row and norm group (the prologue's
  // own code, so the same bits), before the GEMV reads them; null: every block of the GEMV builds
  // all m rows, which at 8 rows of a 5,120-wide gated norm, or at one row of an 8,192-wide one,
  // costs more than the weights (docs/kernels/gemm.md). Must not overlap x, y, z or residual.
  __nv_bfloat16* staged = nullptr;
};

// Each row's sums run in the same order whatever m and n are, so a row's output does not depend on
// the rows beside it: a verify window of up to 16 rows (2 drafts of 7 tokens) gives each row a
// decode step's bits.
constexpr int kGemvMaxRows = 16;
// Rows that 16-byte loads cannot read where they are (a norm without its staged room, or a
// misaligned bf16 input) are built in each block's shared memory: at most this many bytes of them.
constexpr int kGemvMaxInputBytes = 128 * 1024;
// The shapes the kernel takes (m rows of k inputs into n columns) when its rows are read from
// global memory (an aligned bf16 input, or a norm with its staged room); gemv_supported checks the rest.
bool gemv_shape_supported(int m, int n, int k);
bool gemv_supported(const GemvArgs& args);
cudaError_t launch_gemv(const GemvArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
