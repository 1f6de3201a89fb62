// The base matrices H_K (K 1, 12, 20, 28) of model/hadamard.h, entry by entry and constexpr, so
// host code builds them from the same definition that CUDA kernels unroll at compile time.
//   H_12, H_20: Paley I for q = 11, 19: H = I + [[0, 1ᵀ], [-1, Q]], Q[i][j] = χ(j - i).
//   H_28: Paley II for q = 13: C = [[0, 1ᵀ], [1, Q]], H = I_14 ⊗ [[1, -1], [-1, -1]] + C ⊗ [[1, 1], [1, -1]].
#pragma once

#include <cstdint>
#include <vector>

namespace ssdq {

// Quadratic character of a mod the prime q: 0, 1 (a non-zero square) or -1.
constexpr int quadratic_character(long long a, long long q) {
  a = ((a % q) + q) % q;
  if (a == 0) return 0;
  for (long long x = 1; x < q; ++x)
    if (x * x % q == a) return 1;
  return -1;
}

// Paley construction I, q prime with q ≡ 3 (mod 4): entry (i, j) of the matrix of order q + 1.
constexpr int paley_one_entry(int q, int i, int j) {
  const int s = i == 0 ? (j == 0 ? 0 : 1) : j == 0 ? -1 : quadratic_character(j - i, q);
  return (i == j ? 1 : 0) + s;
}

// Paley construction II, q prime with q ≡ 1 (mod 4): entry (i, j) of the matrix of order 2(q + 1).
constexpr int paley_two_entry(int q, int i, int j) {
  const int bi = i / 2, bj = j / 2, r = i % 2, s = j % 2;
  if (bi == bj) return r == 0 && s == 0 ? 1 : -1;  // [[1, -1], [-1, -1]]
  const int c = (bi == 0 || bj == 0) ? 1 : quadratic_character(bj - bi, q);
  return r == 1 && s == 1 ? -c : c;  // c·[[1, 1], [1, -1]]
}

// H_K[i][j] (±1) for K in 1, 12, 20, 28; 0 for any other K.
constexpr int hadamard_base_entry(int k, int i, int j) {
  switch (k) {
    case 1: return 1;
    case 12: return paley_one_entry(11, i, j);
    case 20: return paley_one_entry(19, i, j);
    case 28: return paley_two_entry(13, i, j);
    default: return 0;
  }
}

// H_K row-major as ±1 bytes (host code).
inline std::vector<int8_t> hadamard_base_matrix(int k) {
  std::vector<int8_t> h(static_cast<size_t>(k) * k);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) h[i * k + j] = static_cast<int8_t>(hadamard_base_entry(k, i, j));
  return h;
}

}  // namespace ssdq
