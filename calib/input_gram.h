// Σ x xᵀ over the input rows of a linear layer, in fp64, mergeable in a fixed order so that
// export's GPTQ Hessians do not depend on the thread count. hessian() is GPTQ's H = 2/n Σ x xᵀ
// (the definition of quant/gptq.h's HessianAccumulator).
#pragma once

#include <cstdint>
#include <vector>

namespace ssdq {

class InputGram {
 public:
  explicit InputGram(int64_t dim);
  int64_t dim() const { return dim_; }
  int64_t rows() const { return rows_; }
  // `rows` rows of dim() values, row r at x + r * stride; fails on a NaN or infinity.
  void add_rows(const float* x, int64_t rows, int64_t stride);
  void merge(const InputGram& other);
  // A Gram matrix summed elsewhere (export on a GPU, kernels/input_gram.h): `sum` column-major
  // [dim, dim], its lower triangle read, over `rows` rows.
  static InputGram from_sums(int64_t dim, int64_t rows, std::vector<double> sum);
  // [dim, dim] row-major; fails when no row was added.
  std::vector<double> hessian() const;

 private:
  int64_t dim_, rows_ = 0;
  std::vector<double> sum_;  // column-major, lower triangle filled
};

}  // namespace ssdq
