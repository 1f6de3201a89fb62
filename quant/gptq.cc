#include "quant/gptq.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <utility>

#include "formats/error.h"

namespace ssdq {
namespace {

using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;  // column-major: columns are contiguous
using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void check_options(const GptqOptions& o, int64_t rows, int64_t cols, size_t hessian_size) {
  if (rows <= 0 || cols <= 0) fail("gptq: invalid weight shape [{}, {}]", rows, cols);
  if (static_cast<int64_t>(hessian_size) != cols * cols)
    fail("gptq: Hessian has {} values, expected {}² = {}", hessian_size, cols, cols * cols);
  if (o.group_size < 0) fail("gptq: group size must be >= 0, got {}", o.group_size);
  if (o.block_size <= 0) fail("gptq: block size must be positive, got {}", o.block_size);
  if (!(o.damp_percent >= 0) || !std::isfinite(o.damp_percent)) fail("gptq: damping {} is not a finite value >= 0", o.damp_percent);
  const bool grouped = o.group_size > 0;
  if (grouped && o.act_order && !o.static_groups)
    fail("gptq: act-order with groups needs static groups (no runtime g_idx)");
  if (grouped && !o.static_groups && o.block_size % o.group_size != 0)
    fail("gptq: block size {} must be a multiple of group size {} for dynamic group scales", o.block_size,
         o.group_size);
}

// Scales of group `group` (columns [c0, c0 + width)) of the rows of `w` (q's rows from row0 on) into
// q.scales; `w` in either layout.
template <typename Rows>
void set_group_scales(const Eigen::MatrixBase<Rows>& w, int64_t row0, int64_t c0, int64_t width, int64_t group,
                      QuantizedMatrix& q) {
  const int64_t groups = q.groups_per_row();
  for (int64_t r = 0; r < w.rows(); ++r)
    q.scales[(row0 + r) * groups + group] =
        scale_from_absmax(w.row(r).segment(c0, width).cwiseAbs().maxCoeff(), q.bits);
}

}  // namespace

HessianAccumulator::HessianAccumulator(int64_t dim) : dim_(dim) {
  if (dim <= 0 || dim > (int64_t{1} << 16)) fail("Hessian: dimension {} is outside 1..65536", dim);
  sum_.assign(dim * dim, 0.0);
}

void HessianAccumulator::add_rows(const float* x, int64_t rows) {
  if (rows < 0) fail("Hessian: negative row count {}", rows);
  check_finite(x, rows, dim_, "Hessian input");
  Eigen::Map<Eigen::MatrixXd> sum(sum_.data(), dim_, dim_);
  constexpr int64_t kChunk = 256;
  for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
    const int64_t count = std::min(kChunk, rows - r0);
    const Eigen::MatrixXd chunk = Eigen::Map<const RowMajorF>(x + r0 * dim_, count, dim_).cast<double>();
    sum.selfadjointView<Eigen::Lower>().rankUpdate(chunk.transpose());
  }
  samples_ += rows;
}

std::vector<double> HessianAccumulator::hessian() const {
  if (samples_ == 0) fail("Hessian: no input rows were added");
  Eigen::Map<const Eigen::MatrixXd> sum(sum_.data(), dim_, dim_);
  std::vector<double> out(dim_ * dim_);
  Eigen::Map<RowMajorD> h(out.data(), dim_, dim_);
  h = sum.selfadjointView<Eigen::Lower>();
  h *= 2.0 / static_cast<double>(samples_);
  return out;
}

namespace {
constexpr int64_t kTile = 64;
}  // namespace

std::vector<double> reversed_matrix(const std::vector<double>& h, int64_t n, const ParallelFor& parallel) {
  if (static_cast<int64_t>(h.size()) != n * n) fail("internal: reversing {} values as [{}, {}]", h.size(), n, n);
  std::vector<double> out(n * n);
  run_items(parallel, (n + kTile - 1) / kTile, [&](int64_t tile) {
    for (int64_t i = tile * kTile; i < std::min(n, (tile + 1) * kTile); ++i) {
      // row i of the result is row n − 1 − i reversed: both contiguous
      const double* from = h.data() + (n - 1 - i) * n;
      double* to = out.data() + i * n;
      for (int64_t j = 0; j < n; ++j) to[j] = from[n - 1 - j];
    }
  });
  return out;
}

