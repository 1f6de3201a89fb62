// The integer projection with weight groups as one kernel (sm_80 and newer, mma.sync):
//   out[m, n] (+)= chain[m, n]·s_x + bias[n],
//   chain = 0; for g = 0 .. groups − 1: chain ← fma(float(Σ_{k in group g} x[m, k]·w[n, k]), s_w[n, g], chain)
// rounded step by step exactly as runtime/quantized_ops.h `linear_forward`, so it is bit-identical
// to the CPU: each group's int32 sums stay in the tensor cores' accumulators and are folded into
// the fp32 chain in registers when the group's last k step is done (the W4A8 prefill; int4
// weights are unpacked in registers on the mma.sync tiles, or to int8 first for wgmma,
// kernels/weight_unpack.h). One group a row is the
// per-channel W8A8 projection: the portable path where kernels/gemm_s8_scaled.h (sm_90a) is not.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

// kWgmma: 128 × 128 tiles of two warpgroups on wgmma (sm_90 devices only); kLarge: 128 × 128 tiles
// of eight warps on mma.sync (sm_80); kSmall: 32 × 64 tiles of four warps on mma.sync (a few dozen
// rows, where large tiles leave most of the GPU idle); kNarrow: 32 × 32 tiles of four warps (a few
// dozen rows of a projection with few columns, whose 32 × 64 tiles would leave half the SMs idle).
// kAuto picks by device, rows and columns (measured, docs/kernels/gemm.md).
enum class GemmS8GroupedTile { kAuto, kWgmma, kLarge, kSmall, kNarrow };

// How a fold turns a group's int32 sums into floats (the same values either way): kBiased starts
// the accumulators at the bits of 1.5·2²³ so that one subtraction converts (sm_80, whose I2F runs at
// a quarter rate; groups ≤ 256, mma.sync tiles only); kDirect converts each sum (sm_90's full-rate
// I2FP). kAuto: kBiased on sm_80-class devices where it applies, else kDirect.
enum class GemmS8GroupedSums { kAuto, kBiased, kDirect };

struct GemmS8GroupedArgs {
  int64_t m = 0, n = 0, k = 0;
  const int8_t* x = nullptr;        // [m, k], row stride ldx
  int64_t ldx = 0;
  const int8_t* w = nullptr;        // [n, k], row stride ldw (elements)
  int w_bits = 8;                   // 4: w holds packed int4 (model/quantizer.h pack_int4 of the rows; not kWgmma)
  int64_t ldw = 0;
  const float* w_scales = nullptr;  // [n, k / group_size]
  int64_t group_size = 0;           // k for one group a row
  float x_scale = 1.f;
  const float* bias = nullptr;      // optional [n]
  void* out = nullptr;              // [m, n], row stride ldout
  int64_t ldout = 0;
  ElementType out_type = ElementType::kF32;  // kF32, kBF16 or kF16
  bool accumulate = false;                   // out += (fp32 only)
  GemmS8GroupedTile tile = GemmS8GroupedTile::kAuto;
  GemmS8GroupedSums sums = GemmS8GroupedSums::kAuto;
};

// sm_80 or newer; k and group_size multiples of 32 (kWgmma: an sm_90 device, multiples of 128),
// group_size dividing k; row strides multiples of 16 bytes and 16-byte aligned operands.
bool gemm_s8_grouped_supported(const GemmS8GroupedArgs& args);
cudaError_t launch_gemm_s8_grouped(const GemmS8GroupedArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
