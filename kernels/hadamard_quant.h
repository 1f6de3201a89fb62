// out_proj's input in the rotated recipes (had, quamba2, ssdi8): per row,
//   x = gated_rmsnorm(y, z) (when z is given; else x = y),
//   x ← x·H_n when rotate (model/hadamard.h's matrix: Walsh–Hadamard butterflies inside each of the K blocks
//       of 2^m, stage h = 1, 2, 4, …, then the dense H_K mix summed over a = 0..K-1), x ← x·(1/√n),
//   out = int8 sat±127(rne(x / out_scale)) (the per-tensor static scale), or fp16 / fp32.
// The rotation and the quantization are bit-identical to the CPU (the same operations in the same
// order); the gated norm uses __expf and a float sum, so after it results can differ in the last
// bit and an int8 output next to a rounding boundary can move one step.
// CPU reference: runtime/cpu_block.cc (cpu::gated_rmsnorm, apply_hadamard_rows, quantize_value).
//
// Schedules (the same bits, apart from the gated norm's summation order):
//   kRowPerBlock: one block a row, the row in shared memory (any row count; every device);
//   kCluster:     a row split over a cluster of 8 blocks (sm_90): each block owns 1/8 of every
//                 K block, runs the butterfly stages inside its slice, and the last three stages
//                 and the H_K mix read the other blocks' slices through distributed shared
//                 memory; the group norm's sums are exchanged the same way;
//   kRegisters:   one block a row of n/8 threads, 8 consecutive values a thread held in registers:
//                 the stages h < 256 inside each warp, the later stages and the mix after one
//                 shared-memory exchange each — the fewest barriers for a latency-bound decode
//                 row. Rotated rows with n ≤ 8192 and m ≥ 256, H_K the built-in one with its host
//                 copy given, 16-byte aligned rows, norm groups a multiple of 256;
//   kAuto:        up to kHadamardDecodeMaxRows rows kRegisters where it takes the shape, else
//                 kCluster where supported; kRowPerBlock otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

enum class HadamardQuantSchedule { kAuto, kRowPerBlock, kCluster, kRegisters };
constexpr int64_t kHadamardDecodeMaxRows = 32;

struct HadamardQuantArgs {
  int64_t rows = 0;
  int n = 0;                          // K·2^m with K = base_order
  const float* y = nullptr;           // [rows, n], row stride ldy
  int64_t ldy = 0;
  const float* z = nullptr;           // optional gate: row r at z + r * z_stride
  int64_t z_stride = 0;
  // z was written before the previous grid in the stream (in a layer, by in_proj, with the SSD
  // between): the decode schedules (kCluster, kRegisters) then load it, and compute silu(z),
  // before they wait for that grid (kernels/programmatic_launch.cuh).
  bool z_before_previous_grid = false;
  const float* norm_weight = nullptr; // [n], with z
  int group_size = 0;                 // norm group, with z
  float eps = 1e-5f;
  bool rotate = true;                 // false: no rotation (the gated norm and the output format only)
  int base_order = 1;                 // K ∈ {1, 12, 20, 28}
  const int8_t* base_matrix = nullptr;  // device [K, K] of ±1 (model/hadamard.h hadamard_matrix(K)), K > 1
  // Optional host copy of base_matrix: with it, kRowPerBlock runs the mix unrolled for K 12, 20
  // and 28 with the signs in the kernel's parameters (the same bits, fewer instructions).
  const int8_t* base_matrix_host = nullptr;
  float normalize = 1.f;              // the fp32 value of 1/√n (or 1: no normalization)
  void* out = nullptr;                // [rows, n]
  ElementType out_type = ElementType::kS8;  // kS8, kF16 or kF32
  float out_scale = 1.f;              // kS8
  HadamardQuantSchedule schedule = HadamardQuantSchedule::kAuto;
};

bool hadamard_quant_supported(const HadamardQuantArgs& args);
cudaError_t launch_hadamard_quant(const HadamardQuantArgs& args, cudaStream_t stream);

}  // namespace ssdq::kernels
