#include "model/hadamard.h"

#include <algorithm>
#include <cmath>

#include "formats/error.h"
#include "model/hadamard_base.h"

namespace ssdq {
namespace {

const std::vector<int8_t>& base_matrix(int64_t k) {
  static const std::vector<int8_t> h1 = hadamard_base_matrix(1);
  static const std::vector<int8_t> h12 = hadamard_base_matrix(12);
  static const std::vector<int8_t> h20 = hadamard_base_matrix(20);
  static const std::vector<int8_t> h28 = hadamard_base_matrix(28);
  switch (k) {
    case 1: return h1;
    case 12: return h12;
    case 20: return h20;
    case 28: return h28;
  }
  fail("internal: no Hadamard base matrix of order {}", k);
}

bool is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

int64_t base_order_or_zero(int64_t n) {
  for (int64_t k : {1, 12, 20, 28})
    if (n > 0 && n % k == 0 && is_power_of_two(n / k)) return k;
  return 0;
}

// v·S for the Sylvester matrix S of order `len` (a power of two), in place.
void walsh_hadamard(float* v, int64_t len) {
  for (int64_t h = 1; h < len; h *= 2)
    for (int64_t i = 0; i < len; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
}

}  // namespace

bool hadamard_size_supported(int64_t n) { return base_order_or_zero(n) != 0; }

int64_t hadamard_base_order(int64_t n) {
  const int64_t k = base_order_or_zero(n);
  if (k == 0) fail("no Hadamard matrix of order {}: supported orders are K·2^m with K in 1, 12, 20, 28", n);
  return k;
}

std::vector<int8_t> hadamard_matrix(int64_t n) {
  const int64_t k = hadamard_base_order(n), m = n / k;
  const std::vector<int8_t>& base = base_matrix(k);
  std::vector<int8_t> sylvester(m * m);
  for (int64_t b = 0; b < m; ++b)
    for (int64_t b2 = 0; b2 < m; ++b2) sylvester[b * m + b2] = (__builtin_popcountll(b & b2) % 2) ? -1 : 1;
  std::vector<int8_t> h(n * n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = i / m, b = i % m;
    for (int64_t a2 = 0; a2 < k; ++a2) {
      const int8_t sign = base[a * k + a2];
      int8_t* out = h.data() + i * n + a2 * m;
      for (int64_t b2 = 0; b2 < m; ++b2) out[b2] = static_cast<int8_t>(sign * sylvester[b * m + b2]);
    }
  }
  return h;
}

void apply_hadamard_rows(float* data, int64_t rows, int64_t n, bool normalized) {
  const int64_t k = hadamard_base_order(n), m = n / k;
  if (rows < 0) fail("apply_hadamard_rows: negative row count {}", rows);
  const std::vector<int8_t>& base = base_matrix(k);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  std::vector<float> mixed(k > 1 ? n : 0);
  for (int64_t r = 0; r < rows; ++r) {
    float* x = data + r * n;
    for (int64_t a = 0; a < k; ++a) walsh_hadamard(x + a * m, m);
    if (k > 1) {
      // out block a' = Σ_a H_K[a][a'] · block a
      for (int64_t a2 = 0; a2 < k; ++a2) {
        float* out = mixed.data() + a2 * m;
        for (int64_t b = 0; b < m; ++b) out[b] = 0;
        for (int64_t a = 0; a < k; ++a) {
          const float sign = base[a * k + a2];
          const float* in = x + a * m;
          for (int64_t b = 0; b < m; ++b) out[b] += sign * in[b];
        }
      }
      std::copy(mixed.begin(), mixed.end(), x);
    }
    if (normalized)
      for (int64_t i = 0; i < n; ++i) x[i] *= scale;
  }
}

}  // namespace ssdq
