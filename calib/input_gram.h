// Σ x xᵀ over the input rows of a linear layer, in fp64, mergeable in a fixed order so that
// export's GPTQ Hessians do not depend on the thread count. hessian() is GPTQ's H = 2/n Σ x xᵀ
// (the definition of quant/gptq.h's HessianAccumulator).
#pragma once

#include <cstdint>
#include <vector>

#include "quant/parallel_items.h"

namespace ssdq {

class InputGram {
 public:
  explicit InputGram(int64_t dim);
  int64_t dim() const { return dim_; }
  int64_t rows() const { return rows_; }
  // `rows` rows of dim() values, row r at x + r * stride; fails on a NaN or infinity.
  void add_rows(const float* x, int64_t rows, int64_t stride);
  // Adds other's sums (element by element: the same bits however `parallel` splits them).
  void merge(const InputGram& other, const ParallelFor& parallel = {});
  // A Gram matrix summed elsewhere (export on a GPU, kernels/input_gram.h): `sum` column-major
  // [dim, dim], its lower triangle read, over `rows` rows.
  static InputGram from_sums(int64_t dim, int64_t rows, std::vector<double> sum);
  // Adds such a matrix summed in fp32 (`sum`: dim() × dim() values, column-major) over `rows` rows,
  // as merge would add it as fp64 sums, without the fp64 copy.
  void add_sums(const float* sum, int64_t rows, const ParallelFor& parallel = {});
  // [dim, dim] row-major; fails when no row was added. `parallel` takes bands of rows (at 5,120
  // columns one thread spent ~0.12 s on it, twice a layer of a 2.7b export). Made in the Gram's own
  // storage, which the rvalue form leaves empty; the lvalue form works in a copy.
  std::vector<double> hessian(const ParallelFor& parallel = {}) const&;
  std::vector<double> hessian(const ParallelFor& parallel = {}) &&;

 private:
  InputGram(int64_t dim, std::vector<double> sum, int64_t rows);

  int64_t dim_, rows_ = 0;
  std::vector<double> sum_;  // column-major, lower triangle filled
};

}  // namespace ssdq
