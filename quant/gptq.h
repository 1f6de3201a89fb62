// GPTQ (Frantar et al., 2023) weight quantization with the input Hessian of a linear layer, as
// docs/QUANTIZATION.md specifies, producing quantizer.h's layout so the runtime dequantizes GPTQ and RTN
// weights the same way.
//
// Algorithm (the reference implementation's fasterquant):
// - H = 2/n Σ x xᵀ over the n calibration input rows (HessianAccumulator, accumulated in fp64).
// - Dead inputs (H_ii = 0): H_ii ← 1 and weight column i ← 0 (its ints are 0).
// - Scales (symmetric, scale_from_absmax of quantizer.h: absmax / 7 or / 127):
//   per channel (group_size 0): per row from the whole (dead-zeroed) weight, before any update;
//   per group, dynamic (default): from the current, error-updated columns of the group when the
//   first column of the group is reached (needs block_size % group_size == 0, so a group never
//   straddles a lazy batch); per group, static_groups: every group's scales from the (dead-zeroed)
//   original weight up front. Groups are always consecutive columns in the natural order, the last
//   one possibly shorter; there is no runtime g_idx.
// - act_order: columns are processed in order of decreasing H_ii (stable), H and W permuted to
//   match; the permutation is undone in the output. It requires static_groups when grouping.
// - Damping: H_ii += damp_percent · mean(diag H). Then U = upper Cholesky factor of H⁻¹
//   (H⁻¹ = UᵀU), computed in fp64 (via the Cholesky factor of the reversed H, see gptq.cc); the
//   column updates run in fp32.
// - Columns in blocks of block_size: q = quantize_value(w, scale), err = (w - q·scale) / U_jj,
//   the rest of the block gets w -= err·U_j,(j+1..), and the columns after the block get the
//   block's errors in one lazy batch update.
// Rows are independent once U is known, and U's columns are independent solves: both run in
// slices of kGptqSliceRows, over the cores when GptqOptions::parallel_for is given; the slicing is
// fixed, so the result does not depend on the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/quantizer.h"
#include "quant/parallel_items.h"

namespace ssdq {

class HessianAccumulator {
 public:
  explicit HessianAccumulator(int64_t dim);
  int64_t dim() const { return dim_; }
  int64_t samples() const { return samples_; }
  // Adds `rows` input rows of dim() values each (row-major). Fails on a NaN or infinity.
  void add_rows(const float* x, int64_t rows);
  // H = 2/n Σ x xᵀ as a [dim, dim] row-major symmetric matrix. Fails when no row was added.
  std::vector<double> hessian() const;

 private:
  int64_t dim_;
  int64_t samples_ = 0;
  std::vector<double> sum_;  // Σ x xᵀ, column-major, lower triangle
};

// The row pass handed to GptqOptions::row_pass: the damped problem after permutation, and where
// its codes and scales go.
struct GptqRowPassJob {
  const float* weight = nullptr;  // [rows, cols] row-major, columns in processing order, dead ones zeroed
  const float* u = nullptr;       // [cols, cols] row-major, upper triangular (H⁻¹ = UᵀU); null for
                                  // GptqOptions::factored_row_pass, which makes U itself
  int64_t rows = 0, cols = 0, block_size = 0, group_size = 0, groups = 0;
  QuantBits bits = QuantBits::kInt4;
  bool dynamic_scales = false;         // scales set at each group's first column (else given in scales)
  const int32_t* column_group = nullptr;  // [cols]: the scale group of the k-th processed column
  float* scales = nullptr;             // [rows, groups]
  int8_t* values = nullptr;            // [rows, cols]: the codes, in processing order
};

struct GptqOptions {
  QuantBits bits = QuantBits::kInt4;
  int64_t group_size = 128;  // columns per scale; 0 = one scale per output row
  int64_t block_size = 128;
  double damp_percent = 0.01;
  bool act_order = false;
  bool static_groups = false;
  // Runs body(i) for i in [0, count), possibly on several threads (the pipeline passes
  // runtime/parallel.h's parallel_for; quant/ itself starts no threads). Empty: one thread.
  ParallelFor parallel_for;
  // Computes U (row-major [cols, cols], upper triangular, H⁻¹ = UᵀU) of the damped and permuted
  // Hessian h (row-major [cols, cols]); false when h is not positive definite. Empty: Eigen's LLT
  // on this thread and the triangular solve over parallel_for. The export on a GPU passes the
  // device's (pipeline/cuda_gptq.h).
  std::function<bool(const std::vector<double>& h, int64_t cols, std::vector<float>& u)> inverse_factor;
  // Runs the row pass (every row through every column block, with the lazy updates) elsewhere:
  // the export on a GPU passes the device's (pipeline/cuda_gptq.h). Empty: the host's, in slices
  // of rows over parallel_for.
  std::function<void(const GptqRowPassJob& job)> row_pass;
  // The factor and the row pass together elsewhere, U kept there rather than read back and sent
  // again (a GPU's, pipeline/cuda_gptq.h): given the damped and permuted Hessian h (row-major
  // [cols, cols], as inverse_factor gets it) and the row pass's job with u = null. False when h is
  // not positive definite. When set, inverse_factor and row_pass are not called.
  std::function<bool(const std::vector<double>& h, const GptqRowPassJob& job)> factored_row_pass;
};
inline constexpr int64_t kGptqSliceRows = 64;

// The pieces of U = J·L⁻¹·J (J the reversal, J·H·J = L·Lᵀ) for an inverse_factor that computes
// L⁻¹ elsewhere (pipeline/cuda_gptq.h): J·H·J of a row-major [n, n] h, and U (row-major fp32, upper
// triangular) from L⁻¹ stored column-major. Both walk the matrices in tiles, so neither side is
// read or written with a stride of n, and spread the tiles over `parallel` when given.
std::vector<double> reversed_matrix(const std::vector<double>& h, int64_t n, const ParallelFor& parallel = {});
std::vector<float> factor_from_reversed_inverse(const std::vector<double>& l_inverse_column_major, int64_t n,
                                                const ParallelFor& parallel = {});

// weight: [rows, cols] row-major (rows = output channels); hessian: [cols, cols] from
// HessianAccumulator. Fails on bad shapes or options, non-finite inputs, or a Hessian that is
// not positive definite after damping.
// The Hessian is taken by value: a caller done with it moves it in, and GPTQ damps and permutes
// its storage in place instead of a copy (n² values: 210 MB at 2.7b's out_proj).
QuantizedMatrix gptq_quantize(const float* weight, int64_t rows, int64_t cols, std::vector<double> hessian,
                              const GptqOptions& options);

}  // namespace ssdq
