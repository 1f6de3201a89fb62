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

namespace {
constexpr int64_t kTile = 64;  // rows (of the sums or of the Hessian) a work item

// sum += other element by element (other: dim² values, fp32 or fp64), bands of rows over `parallel`.
template <typename T>
void add_elementwise(std::vector<double>& sum, int64_t dim, const T* other, const ParallelFor& parallel) {
  run_items(parallel, (dim + kTile - 1) / kTile, [&](int64_t band) {
    const size_t end = static_cast<size_t>(std::min(dim, (band + 1) * kTile) * dim);
    for (size_t i = static_cast<size_t>(band * kTile * dim); i < end; ++i) sum[i] += static_cast<double>(other[i]);
  });
}
}  // namespace

InputGram::InputGram(int64_t dim, std::vector<double> sum, int64_t rows) : dim_(dim), rows_(rows), sum_(std::move(sum)) {}

void InputGram::merge(const InputGram& other, const ParallelFor& parallel) {
  if (other.dim_ != dim_) fail("internal: merging Gram matrices of dimensions {} and {}", other.dim_, dim_);
  add_elementwise(sum_, dim_, other.sum_.data(), parallel);
  rows_ += other.rows_;
}

void InputGram::add_sums(const float* sum, int64_t rows, const ParallelFor& parallel) {
  if (rows < 0) fail("internal: a Gram matrix over {} rows", rows);
  add_elementwise(sum_, dim_, sum, parallel);
  rows_ += rows;
}

InputGram InputGram::from_sums(int64_t dim, int64_t rows, std::vector<double> sum) {
  if (dim <= 0 || dim > (int64_t{1} << 16)) fail("internal: Gram dimension {} is outside 1..65536", dim);
  if (static_cast<int64_t>(sum.size()) != dim * dim || rows < 0)
    fail("internal: a Gram matrix of {} values over {} rows for dimension {}", sum.size(), rows, dim);
  return InputGram(dim, std::move(sum), rows);
}

std::vector<double> InputGram::hessian(const ParallelFor& parallel) && {
  if (rows_ == 0) fail("internal: Hessian of a layer that saw no input rows");
  // Row-major, the stored lower triangle is already the upper one in place; the lower one is its
  // mirror, read from the upper (disjoint from what is written, so bands of rows run apart), then
  // every value scaled once.
  const double scale = 2.0 / static_cast<double>(rows_);
  const int64_t bands = (dim_ + kTile - 1) / kTile;
  run_items(parallel, bands, [&](int64_t band) {
    const int64_t i0 = band * kTile, i1 = std::min(dim_, i0 + kTile);
    for (int64_t j0 = 0; j0 < i1; j0 += kTile)
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < std::min(i, j0 + kTile); ++j) sum_[i * dim_ + j] = sum_[j * dim_ + i];
  });
  run_items(parallel, bands, [&](int64_t band) {
    const size_t end = static_cast<size_t>(std::min(dim_, (band + 1) * kTile) * dim_);
    for (size_t i = static_cast<size_t>(band * kTile * dim_); i < end; ++i) sum_[i] *= scale;
  });
  rows_ = 0;
  return std::move(sum_);
}

std::vector<double> InputGram::hessian(const ParallelFor& parallel) const& {
  return InputGram(*this).hessian(parallel);  // made in a copy's storage
}

}  // namespace ssdq
