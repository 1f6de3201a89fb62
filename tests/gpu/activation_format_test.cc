// Activation formats on the device (kernels/activation_format.h) against the CPU's
// apply_activation_format: fp16 rounding, int8 with one scale and with a per-channel index map,
// bit for bit, and the int8 / fp16 copies written for the GEMMs.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/activation_format.h"
#include "model/quantized_model.h"
#include "runtime/quantized_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

using Format = kernels::ActivationFormatArgs::Format;

void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0 && mismatches++ < 5)
      ADD_FAILURE() << "element " << i << ": GPU " << got[i] << " vs CPU " << want[i];
  EXPECT_EQ(mismatches, 0);
}

struct Case {
  const char* name;
  ActQuant format;
  int64_t rows, width, stride;
};

class ActivationFormat : public ::testing::TestWithParam<int> {};

TEST_P(ActivationFormat, MatchesTheCpuBitForBit) {
  testing::require_device();
  const std::vector<Case> cases = {
      {"fp16", ActQuant::float16(), 37, 300, 310},
      {"int8 per tensor", ActQuant{ActFormat::kInt8, {0.0123f}, {}, 1}, 64, 256, 256},
      {"int8 per segment", ActQuant{ActFormat::kInt8, {0.01f, 0.05f, 0.2f}, {}, 1}, 20, 96, 100},
  };
  Case c = cases[GetParam()];
  if (c.format.scales.size() == 3) {  // x | B | C segments of 64, 16, 16 channels
    c.format.index.resize(c.width);
    for (int64_t ch = 0; ch < c.width; ++ch) c.format.index[ch] = ch < 64 ? 0 : (ch < 80 ? 1 : 2);
  }
  std::mt19937 rng(7 + GetParam());
  // Values reaching past the int8 range (saturation) and fp16's (overflow to inf), with exact halves.
  std::vector<float> data = testing::random_vector(c.rows * c.stride, -4.f, 4.f, rng);
  data[0] = 70000.f;
  data[1] = 0.0123f * 2.5f;
  std::vector<float> want = data;
  apply_activation_format(c.format, want.data(), c.rows, c.width, c.stride);

  testing::DeviceBuffer<float> d_data(data), d_scales(c.format.scales.empty() ? std::vector<float>{1.f} : c.format.scales);
  testing::DeviceBuffer<int32_t> d_index(c.format.index.empty() ? std::vector<int32_t>{0} : c.format.index);
  testing::DeviceBuffer<int8_t> d_q(std::vector<int8_t>(c.rows * c.width));
  testing::DeviceBuffer<uint16_t> d_h(std::vector<uint16_t>(c.rows * c.width));
  kernels::ActivationFormatArgs a;
  a.rows = c.rows;
  a.width = static_cast<int>(c.width);
  a.data = d_data.get();
  a.stride = c.stride;
  const bool int8 = c.format.is_int8();
  a.format = int8 ? Format::kInt8 : Format::kFloat16;
  a.scales = int8 ? d_scales.get() : nullptr;
  a.index = c.format.index.empty() ? nullptr : d_index.get();
  a.q_out = int8 ? d_q.get() : nullptr;
  a.q_stride = c.width;
  a.h_out = reinterpret_cast<__half*>(d_h.get());
  a.h_stride = c.width;
  ASSERT_TRUE(kernels::activation_format_supported(a));
  ASSERT_EQ(kernels::launch_activation_format(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_bits_equal(d_data.to_host(), want);

  const std::vector<int8_t> q = d_q.to_host();
  const std::vector<uint16_t> h = d_h.to_host();
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t ch = 0; ch < c.width; ++ch) {
      const float v = want[r * c.stride + ch];
      if (int8) {
        ASSERT_EQ(q[r * c.width + ch], quantize_value(v, c.format.scale(ch), QuantBits::kInt8)) << r << "," << ch;
      }
      ASSERT_EQ(h[r * c.width + ch], float_to_half(v)) << r << "," << ch;
    }
}

INSTANTIATE_TEST_SUITE_P(Formats, ActivationFormat, ::testing::Values(0, 1, 2));

TEST(ActivationFormat, RefusesMissingScalesAndNarrowStrides) {
  float dummy[8];
  kernels::ActivationFormatArgs a;
  a.rows = 1;
  a.width = 8;
  a.data = dummy;
  a.stride = 8;
  a.format = Format::kInt8;
  EXPECT_FALSE(kernels::activation_format_supported(a));  // int8 without scales
  a.scales = dummy;
  EXPECT_TRUE(kernels::activation_format_supported(a));
  a.stride = 4;
  EXPECT_FALSE(kernels::activation_format_supported(a));
  a.stride = 8;
  a.format = Format::kFloat16;
  a.q_out = reinterpret_cast<int8_t*>(dummy);
  a.q_stride = 8;
  EXPECT_FALSE(kernels::activation_format_supported(a));  // int8 values of an fp16 point
}

}  // namespace
}  // namespace ssdq