std::vector<float> factor_from_reversed_inverse(const std::vector<double>& l_inverse, int64_t n,
                                                const ParallelFor& parallel) {
  if (static_cast<int64_t>(l_inverse.size()) != n * n) fail("internal: a factor of {} values as [{}, {}]", l_inverse.size(), n, n);
  // U(i, j) = L⁻¹(n − 1 − i, n − 1 − j), L⁻¹(r, c) at c · n + r; zero below the diagonal.
  std::vector<float> u(n * n, 0.0f);
  run_items(parallel, (n + kTile - 1) / kTile, [&](int64_t tile) {  // rows [i0, i0 + kTile) of U each
    const int64_t i0 = tile * kTile;
    for (int64_t j0 = i0; j0 < n; j0 += kTile)
      for (int64_t j = j0; j < std::min(n, j0 + kTile); ++j) {
        const double* column = l_inverse.data() + (n - 1 - j) * n;
        for (int64_t i = i0; i < std::min({n, i0 + kTile, j + 1}); ++i) u[i * n + j] = static_cast<float>(column[n - 1 - i]);
      }
  });
  return u;
}

// U (row-major) of the damped Hessian: Eigen's LLT on this thread, then the triangular solve in
// slices of columns over parallel_for.
std::vector<float> inverse_factor_on_host(const Eigen::Ref<const Eigen::MatrixXd>& h, const GptqOptions& o) {
  const int64_t cols = h.cols();
  std::vector<float> u_rows(cols * cols);
  Eigen::Map<RowMajorF> u(u_rows.data(), cols, cols);
  // U (upper, H⁻¹ = UᵀU) without forming H⁻¹: with J the reversal, J·H·J = L·Lᵀ gives H = V·Vᵀ for
  // the upper-triangular V = J·L·J, so H⁻¹ = V⁻ᵀ·V⁻¹ and U = V⁻¹ (the matrix of the reference's
  // cholesky, cholesky_inverse, cholesky sequence, at less than half its cost).
  const Eigen::LLT<Eigen::MatrixXd> llt(h.reverse());
  if (llt.info() != Eigen::Success) fail("gptq: the damped Hessian ({} columns) is not positive definite", cols);
  const Eigen::MatrixXd v = Eigen::MatrixXd(llt.matrixL()).reverse();
  // U = V⁻¹ column slice by column slice (independent solves, over the cores when allowed).
  const int64_t column_slices = (cols + kGptqSliceRows - 1) / kGptqSliceRows;
  const auto invert_columns = [&](int64_t slice) {
    const int64_t c0 = slice * kGptqSliceRows, n = std::min(kGptqSliceRows, cols - c0);
    u.middleCols(c0, n) = v.triangularView<Eigen::Upper>()
                              .solve(Eigen::MatrixXd::Identity(cols, cols).middleCols(c0, n))
                              .cast<float>();
  };
  run_items(o.parallel_for, column_slices, invert_columns);
  return u_rows;
}

// GPTQ's inputs made ready for the column loop: dead columns (a zero Hessian diagonal: H(j, j) = 1,
// the weight column zeroed), the scales set up front (per channel, or static groups), act-order's
// permutation of the weight's columns and of H, and H's damping. Row-major, the layout the factor
// and a row pass elsewhere take (H is symmetric, so its row-major values are its column-major
// ones); the host's column loop maps them into Eigen's column-major matrices itself.
struct PreparedGptq {
  std::vector<double> h;     // [cols, cols], damped, columns in processing order
  std::vector<float> w;      // [rows, cols], columns in processing order
  std::vector<int64_t> perm;  // perm[k]: the original column processed k-th
};

