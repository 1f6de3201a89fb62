// The check for int8 outputs of kernels whose float part differs from the CPU's in the last bits
// (__expf, rsqrtf, summation order): every value within one step of the CPU's quantization of its
// own floats, and off at all on at most 0.1 % of the elements (at least one is allowed).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "model/quantizer.h"

namespace ssdq::testing {

// scale_of(i) is the quantization scale of element i.
template <typename ScaleOf>
void expect_int8_within_one_step(const std::vector<int8_t>& got, const std::vector<float>& cpu_values,
                                 ScaleOf scale_of) {
  ASSERT_EQ(got.size(), cpu_values.size());
  int64_t off_by_one = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const int want = quantize_value(cpu_values[i], scale_of(i), QuantBits::kInt8);
    ASSERT_LE(std::abs(got[i] - want), 1) << "element " << i;
    off_by_one += got[i] != want;
  }
  EXPECT_LE(off_by_one, std::max<int64_t>(1, int64_t(got.size()) / 1000)) << off_by_one << " of " << got.size();
}

}  // namespace ssdq::testing
