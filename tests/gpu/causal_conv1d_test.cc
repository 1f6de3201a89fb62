// Causal conv1d + SiLU against cpu::causal_conv1d_silu: lengths around the 64-token tile and
// below the kernel width, a non-zero starting state, strided input rows, and the state after.
#include "kernels/causal_conv1d.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "formats/dtype.h"
#include "model/quantizer.h"
#include "runtime/cpu_ops.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/int8_check.h"

namespace ssdq {
namespace {

struct Case {
  int batch, seqlen, channels, width;
};

class CausalConv1d : public ::testing::TestWithParam<Case> {};

TEST_P(CausalConv1d, MatchesCpuReference) {
  testing::require_device();
  const Case c = GetParam();
  std::mt19937 rng(c.seqlen * 13 + c.channels);
  const int64_t stride = c.channels + 7;  // the conv input is a column slice of a wider row
  const int hist = c.width - 1;
  auto input = testing::bf16_rounded(testing::random_vector(size_t(c.batch) * c.seqlen * stride, -2.f, 2.f, rng));
  auto state = testing::bf16_rounded(testing::random_vector(size_t(c.batch) * c.channels * hist, -2.f, 2.f, rng));
  auto weight = testing::random_vector(size_t(c.channels) * c.width, -0.5f, 0.5f, rng);
  auto bias = testing::random_vector(c.channels, -0.2f, 0.2f, rng);
  std::vector<float> expected(size_t(c.batch) * c.seqlen * c.channels), expected_state = state;
  for (int b = 0; b < c.batch; ++b)
    cpu::causal_conv1d_silu(input.data() + int64_t(b) * c.seqlen * stride, stride, c.seqlen, c.channels, c.width,
                            weight.data(), bias.data(), expected_state.data() + int64_t(b) * c.channels * hist,
                            expected.data() + int64_t(b) * c.seqlen * c.channels);
  testing::DeviceBuffer<uint16_t> d_in(testing::to_bf16(input)), d_state(testing::to_bf16(state)),
      d_out(std::vector<uint16_t>(expected.size()));
  testing::DeviceBuffer<float> d_w(weight), d_b(bias);
  kernels::CausalConv1dArgs args;
  args.batch = c.batch;
  args.seqlen = c.seqlen;
  args.channels = c.channels;
  args.width = c.width;
  args.in = testing::as_bf16(d_in);
  args.in_stride = stride;
  args.weight = d_w.get();
  args.bias = d_b.get();
  args.state = testing::as_bf16(d_state);
  args.out = testing::as_bf16(d_out);
  ASSERT_EQ(kernels::launch_causal_conv1d(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(testing::max_relative_error(testing::from_bf16(d_out.to_host()), expected, 0.05), 1e-2);
  EXPECT_EQ(testing::from_bf16(d_state.to_host()), testing::bf16_rounded(expected_state));
}

// fp32 in and out (the quantized backend's float activations): the same sums in the same order,
// the state kept exactly; only silu's exp differs from libm.
TEST_P(CausalConv1d, Float32InputsMatchCpuReference) {
  testing::require_device();
  const Case c = GetParam();
  std::mt19937 rng(c.seqlen * 17 + c.channels);
  const int64_t stride = c.channels + 5;
  const int hist = c.width - 1;
  auto input = testing::random_vector(size_t(c.batch) * c.seqlen * stride, -2.f, 2.f, rng);
  auto state = testing::random_vector(size_t(c.batch) * c.channels * hist, -2.f, 2.f, rng);
  auto weight = testing::random_vector(size_t(c.channels) * c.width, -0.5f, 0.5f, rng);
  auto bias = testing::random_vector(c.channels, -0.2f, 0.2f, rng);
  std::vector<float> expected(size_t(c.batch) * c.seqlen * c.channels), expected_state = state;
  for (int b = 0; b < c.batch; ++b)
    cpu::causal_conv1d_silu(input.data() + int64_t(b) * c.seqlen * stride, stride, c.seqlen, c.channels, c.width,
                            weight.data(), bias.data(), expected_state.data() + int64_t(b) * c.channels * hist,
                            expected.data() + int64_t(b) * c.seqlen * c.channels);
  testing::DeviceBuffer<float> d_in(input), d_state(state), d_out(std::vector<float>(expected.size())), d_w(weight),
      d_b(bias);
  kernels::CausalConv1dArgs args;
  args.batch = c.batch;
  args.seqlen = c.seqlen;
  args.channels = c.channels;
  args.width = c.width;
  args.in = d_in.get();
  args.in_stride = stride;
  args.weight = d_w.get();
  args.bias = d_b.get();
  args.state = d_state.get();
  args.out = d_out.get();
  args.in_type = kernels::ElementType::kF32;
  args.out_type = kernels::ElementType::kF32;
  ASSERT_EQ(kernels::launch_causal_conv1d(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(testing::max_relative_error(d_out.to_host(), expected, 1e-3), 1e-5);
  EXPECT_EQ(d_state.to_host(), expected_state);
}

// fp32 with per-channel formats (the quantized backend's conv.in before and ssd.x | B | C after
// the conv): a third of the channels int8, a third fp16, a third as is. The state keeps the
// formatted inputs. Outputs within one quantization step (silu's exp), rarely off at all.
TEST_P(CausalConv1d, Float32WithFormatsMatchesCpuReference) {
  testing::require_device();
  const Case c = GetParam();
  std::mt19937 rng(c.seqlen * 19 + c.channels);
  const int64_t stride = c.channels + 3;
  const int hist = c.width - 1;
  std::vector<float> in_codes(c.channels), out_codes(c.channels);
  for (int ch = 0; ch < c.channels; ++ch) {
    const int kind = ch % 3;
    in_codes[ch] = kind == 0 ? 0.02f + 0.001f * (ch % 7) : kind == 1 ? -1.f : 0.f;
    out_codes[ch] = kind == 2 ? 0.01f + 0.0005f * (ch % 5) : kind == 0 ? -1.f : 0.f;
  }
  auto format = [](float v, float code) {
    return code > 0 ? dequantize_value(quantize_value(v, code, QuantBits::kInt8), code)
                    : code < 0 ? half_to_float(float_to_half(v)) : v;
  };
  auto input = testing::random_vector(size_t(c.batch) * c.seqlen * stride, -2.f, 2.f, rng);
  auto state = testing::random_vector(size_t(c.batch) * c.channels * hist, -2.f, 2.f, rng);
  for (size_t i = 0; i < state.size(); ++i) state[i] = format(state[i], in_codes[(i / hist) % c.channels]);
  auto weight = testing::random_vector(size_t(c.channels) * c.width, -0.5f, 0.5f, rng);
  auto bias = testing::random_vector(c.channels, -0.2f, 0.2f, rng);
  std::vector<float> formatted = input;
  for (size_t i = 0; i < formatted.size(); ++i)
    if (int64_t(i % stride) < c.channels) formatted[i] = format(formatted[i], in_codes[i % stride]);
  std::vector<float> expected(size_t(c.batch) * c.seqlen * c.channels), expected_state = state;
  for (int b = 0; b < c.batch; ++b)
    cpu::causal_conv1d_silu(formatted.data() + int64_t(b) * c.seqlen * stride, stride, c.seqlen, c.channels, c.width,
                            weight.data(), bias.data(), expected_state.data() + int64_t(b) * c.channels * hist,
                            expected.data() + int64_t(b) * c.seqlen * c.channels);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = format(expected[i], out_codes[i % c.channels]);
  testing::DeviceBuffer<float> d_in(input), d_state(state), d_out(std::vector<float>(expected.size())), d_w(weight),
      d_b(bias), d_in_codes(in_codes), d_out_codes(out_codes);
  kernels::CausalConv1dArgs args;
  args.batch = c.batch;
  args.seqlen = c.seqlen;
  args.channels = c.channels;
  args.width = c.width;
  args.in = d_in.get();
  args.in_stride = stride;
  args.weight = d_w.get();
  args.bias = d_b.get();
  args.state = d_state.get();
  args.out = d_out.get();
  args.in_type = kernels::ElementType::kF32;
  args.out_type = kernels::ElementType::kF32;
  args.in_formats = d_in_codes.get();
  args.out_formats = d_out_codes.get();
  ASSERT_EQ(kernels::launch_causal_conv1d(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(d_state.to_host(), expected_state);
  const std::vector<float> got = d_out.to_host();
  int64_t off = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float code = out_codes[i % c.channels];
    const double step = code > 0 ? code : 1e-3 * std::abs(expected[i]) + 1e-6;
    ASSERT_LE(std::abs(double(got[i]) - expected[i]), step * 1.0001) << "element " << i;
    off += got[i] != expected[i] && code > 0;
  }
  EXPECT_LE(off, std::max<int64_t>(1, int64_t(got.size()) / 1000));
}

// The quantized conv: int8 inputs with per-channel scales (three x | B | C segments) and an int8
// state, int8 outputs with per-channel scales (or fp16). The CPU runs on the dequantized values and
// quantizes its output; the float sums are in the same order, but the GPU's exp differs from libm
// in the last bit, so an output next to a rounding boundary may land one step away — rarely.
TEST_P(CausalConv1d, Int8InputsAndOutputsMatchTheCpuSpecification) {
  testing::require_device();
  const Case c = GetParam();
  std::mt19937 rng(c.seqlen * 7 + c.channels + 1);
  const int64_t stride = c.channels + 9;
  const int hist = c.width - 1;
  std::uniform_int_distribution<int> q_dist(-127, 127);
  std::vector<int8_t> q_in(size_t(c.batch) * c.seqlen * stride), q_state(size_t(c.batch) * c.channels * hist);
  for (auto& q : q_in) q = static_cast<int8_t>(q_dist(rng));
  for (auto& q : q_state) q = static_cast<int8_t>(q_dist(rng));
  const float segment_scales[3] = {0.021f, 0.0087f, 0.0133f}, out_segment_scales[3] = {0.0061f, 0.0042f, 0.0079f};
  std::vector<float> in_scales(c.channels), out_scales(c.channels);
  for (int ch = 0; ch < c.channels; ++ch) {
    const int segment = std::min(2, 3 * ch / c.channels);
    in_scales[ch] = segment_scales[segment];
    out_scales[ch] = out_segment_scales[segment];
  }
  std::vector<float> input(q_in.size()), state(q_state.size());
  for (size_t i = 0; i < q_in.size(); ++i) input[i] = dequantize_value(q_in[i], in_scales[i % stride < size_t(c.channels) ? i % stride : 0]);
  for (size_t i = 0; i < q_state.size(); ++i) state[i] = dequantize_value(q_state[i], in_scales[(i / hist) % c.channels]);
  auto weight = testing::random_vector(size_t(c.channels) * c.width, -0.5f, 0.5f, rng);
  auto bias = testing::random_vector(c.channels, -0.2f, 0.2f, rng);
  std::vector<float> expected(size_t(c.batch) * c.seqlen * c.channels), expected_state = state;
  for (int b = 0; b < c.batch; ++b)
    cpu::causal_conv1d_silu(input.data() + int64_t(b) * c.seqlen * stride, stride, c.seqlen, c.channels, c.width,
                            weight.data(), bias.data(), expected_state.data() + int64_t(b) * c.channels * hist,
                            expected.data() + int64_t(b) * c.seqlen * c.channels);
  for (bool int8_out : {true, false}) {
    testing::DeviceBuffer<int8_t> d_in(q_in), d_state(q_state), d_out8(std::vector<int8_t>(expected.size()));
    testing::DeviceBuffer<uint16_t> d_out16(std::vector<uint16_t>(expected.size()));
    testing::DeviceBuffer<float> d_w(weight), d_b(bias), d_in_scales(in_scales), d_out_scales(out_scales);
    kernels::CausalConv1dArgs args;
    args.batch = c.batch;
    args.seqlen = c.seqlen;
    args.channels = c.channels;
    args.width = c.width;
    args.in = d_in.get();
    args.in_stride = stride;
    args.weight = d_w.get();
    args.bias = d_b.get();
    args.state = d_state.get();
    args.in_type = kernels::ElementType::kS8;
    args.in_scales = d_in_scales.get();
    args.out_type = int8_out ? kernels::ElementType::kS8 : kernels::ElementType::kF16;
    args.out_scales = d_out_scales.get();
    args.out = int8_out ? static_cast<void*>(d_out8.get()) : static_cast<void*>(d_out16.get());
    ASSERT_TRUE(kernels::causal_conv1d_supported(args));
    ASSERT_EQ(kernels::launch_causal_conv1d(args, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<int8_t> new_state = d_state.to_host();
    for (size_t i = 0; i < new_state.size(); ++i)
      ASSERT_EQ(dequantize_value(new_state[i], in_scales[(i / hist) % c.channels]), expected_state[i]) << "state " << i;
    if (int8_out) {
      testing::expect_int8_within_one_step(d_out8.to_host(), expected,
                                           [&](size_t i) { return out_scales[i % c.channels]; });
    } else {
      const std::vector<uint16_t> got = d_out16.to_host();
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(half_to_float(got[i]), expected[i], 1e-3f * std::abs(expected[i]) + 1e-6f) << "element " << i;
    }
  }
}

// Tokens per thread only split the work: every tile size gives the same outputs and state.
TEST(CausalConv1dTiles, EveryTileSizeGivesTheSameBits) {
  testing::require_device();
  const int batch = 2, seqlen = 300, channels = 1792, width = 4;
  std::mt19937 rng(23);
  std::vector<float> codes(channels);
  for (int ch = 0; ch < channels; ++ch) codes[ch] = ch % 2 ? 0.02f + 0.001f * (ch % 7) : -1.f;
  const auto input = testing::random_vector(size_t(batch) * seqlen * channels, -2.f, 2.f, rng);
  const auto state = testing::random_vector(size_t(batch) * channels * (width - 1), -2.f, 2.f, rng);
  testing::DeviceBuffer<float> d_in(input), d_w(testing::random_vector(size_t(channels) * width, -0.5f, 0.5f, rng)),
      d_b(testing::random_vector(channels, -0.2f, 0.2f, rng)), d_codes(codes);
  std::vector<float> first_out, first_state;
  for (int tile : {64, 32, 16}) {
    testing::DeviceBuffer<float> d_state(state), d_out(std::vector<float>(size_t(batch) * seqlen * channels));
    kernels::CausalConv1dArgs args;
    args.batch = batch;
    args.seqlen = seqlen;
    args.channels = channels;
    args.width = width;
    args.in = d_in.get();
    args.in_stride = channels;
    args.weight = d_w.get();
    args.bias = d_b.get();
    args.state = d_state.get();
    args.out = d_out.get();
    args.in_type = args.out_type = kernels::ElementType::kF32;
    args.in_formats = args.out_formats = d_codes.get();
    args.tile_tokens = tile;
    ASSERT_EQ(kernels::launch_causal_conv1d(args, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (tile == 64) {
      first_out = d_out.to_host();
      first_state = d_state.to_host();
    } else {
      EXPECT_EQ(d_out.to_host(), first_out) << "tile " << tile;
      EXPECT_EQ(d_state.to_host(), first_state) << "tile " << tile;
    }
  }
  kernels::CausalConv1dArgs bad;
  bad.tile_tokens = 48;
  EXPECT_FALSE(kernels::causal_conv1d_supported(bad));
}

// An fp32-input conv over device buffers (no state, output or formats yet).
kernels::CausalConv1dArgs fp32_conv(int batch, int seqlen, int channels, int width, const float* in, int64_t in_stride,
                                    const float* weight, const float* bias) {
  kernels::CausalConv1dArgs args;
  args.batch = batch;
  args.seqlen = seqlen;
  args.channels = channels;
  args.width = width;
  args.in = in;
  args.in_stride = in_stride;
  args.weight = weight;
  args.bias = bias;
  args.in_type = args.out_type = kernels::ElementType::kF32;
  return args;
}

// Three output parts over padded device rows: fp16 x = channels [0, x_end), int8 B|C = [x_end,
// bc_end), fp32 for the rest; filled with markers a conv must not leave behind.
struct ThreeParts {
  ThreeParts(int64_t rows, int channels, int x_end, int bc_end)
      : x_end(x_end), bc_end(bc_end), x_stride(x_end + 8), bc_stride(bc_end - x_end + 16), f_stride(channels - bc_end + 3),
        x(std::vector<uint16_t>(size_t(rows) * x_stride, 0x7e00)),
        bc(std::vector<int8_t>(size_t(rows) * bc_stride, 0x55)),
        f(std::vector<float>(size_t(rows) * f_stride, -7.f)) {}
  void attach(kernels::CausalConv1dArgs& a) {
    a.out = nullptr;
    a.part_count = 3;
    a.parts[0] = {x.get(), 0, x_stride, kernels::ElementType::kF16};
    a.parts[1] = {bc.get(), x_end, bc_stride, kernels::ElementType::kS8};
    a.parts[2] = {f.get(), bc_end, f_stride, kernels::ElementType::kF32};
  }
  int x_end, bc_end;
  int64_t x_stride, bc_stride, f_stride;
  testing::DeviceBuffer<uint16_t> x;
  testing::DeviceBuffer<int8_t> bc;
  testing::DeviceBuffer<float> f;
};

// Output parts (the SSDi8 prefill's fp16 x and int8 B|C): the same values as the one fp32 output
// with formats, bit for bit — fp16 channels as their fp16, int8 channels as q with q·code equal to
// the formatted value, fp32 channels as they are — and the same state.
TEST(CausalConv1dParts, EqualTheFormattedOutput) {
  testing::require_device();
  struct Shape {
    int batch, seqlen, channels, x_end, bc_end;
  };
  for (const Shape sh : {Shape{2, 300, 1344, 1024, 1280}, Shape{3, 1, 200, 72, 136}, Shape{1, 70, 100, 40, 90}}) {
    const int width = 4, hist = width - 1;
    std::mt19937 rng(sh.seqlen + sh.channels);
    std::vector<float> codes(sh.channels);
    for (int ch = 0; ch < sh.channels; ++ch)
      codes[ch] = ch < sh.x_end ? -1.f : ch < sh.bc_end ? 0.004f + 0.0003f * (ch % 11) : (ch % 3 == 0 ? 0.f : -1.f);
    const int64_t rows = int64_t(sh.batch) * sh.seqlen;
    const auto input = testing::random_vector(size_t(rows) * sh.channels, -2.f, 2.f, rng);
    const auto state = testing::random_vector(size_t(sh.batch) * sh.channels * hist, -2.f, 2.f, rng);
    testing::DeviceBuffer<float> d_in(input), d_w(testing::random_vector(size_t(sh.channels) * width, -0.5f, 0.5f, rng)),
        d_b(testing::random_vector(sh.channels, -0.2f, 0.2f, rng)), d_codes(codes);
    kernels::CausalConv1dArgs args =
        fp32_conv(sh.batch, sh.seqlen, sh.channels, width, d_in.get(), sh.channels, d_w.get(), d_b.get());
    args.out_formats = d_codes.get();

    testing::DeviceBuffer<float> ref_state(state), ref_out(std::vector<float>(size_t(rows) * sh.channels));
    kernels::CausalConv1dArgs one = args;
    one.state = ref_state.get();
    one.out = ref_out.get();
    ASSERT_EQ(kernels::launch_causal_conv1d(one, nullptr), cudaSuccess);

    testing::DeviceBuffer<float> parts_state(state);
    ThreeParts out(rows, sh.channels, sh.x_end, sh.bc_end);
    kernels::CausalConv1dArgs split = args;
    split.state = parts_state.get();
    out.attach(split);
    ASSERT_TRUE(kernels::causal_conv1d_supported(split));
    ASSERT_EQ(kernels::launch_causal_conv1d(split, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    EXPECT_EQ(parts_state.to_host(), ref_state.to_host());
    const std::vector<float> ref = ref_out.to_host(), f = out.f.to_host();
    const std::vector<uint16_t> x = out.x.to_host();
    const std::vector<int8_t> bc = out.bc.to_host();
    int64_t differ = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int ch = 0; ch < sh.channels; ++ch) {
        const float want = ref[r * sh.channels + ch];
        float got;
        if (ch < sh.x_end) {
          got = half_to_float(x[r * out.x_stride + ch]);
        } else if (ch < sh.bc_end) {
          got = dequantize_value(bc[r * out.bc_stride + ch - sh.x_end], codes[ch]);
        } else {
          got = f[r * out.f_stride + ch - sh.bc_end];
        }
        differ += std::memcmp(&got, &want, sizeof(float)) != 0;
      }
    EXPECT_EQ(differ, 0) << sh.batch << " × " << sh.seqlen << " tokens, " << sh.channels << " channels";

    // One fp16 part over every channel (the chunked SSD's operands for the float-SSD recipes): the
    // formatted values rounded to fp16.
    testing::DeviceBuffer<float> f16_state(state);
    testing::DeviceBuffer<uint16_t> f16_out(std::vector<uint16_t>(size_t(rows) * sh.channels, 0x7e00));
    kernels::CausalConv1dArgs whole_f16 = args;
    whole_f16.state = f16_state.get();
    whole_f16.part_count = 1;
    whole_f16.parts[0] = {f16_out.get(), 0, sh.channels, kernels::ElementType::kF16};
    ASSERT_EQ(kernels::launch_causal_conv1d(whole_f16, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(f16_state.to_host(), ref_state.to_host());
    const std::vector<uint16_t> f16 = f16_out.to_host();
    int64_t f16_differ = 0;
    for (size_t i = 0; i < ref.size(); ++i) f16_differ += f16[i] != float_to_half(ref[i]);
    EXPECT_EQ(f16_differ, 0) << "fp16 part, " << sh.batch << " × " << sh.seqlen << " tokens";

    struct Bad {
      const char* why;
      void (*edit)(kernels::CausalConv1dArgs&);
    };
    const Bad bad[] = {
        {"out set as well", [](kernels::CausalConv1dArgs& a) { a.out = a.parts[0].out; }},
        {"first part not at channel 0", [](kernels::CausalConv1dArgs& a) { a.parts[0].first_channel = 1; }},
        {"parts out of order", [](kernels::CausalConv1dArgs& a) { a.parts[2].first_channel = a.parts[1].first_channel; }},
        {"stride below the part", [](kernels::CausalConv1dArgs& a) { a.parts[1].stride = 1; }},
        {"int8 part without formats", [](kernels::CausalConv1dArgs& a) { a.out_formats = nullptr; }},
        {"bf16 part", [](kernels::CausalConv1dArgs& a) { a.parts[2].type = kernels::ElementType::kBF16; }},
        {"no part pointer", [](kernels::CausalConv1dArgs& a) { a.parts[1].out = nullptr; }},
        {"four parts", [](kernels::CausalConv1dArgs& a) { a.part_count = 4; }},
        {"negative part count", [](kernels::CausalConv1dArgs& a) { a.part_count = -1; }},
        {"int8 input", [](kernels::CausalConv1dArgs& a) { a.in_type = kernels::ElementType::kS8; }},
    };
    for (const Bad& b : bad) {
      kernels::CausalConv1dArgs a = split;
      b.edit(a);
      EXPECT_FALSE(kernels::causal_conv1d_supported(a)) << b.why;
    }
  }
}

// The loops specialized per channel plan (int8 conv.in, then fp16 x, int8 B|C, int8-formatted
// fp32 or fp16) give the bits of the per-element dispatch: parts as in the SSDi8 prefill plus a
// mixed fp32 part, one fp16 part over every channel, and one plain fp32 output; inputs that saturate, sit on rounding ties, are NaN or infinite.
TEST(CausalConv1dPlans, SpecializedLoopsGiveTheGenericBits) {
  testing::require_device();
  struct Shape {
    int batch, seqlen, channels, x_end, bc_end, tile;
  };
  for (const Shape sh : {Shape{2, 300, 1344, 1024, 1280, 0}, Shape{3, 1, 200, 72, 136, 0},
                         Shape{1, 70, 100, 40, 90, 16}, Shape{1, 2048, 640, 384, 512, 64}}) {
    const int width = 4, hist = width - 1;
    std::mt19937 rng(sh.seqlen * 3 + sh.channels);
    std::vector<float> in_codes(sh.channels), out_codes(sh.channels);
    for (int ch = 0; ch < sh.channels; ++ch) {
      in_codes[ch] = ch % 17 == 5 ? -1.f : 0.011f + 0.0007f * (ch % 13);  // a few fp16 conv.in channels
      out_codes[ch] = ch < sh.x_end ? -1.f : ch < sh.bc_end ? 0.004f + 0.0003f * (ch % 11) : (ch % 2 ? 0.006f : -1.f);
    }
    const int64_t rows = int64_t(sh.batch) * sh.seqlen, in_stride = sh.channels + 5;
    auto input = testing::random_vector(size_t(rows) * in_stride, -2.f, 2.f, rng);
    std::uniform_int_distribution<size_t> pick(0, input.size() - 1);
    for (int i = 0; i < 40; ++i) {  // ties of q·code, saturation, NaN, ±∞
      const size_t at = pick(rng);
      const float code = in_codes[at % in_stride < size_t(sh.channels) ? at % in_stride : 0];
      input[at] = i % 4 == 0 ? (float(i) + 0.5f) * code : i % 4 == 1 ? 1e3f : i % 4 == 2 ? NAN : -INFINITY;
    }
    const auto state = testing::random_vector(size_t(sh.batch) * sh.channels * hist, -2.f, 2.f, rng);
    testing::DeviceBuffer<float> d_in(input), d_w(testing::random_vector(size_t(sh.channels) * width, -0.5f, 0.5f, rng)),
        d_b(testing::random_vector(sh.channels, -0.2f, 0.2f, rng)), d_in_codes(in_codes), d_out_codes(out_codes);
    kernels::CausalConv1dArgs args =
        fp32_conv(sh.batch, sh.seqlen, sh.channels, width, d_in.get(), in_stride, d_w.get(), d_b.get());
    args.in_formats = d_in_codes.get();
    args.out_formats = d_out_codes.get();
    args.tile_tokens = sh.tile;

    struct Result {
      std::vector<uint16_t> x, f16;
      std::vector<int8_t> bc;
      std::vector<float> f, plain, state, plain_state;
    };
    auto run = [&](bool specialize) {
      Result r;
      testing::DeviceBuffer<float> d_state(state), d_plain_state(state),
          d_plain(std::vector<float>(size_t(rows) * sh.channels, -7.f));
      ThreeParts parts(rows, sh.channels, sh.x_end, sh.bc_end);
      kernels::CausalConv1dArgs split = args;
      split.specialize = specialize;
      split.state = d_state.get();
      parts.attach(split);
      EXPECT_EQ(kernels::launch_causal_conv1d(split, nullptr), cudaSuccess);
      kernels::CausalConv1dArgs plain = args;
      plain.specialize = specialize;
      plain.state = d_plain_state.get();
      plain.out = d_plain.get();
      EXPECT_EQ(kernels::launch_causal_conv1d(plain, nullptr), cudaSuccess);
      testing::DeviceBuffer<float> d_f16_state(state);
      testing::DeviceBuffer<uint16_t> d_f16(std::vector<uint16_t>(size_t(rows) * sh.channels, 0x7e00));
      kernels::CausalConv1dArgs whole_f16 = args;
      whole_f16.specialize = specialize;
      whole_f16.state = d_f16_state.get();
      whole_f16.part_count = 1;
      whole_f16.parts[0] = {d_f16.get(), 0, sh.channels, kernels::ElementType::kF16};
      EXPECT_EQ(kernels::launch_causal_conv1d(whole_f16, nullptr), cudaSuccess);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      r.f16 = d_f16.to_host();
      r.x = parts.x.to_host();
      r.bc = parts.bc.to_host();
      r.f = parts.f.to_host();
      r.plain = d_plain.to_host();
      r.state = d_state.to_host();
      r.plain_state = d_plain_state.to_host();
      return r;
    };
    const Result generic = run(false), special = run(true);
    auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    const std::string where = fmt::format("{} × {} tokens, {} channels", sh.batch, sh.seqlen, sh.channels);
    EXPECT_EQ(special.x, generic.x) << where;
    EXPECT_EQ(special.bc, generic.bc) << where;
    EXPECT_EQ(special.f16, generic.f16) << where;
    EXPECT_TRUE(same_bits(special.f, generic.f)) << where;
    EXPECT_TRUE(same_bits(special.plain, generic.plain)) << where;
    EXPECT_TRUE(same_bits(special.state, generic.state)) << where;
    EXPECT_TRUE(same_bits(special.plain_state, generic.plain_state)) << where;
  }
}

// The fp32 path fed int8 codes (in_proj's int8 epilogue, conv.in int8 on every channel): the
// same outputs in every part and the same fp32 state as fed the fp32 values the codes come from,
// in both the specialized and the generic loops.
TEST(CausalConv1dInt8Codes, EqualTheFp32InputsTheyCode) {
  testing::require_device();
  struct Shape {
    int batch, seqlen, channels, x_end, bc_end;
  };
  for (const Shape sh : {Shape{2, 300, 1344, 1024, 1280}, Shape{3, 1, 200, 72, 136}, Shape{1, 2048, 640, 384, 512}}) {
    const int width = 4, hist = width - 1;
    std::mt19937 rng(sh.seqlen * 5 + sh.channels);
    std::vector<float> in_codes(sh.channels), out_codes(sh.channels);
    for (int ch = 0; ch < sh.channels; ++ch) {
      in_codes[ch] = 0.011f + 0.0007f * (ch % 13);
      out_codes[ch] = ch < sh.x_end ? -1.f : ch < sh.bc_end ? 0.004f + 0.0003f * (ch % 11) : (ch % 2 ? 0.006f : -1.f);
    }
    const int64_t rows = int64_t(sh.batch) * sh.seqlen, in_stride = sh.channels + 16;
    auto input = testing::random_vector(size_t(rows) * in_stride, -2.f, 2.f, rng);
    std::uniform_int_distribution<size_t> pick(0, input.size() - 1);
    for (int i = 0; i < 40; ++i) {  // saturation, NaN, ±∞
      const size_t at = pick(rng);
      input[at] = i % 3 == 0 ? 1e3f : i % 3 == 1 ? NAN : -INFINITY;
    }
    std::vector<int8_t> codes(input.size());
    for (size_t i = 0; i < input.size(); ++i) {
      const int64_t ch = int64_t(i % in_stride);
      codes[i] = quantize_value(input[i], in_codes[ch < sh.channels ? ch : 0], QuantBits::kInt8);
    }
    const auto state = testing::random_vector(size_t(sh.batch) * sh.channels * hist, -2.f, 2.f, rng);
    testing::DeviceBuffer<float> d_in(input), d_w(testing::random_vector(size_t(sh.channels) * width, -0.5f, 0.5f, rng)),
        d_b(testing::random_vector(sh.channels, -0.2f, 0.2f, rng)), d_in_codes(in_codes), d_out_codes(out_codes);
    testing::DeviceBuffer<int8_t> d_codes(codes);
    struct Result {
      std::vector<uint16_t> x;
      std::vector<int8_t> bc;
      std::vector<float> f, state;
    };
    auto run = [&](bool int8_codes, bool specialize) {
      kernels::CausalConv1dArgs a =
          fp32_conv(sh.batch, sh.seqlen, sh.channels, width, d_in.get(), in_stride, d_w.get(), d_b.get());
      if (int8_codes) {
        a.in = d_codes.get();
        a.in_type = kernels::ElementType::kS8;
      }
      a.in_formats = d_in_codes.get();
      a.out_formats = d_out_codes.get();
      a.specialize = specialize;
      testing::DeviceBuffer<float> d_state(state);
      ThreeParts parts(rows, sh.channels, sh.x_end, sh.bc_end);
      a.state = d_state.get();
      parts.attach(a);
      EXPECT_TRUE(kernels::causal_conv1d_supported(a));
      EXPECT_EQ(kernels::launch_causal_conv1d(a, nullptr), cudaSuccess);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      return Result{parts.x.to_host(), parts.bc.to_host(), parts.f.to_host(), d_state.to_host()};
    };
    auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    for (bool specialize : {true, false}) {
      const Result from_floats = run(false, specialize), from_codes = run(true, specialize);
      const std::string where = fmt::format("{} × {} tokens, {} channels{}", sh.batch, sh.seqlen, sh.channels,
                                            specialize ? "" : ", generic loop");
      EXPECT_EQ(from_codes.x, from_floats.x) << where;
      EXPECT_EQ(from_codes.bc, from_floats.bc) << where;
      EXPECT_TRUE(same_bits(from_codes.f, from_floats.f)) << where;
      EXPECT_TRUE(same_bits(from_codes.state, from_floats.state)) << where;
    }
  }
  // int8 codes need their scales as in_formats, not as in_scales.
  kernels::CausalConv1dArgs bad = fp32_conv(1, 4, 64, 4, reinterpret_cast<const float*>(16), 64,
                                            reinterpret_cast<const float*>(16), reinterpret_cast<const float*>(16));
  bad.in_type = kernels::ElementType::kS8;
  bad.state = bad.out = reinterpret_cast<void*>(16);
  EXPECT_FALSE(kernels::causal_conv1d_supported(bad));
  bad.in_formats = reinterpret_cast<const float*>(16);
  EXPECT_TRUE(kernels::causal_conv1d_supported(bad));
  bad.in_scales = bad.in_formats;
  EXPECT_FALSE(kernels::causal_conv1d_supported(bad));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CausalConv1d,
                         ::testing::Values(Case{1, 1, 640, 4}, Case{2, 2, 300, 4}, Case{3, 63, 130, 4},
                                           Case{2, 64, 256, 4}, Case{1, 65, 200, 4}, Case{2, 300, 1792, 4},
                                           Case{1, 5, 64, 2}, Case{2, 130, 96, 8}));

}  // namespace
}  // namespace ssdq