PreparedGptq prepare_gptq(const float* weight, int64_t rows, int64_t cols, std::vector<double> hessian,
                          const GptqOptions& o, QuantizedMatrix& q, int64_t group_size, bool scales_up_front) {
  const int64_t groups = q.groups_per_row();
  const int64_t row_slices = (rows + kGptqSliceRows - 1) / kGptqSliceRows;
  const auto over_rows = [&](const std::function<void(int64_t row)>& body) {
    run_items(o.parallel_for, row_slices, [&](int64_t slice) {
      for (int64_t r = slice * kGptqSliceRows; r < std::min(rows, (slice + 1) * kGptqSliceRows); ++r) body(r);
    });
  };
  PreparedGptq p{std::move(hessian), std::vector<float>(rows * cols), std::vector<int64_t>(cols)};
  over_rows([&](int64_t r) { std::copy_n(weight + r * cols, cols, p.w.data() + r * cols); });
  std::vector<int64_t> dead;
  for (int64_t j = 0; j < cols; ++j)
    if (p.h[j * cols + j] == 0) {
      p.h[j * cols + j] = 1;
      dead.push_back(j);
    }
  if (!dead.empty())
    over_rows([&](int64_t r) {
      for (int64_t j : dead) p.w[r * cols + j] = 0;
    });
  if (scales_up_front)
    run_items(o.parallel_for, row_slices, [&](int64_t slice) {
      const int64_t row0 = slice * kGptqSliceRows, n = std::min(kGptqSliceRows, rows - row0);
      const auto slice_rows = Eigen::Map<const RowMajorF>(p.w.data(), rows, cols).middleRows(row0, n);
      for (int64_t g = 0; g < groups; ++g)
        set_group_scales(slice_rows, row0, g * group_size, std::min(group_size, cols - g * group_size), g, q);
    });

  std::iota(p.perm.begin(), p.perm.end(), 0);
  if (o.act_order) {
    std::vector<double> diag(cols);
    for (int64_t j = 0; j < cols; ++j) diag[j] = p.h[j * cols + j];
    std::stable_sort(p.perm.begin(), p.perm.end(), [&](int64_t a, int64_t b) { return diag[a] > diag[b]; });
    const std::vector<float> w_natural = std::move(p.w);
    const std::vector<double> h_natural = std::move(p.h);
    p.w.resize(rows * cols);
    p.h.resize(cols * cols);
    over_rows([&](int64_t r) {
      for (int64_t k = 0; k < cols; ++k) p.w[r * cols + k] = w_natural[r * cols + p.perm[k]];
    });
    run_items(o.parallel_for, cols, [&](int64_t k) {
      for (int64_t l = 0; l < cols; ++l) p.h[k * cols + l] = h_natural[p.perm[k] * cols + p.perm[l]];
    });
  }
  Eigen::Map<Eigen::MatrixXd> h(p.h.data(), cols, cols);
  h.diagonal().array() += o.damp_percent * h.diagonal().mean();
  return p;
}

// U of the prepared (damped) Hessian, row-major: by GptqOptions::inverse_factor when given (a GPU's),
// else on the host.
std::vector<float> inverse_factor(const PreparedGptq& p, int64_t cols, const GptqOptions& o) {
  std::vector<float> u;
  if (o.inverse_factor) {
    if (!o.inverse_factor(p.h, cols, u)) fail("gptq: the damped Hessian ({} columns) is not positive definite", cols);
    if (static_cast<int64_t>(u.size()) != cols * cols) fail("internal: gptq factor of {} values", u.size());
    return u;
  }
  return inverse_factor_on_host(Eigen::Map<const Eigen::MatrixXd>(p.h.data(), cols, cols), o);
}

// The row pass elsewhere (GptqOptions::row_pass, a GPU's), on the prepared row-major matrices as
// they are: copying them into Eigen's column-major layout and back had cost more than a GPU's
// factor and row pass together at 2.7b's sizes (docs/kernels/export.md).
// With GptqOptions::factored_row_pass, u is null: the pass makes U from p.h itself.
void row_pass_elsewhere(PreparedGptq& p, const float* u, int64_t rows, int64_t cols, const GptqOptions& o,
                        QuantizedMatrix& q, int64_t group_size, bool scales_up_front) {
  std::vector<int32_t> column_group(cols);
  for (int64_t k = 0; k < cols; ++k) column_group[k] = static_cast<int32_t>(p.perm[k] / group_size);
  std::vector<int8_t> codes(o.act_order ? rows * cols : 0);
  GptqRowPassJob job;
  job.weight = p.w.data();
  job.u = u;
  job.rows = rows;
  job.cols = cols;
  job.block_size = o.block_size;
  job.group_size = group_size;
  job.groups = q.groups_per_row();
  job.bits = o.bits;
  job.dynamic_scales = !scales_up_front;
  job.column_group = column_group.data();
  job.scales = q.scales.data();
  job.values = o.act_order ? codes.data() : q.values.data();  // the natural order needs no mapping back
  if (o.factored_row_pass) {
    if (!o.factored_row_pass(p.h, job)) fail("gptq: the damped Hessian ({} columns) is not positive definite", cols);
  } else {
    o.row_pass(job);
  }
  if (o.act_order)
    run_items(o.parallel_for, rows, [&](int64_t r) {
      for (int64_t k = 0; k < cols; ++k) q.values[r * cols + p.perm[k]] = codes[r * cols + k];
    });
}

