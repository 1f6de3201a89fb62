// The error measure of every logits comparison in the tests: max |a - b| over max |b|.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace ssdq::testing {

template <typename A, typename B>
double max_relative_difference(const A* a, const B* b, size_t count) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < count; ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

template <typename A, typename B>
double max_relative_difference(const A& a, const B& b) {
  return max_relative_difference(a.data(), b.data(), a.size());
}

}  // namespace ssdq::testing
