// Dense projections through cuBLASLt: out[m, n] (+)= x[m, k] · w[n, k]ᵀ with bf16 or fp16 inputs
// and fp32 accumulation, or fp32 inputs multiplied in strict fp32 (calibration's FP32 model); out is the input type, or fp32 (optionally accumulated into: the residual add of
// out_proj rides on the GEMM's beta). With int8 inputs (kS8) the product is exact int32 (kS32 out,
// IMMA; k and ldx multiples of 4) and kernels/scale_int32.h applies the quantization scales. Plans (layouts + the heuristic's algorithm) are cached per
// shape, so after the first call of a shape a run only launches (and can be graph-captured).
// CPU reference: runtime/cpu_ops.h `cpu::matmul_wt`; int8: runtime/quantized_ops.h `gemm_s8s8_s32`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/element_type.h"

namespace ssdq::kernels {

struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  ElementType in_type = ElementType::kBF16;  // of x and w: kBF16, kF16, kF32 or kS8
  const void* x = nullptr;                  // [m, k], row stride ldx
  int64_t ldx = 0;
  const void* w = nullptr;                  // [n, k], row stride ldw
  int64_t ldw = 0;                          // 0: k (contiguous rows)
  void* out = nullptr;               // [m, n], row stride ldout
  int64_t ldout = 0;
  ElementType out_type = ElementType::kBF16;  // kF32 or in_type; kS32 for kS8
  bool accumulate = false;           // out += x·wᵀ (fp32 out only)
  // fp32 inputs only: multiply on the tensor cores in TF32 (inputs rounded to 10 mantissa bits,
  // fp32 accumulation), about 8x the strict fp32 rate on sm_90.
  bool tf32 = false;
};

class Gemm {
 public:
  // The workspace (device memory) is owned by the caller; 32 MiB lets cuBLASLt pick freely.
  Gemm(void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  static bool supported(const GemmArgs& args);
  // Throws std::runtime_error (with cuBLAS's status) when no algorithm fits or a call fails.
  void run(const GemmArgs& args, cudaStream_t stream);

 private:
  struct Plan;
  // m, n, k, ldx, ldw, ldout, in, out, accumulate, the operands' common pointer alignment
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, bool, int>;
  const Plan& plan(const GemmArgs& args);
  void* handle_ = nullptr;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace ssdq::kernels