QuantizedMatrix gptq_quantize(const float* weight, int64_t rows, int64_t cols, std::vector<double> hessian,
                              const GptqOptions& o) {
  check_options(o, rows, cols, hessian.size());
  // The checks a slice of rows an item (gigabytes at 8B); a failing slice's error is raised.
  run_items(o.parallel_for, (rows + kGptqSliceRows - 1) / kGptqSliceRows, [&](int64_t slice) {
    for (int64_t r = slice * kGptqSliceRows; r < std::min(rows, (slice + 1) * kGptqSliceRows); ++r)
      for (int64_t c = 0; c < cols; ++c)
        if (!std::isfinite(weight[r * cols + c]))
          fail("quantize: gptq weight has a non-finite value {} at row {}, column {}", weight[r * cols + c], r, c);
  });
  run_items(o.parallel_for, (cols + kGptqSliceRows - 1) / kGptqSliceRows, [&](int64_t slice) {
    const size_t end = static_cast<size_t>(std::min(cols, (slice + 1) * kGptqSliceRows) * cols);
    for (size_t i = static_cast<size_t>(slice * kGptqSliceRows * cols); i < end; ++i)
      if (!std::isfinite(hessian[i])) fail("gptq: Hessian entry ({}, {}) is {}", i / cols, i % cols, hessian[i]);
  });

  const bool grouped = o.group_size > 0 && o.group_size < cols;
  const int64_t group_size = grouped ? o.group_size : cols;
  QuantizedMatrix q;
  q.rows = rows;
  q.cols = cols;
  q.bits = o.bits;
  q.granularity = grouped ? Granularity::kPerGroup : Granularity::kPerChannel;
  q.group_size = group_size;
  q.values.assign(rows * cols, 0);
  q.scales.assign(rows * q.groups_per_row(), 1.0f);

  const bool scales_up_front = !grouped || o.static_groups;
  PreparedGptq prepared = prepare_gptq(weight, rows, cols, std::move(hessian), o, q, group_size, scales_up_front);
  if (o.factored_row_pass) {
    row_pass_elsewhere(prepared, nullptr, rows, cols, o, q, group_size, scales_up_front);
    return q;
  }
  const std::vector<float> u_rows = inverse_factor(prepared, cols, o);
  if (o.row_pass) {
    row_pass_elsewhere(prepared, u_rows.data(), rows, cols, o, q, group_size, scales_up_front);
    return q;
  }
  // The host's column loop: each slice of rows copied into a column-major matrix of its own.
  const std::vector<int64_t>& perm = prepared.perm;
  const Eigen::Map<const RowMajorF> w(prepared.w.data(), rows, cols), u(u_rows.data(), cols, cols);

  const int64_t groups = q.groups_per_row();
  // One slice of rows through every column: its own copy of the rows, errors and lazy batches.
  const auto quantize_rows = [&](int64_t slice) {
    const int64_t row0 = slice * kGptqSliceRows, n = std::min(kGptqSliceRows, rows - row0);
    MatrixF ws = w.middleRows(row0, n);
    Eigen::VectorXf err(n);
    for (int64_t i1 = 0; i1 < cols; i1 += o.block_size) {
      const int64_t i2 = std::min(i1 + o.block_size, cols), count = i2 - i1;
      MatrixF block_err(n, count);
      for (int64_t k = i1; k < i2; ++k) {
        const int64_t column = perm[k], group = column / group_size;
        if (!scales_up_front && k % group_size == 0)  // dynamic groups: no act-order, so column == k
          set_group_scales(ws, row0, k, std::min(group_size, cols - k), group, q);
        const float d = u(k, k);
        for (int64_t r = 0; r < n; ++r) {
          const float scale = q.scales[(row0 + r) * groups + group];
          const int8_t value = quantize_value(ws(r, k), scale, o.bits);
          q.values[(row0 + r) * cols + column] = value;
          err[r] = (ws(r, k) - dequantize_value(value, scale)) / d;
        }
        if (k + 1 < i2) ws.middleCols(k + 1, i2 - k - 1).noalias() -= err * u.row(k).segment(k + 1, i2 - k - 1);
        block_err.col(k - i1) = err;
      }
      if (i2 < cols) ws.rightCols(cols - i2).noalias() -= block_err * u.block(i1, i2, count, cols - i2);
    }
  };
  const int64_t slices = (rows + kGptqSliceRows - 1) / kGptqSliceRows;
  run_items(o.parallel_for, slices, quantize_rows);
  return q;
}

}  // namespace ssdq
