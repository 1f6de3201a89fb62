#include "calib/input_gram.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <utility>

#include "formats/error.h"

namespace ssdq {

InputGram::InputGram(int64_t dim) : dim_(dim), sum_(dim * dim, 0.0) {
  if (dim <= 0 || dim > (int64_t{1} << 16)) fail("internal: Gram dimension {} is outside 1..65536", dim);
}

void InputGram::add_rows(const float* x, int64_t rows, int64_t stride) {
  Eigen::Map<Eigen::MatrixXd> sum(sum_.data(), dim_, dim_);
  constexpr int64_t kChunk = 256;
  Eigen::MatrixXd chunk;
  for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
    const int64_t count = std::min(kChunk, rows - r0);
    chunk.resize(dim_, count);  // column j = row r0 + j
    for (int64_t j = 0; j < count; ++j)
      for (int64_t i = 0; i < dim_; ++i) {
        const float v = x[(r0 + j) * stride + i];
        if (!std::isfinite(v)) fail("GPTQ input has the non-finite value {} at row {}, column {}", v, rows_ + r0 + j, i);
        chunk(i, j) = v;
      }
    sum.selfadjointView<Eigen::Lower>().rankUpdate(chunk);
  }
  rows_ += rows;
}

void InputGram::merge(const InputGram& other) {
  if (other.dim_ != dim_) fail("internal: merging Gram matrices of dimensions {} and {}", other.dim_, dim_);
  for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += other.sum_[i];
  rows_ += other.rows_;
}

InputGram InputGram::from_sums(int64_t dim, int64_t rows, std::vector<double> sum) {
  InputGram gram(dim);
  if (static_cast<int64_t>(sum.size()) != dim * dim || rows < 0)
    fail("internal: a Gram matrix of {} values over {} rows for dimension {}", sum.size(), rows, dim);
  gram.sum_ = std::move(sum);
  gram.rows_ = rows;
  return gram;
}

std::vector<double> InputGram::hessian() const {
  if (rows_ == 0) fail("internal: Hessian of a layer that saw no input rows");
  // The lower triangle, column-major, is the upper one row-major: the result's row i reads
  // sum_[i·dim + j] for j ≥ i and sum_[j·dim + i] below; in square tiles, so the second read's
  // stride of dim stays inside a tile's cache lines.
  constexpr int64_t kTile = 64;
  const double scale = 2.0 / static_cast<double>(rows_);
  std::vector<double> out(dim_ * dim_);
  for (int64_t i0 = 0; i0 < dim_; i0 += kTile)
    for (int64_t j0 = 0; j0 < dim_; j0 += kTile)
      for (int64_t i = i0; i < std::min(dim_, i0 + kTile); ++i)
        for (int64_t j = j0; j < std::min(dim_, j0 + kTile); ++j)
          out[i * dim_ + j] = (j >= i ? sum_[i * dim_ + j] : sum_[j * dim_ + i]) * scale;
  return out;
}

}  // namespace ssdq
