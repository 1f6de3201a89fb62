// Hadamard matrices of order n = K·2^m, K ∈ {1, 12, 20, 28}, and the fast transform.
//
// Definition (the runtime and the CUDA kernels must use exactly this matrix):
//   H_n = H_K ⊗ S_{2^m}, i.e. H_n[a·2^m + b][a'·2^m + b'] = H_K[a][a'] · S[b][b'],
//   with S the Sylvester matrix S[b][b'] = (-1)^popcount(b & b') and K the first of 1, 12, 20, 28
//   for which n / K is a power of two (so 40·2^m = 20·2^(m+1) uses H_20 ⊗ S_{2^(m+1)}).
//   H_12: Paley I for q = 11; H_20: Paley I for q = 19. Paley I: H = I + [[0, 1ᵀ], [-1, Q]] with
//   the Jacobsthal matrix Q[i][j] = χ(j - i) (χ the quadratic character mod q).
//   H_28: Paley II for q = 13: C = [[0, 1ᵀ], [1, Q]], H = I_14 ⊗ [[1, -1], [-1, -1]] + C ⊗ [[1, 1], [1, -1]].
//   H_K is not symmetric (H_n is not either unless K = 1); H_n·H_nᵀ = n·I.
//
// Transform convention: a row vector x (length n) becomes x·H_n, i.e. out[j] = Σ_i x[i]·H_n[i][j],
// and the normalized transform is x·H_n/√n (orthogonal). The scale is applied once at the end as
// the fp32 value of 1/√n (exact for n a power of 4).
#pragma once

#include <cstdint>
#include <vector>

namespace ssdq {

bool hadamard_size_supported(int64_t n);

// The K of n's decomposition (1, 12, 20 or 28); fails when n is not supported.
int64_t hadamard_base_order(int64_t n);

// Dense H_n, row-major n×n, entries ±1. Fails when n is not supported.
std::vector<int8_t> hadamard_matrix(int64_t n);

// In place: each of `rows` rows of `n` contiguous floats x becomes x·H_n (or x·H_n/√n when
// `normalized`). Walsh-Hadamard butterflies over the 2^m part, then the dense H_K mix.
void apply_hadamard_rows(float* data, int64_t rows, int64_t n, bool normalized);

}  // namespace ssdq
