// Hadamard matrices K·2^m: orthogonality for every order the real models use, the Kronecker
// convention, and the fast transform against the dense product.
#include "model/hadamard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "formats/error.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;

const int64_t kModelOrders[] = {12, 20, 28, 40, 256, 384, 512, 768, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 8192};

// Applies the fast transform to every row of the identity (transpose = false) or of Hᵀ
// (transpose = true) and checks row i of the result against expected(i, j). Sums of ±1 are exact
// in fp32 here (|sum| <= n < 2^24), so the comparison is exact.
template <typename Expected>
bool transformed_rows_match(const std::vector<int8_t>& h, int64_t n, bool transpose, const Expected& expected) {
  constexpr int64_t kBlock = 64;
  std::vector<float> block;
  for (int64_t first = 0; first < n; first += kBlock) {
    const int64_t rows = std::min(kBlock, n - first);
    block.assign(rows * n, 0.0f);
    if (transpose) {
      for (int64_t j = 0; j < n; ++j)
        for (int64_t r = 0; r < rows; ++r) block[r * n + j] = h[j * n + first + r];
    } else {
      for (int64_t r = 0; r < rows; ++r) block[r * n + first + r] = 1.0f;
    }
    apply_hadamard_rows(block.data(), rows, n, false);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        if (block[r * n + j] != expected(first + r, j)) return false;
  }
  return true;
}

TEST(Hadamard, SupportedOrders) {
  for (int64_t n : {1, 2, 4, 8, 12, 20, 24, 28, 40, 48, 56, 80, 96, 112, 160})
    EXPECT_TRUE(hadamard_size_supported(n)) << n;
  for (int64_t n : {0, -4, 3, 6, 10, 14, 36, 44, 60, 100, 1000})
    EXPECT_FALSE(hadamard_size_supported(n)) << n;
  EXPECT_EQ(hadamard_base_order(2560), 20);
  EXPECT_EQ(hadamard_base_order(40), 20);
  EXPECT_EQ(hadamard_base_order(768), 12);
  EXPECT_EQ(hadamard_base_order(3584), 28);
  EXPECT_EQ(hadamard_base_order(4096), 1);
  EXPECT_THAT([] { hadamard_matrix(36); },
              ::testing::ThrowsMessage<Error>(HasSubstr("no Hadamard matrix of order 36")));
  std::vector<float> row(44);
  EXPECT_THAT([&] { apply_hadamard_rows(row.data(), 1, 44, true); },
              ::testing::ThrowsMessage<Error>(HasSubstr("no Hadamard matrix of order 44")));
}

// Exact checks for every order the models use: the fast transform of the identity is the dense
// H (so fast == dense on every basis vector), and the fast transform of Hᵀ's rows is Hᵀ·H = n·I,
// which for a square matrix is the same as H·Hᵀ = n·I.
TEST(Hadamard, FastTransformIsDenseMatrixAndOrthogonalForEveryModelOrder) {
  for (int64_t n : kModelOrders) {
    const std::vector<int8_t> h = hadamard_matrix(n);
    ASSERT_EQ(static_cast<int64_t>(h.size()), n * n);
    for (int8_t v : h) ASSERT_TRUE(v == 1 || v == -1) << n;
    EXPECT_TRUE(transformed_rows_match(h, n, false, [&](int64_t i, int64_t j) { return static_cast<float>(h[i * n + j]); }))
        << "the fast transform is not x·H for n = " << n;
    EXPECT_TRUE(transformed_rows_match(h, n, true, [&](int64_t i, int64_t j) { return i == j ? static_cast<float>(n) : 0.0f; }))
        << "Hᵀ·H != n·I for n = " << n;
  }
}

TEST(Hadamard, SmallOrdersHaveExactGram) {
  for (int64_t n : {1, 2, 4, 12, 20, 24, 28, 56}) {
    const std::vector<int8_t> h = hadamard_matrix(n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t dot = 0;
        for (int64_t k = 0; k < n; ++k) dot += h[i * n + k] * h[j * n + k];
        ASSERT_EQ(dot, i == j ? n : 0) << n << ": " << i << "," << j;
      }
  }
}

TEST(Hadamard, KroneckerConvention) {
  // H_40 = H_20 ⊗ S_2: entry (a·2 + b, a'·2 + b') = H_20[a][a'] · (-1)^(b & b').
  const std::vector<int8_t> h40 = hadamard_matrix(40), h20 = hadamard_matrix(20);
  for (int64_t i = 0; i < 40; ++i)
    for (int64_t j = 0; j < 40; ++j)
      ASSERT_EQ(h40[i * 40 + j], h20[(i / 2) * 20 + j / 2] * ((i % 2) & (j % 2) ? -1 : 1)) << i << "," << j;
  // Sylvester part: H_4[i][j] = (-1)^popcount(i & j).
  EXPECT_EQ(hadamard_matrix(4), (std::vector<int8_t>{1, 1, 1, 1, 1, -1, 1, -1, 1, 1, -1, -1, 1, -1, -1, 1}));
}

TEST(Hadamard, FastTransformOfRandomRowsMatchesDenseProduct) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t n : kModelOrders) {
    const std::vector<int8_t> h = hadamard_matrix(n);
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    std::vector<double> dense(n, 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) dense[j] += static_cast<double>(x[i]) * h[i * n + j];
    for (bool normalized : {false, true}) {
      std::vector<float> fast = x;
      apply_hadamard_rows(fast.data(), 1, n, normalized);
      const double scale = normalized ? 1.0 / std::sqrt(static_cast<double>(n)) : 1.0;
      double max_diff = 0, max_ref = 0, norm_in = 0, norm_out = 0;
      for (int64_t j = 0; j < n; ++j) {
        max_diff = std::max(max_diff, std::abs(dense[j] * scale - fast[j]));
        max_ref = std::max(max_ref, std::abs(dense[j] * scale));
        norm_in += static_cast<double>(x[j]) * x[j];
        norm_out += static_cast<double>(fast[j]) * fast[j];
      }
      EXPECT_LT(max_diff / max_ref, 1e-5) << "n = " << n << (normalized ? " normalized" : "");
      if (normalized) {
        EXPECT_NEAR(norm_out / norm_in, 1.0, 1e-5) << n;
      }
    }
  }
}

}  // namespace
}  // namespace ssdq
