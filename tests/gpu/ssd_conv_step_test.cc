// The fused decode conv + state update against the two kernels it replaces, run on the same inputs:
// launch_causal_conv1d (fp32 output) then launch_ssd_state_update on that output. Both are tested
// against the CPU in their own tests; here y, the SSM state (fp32 or int8) and the conv state must
// be the same bits after each of several decode steps, and the arrival counters back at zero.
#include "kernels/ssd_conv_step.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "formats/dtype.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

enum class Formats { kNone, kInt8, kMixed };  // the conv's in/out activation formats

struct Case {
  int batch, heads, headdim, groups, dstate;
  bool int8_state, per_n_scales;
  Formats formats;
  bool raw_dt = false;  // dt as given through its int8 format, no bias / softplus (else dt_raw + bias)
  bool fp16_state = false;  // an fp32 state stored rounded to fp16 values
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const char* formats = c.formats == Formats::kNone ? "plain" : c.formats == Formats::kInt8 ? "int8" : "mixed";
  return fmt::format("b{}_h{}_p{}_g{}_n{}_{}{}_{}{}", c.batch, c.heads, c.headdim, c.groups, c.dstate,
                     c.int8_state ? "s8" : c.fp16_state ? "f32_fp16_values" : "f32", c.per_n_scales ? "_per_n" : "",
                     formats, c.raw_dt ? "_raw_dt" : "");
}

// Per-channel format codes (kernels/quant_epilogue.cuh apply_format_code): int8 scales, or for
// kMixed a cycle of as-is, fp16 and int8.
std::vector<float> format_codes(int channels, Formats formats, std::mt19937& rng) {
  std::vector<float> codes = testing::random_vector(channels, 0.01f, 0.03f, rng);
  if (formats == Formats::kMixed)
    for (int c = 0; c < channels; c += 3) {
      codes[c] = 0.f;
      if (c + 1 < channels) codes[c + 1] = -1.f;
    }
  return codes;
}

template <typename T>
void expect_same_bits(const std::vector<T>& fused, const std::vector<T>& separate, const char* what, int step) {
  ASSERT_EQ(fused.size(), separate.size());
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < fused.size(); ++i)
    if (std::memcmp(&fused[i], &separate[i], sizeof(T)) != 0 && differ++ == 0) first = i;
  EXPECT_EQ(differ, 0u) << what << " after step " << step << ": " << differ << " of " << fused.size()
                        << " elements differ, the first at " << first;
}

class SsdConvStep : public ::testing::TestWithParam<Case> {};

TEST_P(SsdConvStep, SameBitsAsConvThenStateUpdate) {
  testing::require_device();
  const Case c = GetParam();
  std::mt19937 rng(97 + c.heads * 5 + c.batch * 3 + c.dstate + c.headdim);
  const int E = c.heads * c.headdim, GN = c.groups * c.dstate, channels = E + 2 * GN;
  const int64_t row = channels + c.heads + 3;  // one sequence's in_proj row: x|B|C, then dt, then padding
  std::vector<float> weight = testing::random_vector(size_t(channels) * 4, -0.6f, 0.6f, rng);
  std::vector<float> bias = testing::random_vector(channels, -0.2f, 0.2f, rng);
  std::vector<float> conv_state = testing::random_vector(size_t(c.batch) * channels * 3, -1.f, 1.f, rng);
  std::vector<float> A = testing::random_vector(c.heads, -8.f, -0.5f, rng), D = testing::random_vector(c.heads, 0.5f, 1.5f, rng);
  std::vector<float> dt_bias = testing::random_vector(c.heads, -4.f, -1.f, rng);
  const std::vector<float> in_codes = format_codes(channels, c.formats, rng), out_codes = format_codes(channels, c.formats, rng);
  const size_t state_size = size_t(c.batch) * E * c.dstate;
  std::vector<float> state_f32 = testing::random_vector(state_size, -1.f, 1.f, rng);
  std::vector<int8_t> state_s8(state_size);
  std::uniform_int_distribution<int> q_dist(-127, 127);
  for (auto& q : state_s8) q = static_cast<int8_t>(q_dist(rng));
  const int scale_rows = c.per_n_scales ? 4 : E, inner = c.per_n_scales ? c.dstate : 1;
  std::vector<float> scales = testing::random_vector(size_t(scale_rows) * inner, 0.004f, 0.012f, rng);
  std::vector<int32_t> index(E);
  for (int i = 0; i < E; ++i) index[i] = i % 4;

  testing::DeviceBuffer<float> d_in(std::vector<float>(c.batch * row)), d_weight(weight), d_bias(bias), d_A(A), d_D(D),
      d_dt_bias(dt_bias), d_in_codes(in_codes), d_out_codes(out_codes), d_scales(scales),
      d_xbc(std::vector<float>(size_t(c.batch) * channels));
  testing::DeviceBuffer<int32_t> d_index(index), d_arrivals(std::vector<int32_t>(c.batch * c.groups, 0));
  // Each path advances its own copies of the states.
  testing::DeviceBuffer<float> conv_state_fused(conv_state), conv_state_separate(conv_state);
  testing::DeviceBuffer<float> f32_fused(state_f32), f32_separate(state_f32);
  testing::DeviceBuffer<int8_t> s8_fused(state_s8), s8_separate(state_s8);
  testing::DeviceBuffer<float> y_fused(std::vector<float>(size_t(c.batch) * E)), y_separate(std::vector<float>(size_t(c.batch) * E));

  kernels::CausalConv1dArgs conv;
  conv.batch = c.batch;
  conv.seqlen = 1;
  conv.channels = channels;
  conv.width = 4;
  conv.in = d_in.get();
  conv.in_stride = row;
  conv.weight = d_weight.get();
  conv.bias = d_bias.get();
  conv.in_type = conv.out_type = kernels::ElementType::kF32;
  if (c.formats != Formats::kNone) {
    conv.in_formats = d_in_codes.get();
    conv.out_formats = d_out_codes.get();
  }
  kernels::SsdStateUpdateArgs step;
  step.batch = c.batch;
  step.heads = c.heads;
  step.headdim = c.headdim;
  step.groups = c.groups;
  step.dstate = c.dstate;
  step.dt = d_in.get() + channels;
  step.dt_stride = row;
  if (c.raw_dt) {
    step.dt_format = 0.002f;  // dt rounded to multiples of 0.002 as read
  } else {
    step.dt_bias = d_dt_bias.get();
    step.dt_min = 1e-3f;
    step.dt_max = 0.5f;
  }
  step.A = d_A.get();
  step.D = d_D.get();
  if (c.int8_state) {
    step.state_type = kernels::ElementType::kS8;
    step.state_scales = d_scales.get();
    step.state_scale_index = c.per_n_scales ? d_index.get() : nullptr;
    step.state_scale_inner = inner;
  }
  step.state_fp16_values = c.fp16_state;
  step.y_stride = E;

  for (int t = 0; t < 3; ++t) {
    std::vector<float> in = testing::random_vector(size_t(c.batch) * row, -2.f, 2.f, rng);
    if (c.raw_dt)  // dt itself: small and positive
      for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.heads; ++h) in[b * row + channels + h] = testing::random_vector(1, 0.001f, 0.2f, rng)[0];
    d_in.upload(in);

    kernels::CausalConv1dArgs separate_conv = conv;
    separate_conv.state = conv_state_separate.get();
    separate_conv.out = d_xbc.get();
    kernels::SsdStateUpdateArgs separate_step = step;
    separate_step.x = d_xbc.get();
    separate_step.B = d_xbc.get() + E;
    separate_step.C = d_xbc.get() + E + GN;
    separate_step.x_stride = separate_step.bc_stride = channels;
    separate_step.state = c.int8_state ? static_cast<void*>(s8_separate.get()) : f32_separate.get();
    separate_step.y = y_separate.get();
    ASSERT_EQ(kernels::launch_causal_conv1d(separate_conv, nullptr), cudaSuccess);
    ASSERT_EQ(kernels::launch_ssd_state_update(separate_step, nullptr), cudaSuccess);

    kernels::SsdConvStepArgs fused;
    fused.conv = conv;
    fused.conv.state = conv_state_fused.get();
    fused.step = step;
    fused.step.state = c.int8_state ? static_cast<void*>(s8_fused.get()) : f32_fused.get();
    fused.step.y = y_fused.get();
    fused.arrivals = d_arrivals.get();
    ASSERT_TRUE(kernels::ssd_conv_step_supported(fused));
    ASSERT_EQ(kernels::launch_ssd_conv_step(fused, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    expect_same_bits(y_fused.to_host(), y_separate.to_host(), "y", t);
    expect_same_bits(conv_state_fused.to_host(), conv_state_separate.to_host(), "conv state", t);
    if (c.int8_state) {
      expect_same_bits(s8_fused.to_host(), s8_separate.to_host(), "int8 SSM state", t);
    } else {
      const std::vector<float> fused_state = f32_fused.to_host();
      expect_same_bits(fused_state, f32_separate.to_host(), "SSM state", t);
      if (c.fp16_state) {  // the two kernels agreeing would not show the flag ignored by both
        EXPECT_EQ(std::count_if(fused_state.begin(), fused_state.end(),
                                [](float v) { return half_to_float(float_to_half(v)) != v; }),
                  0)
            << "state values that are not fp16 values after step " << t;
      }
    }
    EXPECT_EQ(d_arrivals.to_host(), std::vector<int32_t>(c.batch * c.groups, 0)) << "after step " << t;
  }
  // The test would pass vacuously if the states did not move.
  EXPECT_NE(conv_state_fused.to_host(), conv_state);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SsdConvStep,
    ::testing::Values(Case{1, 80, 64, 1, 128, true, false, Formats::kInt8},    // mamba2-2.7b, SSDi8
                      Case{1, 128, 64, 8, 128, true, false, Formats::kInt8},   // 8B-like
                      Case{4, 80, 64, 1, 128, true, true, Formats::kMixed},    // Quamba2's per-n scales
                      Case{3, 8, 64, 2, 128, false, false, Formats::kNone},    // fp32 state, no formats
                      Case{1, 6, 50, 2, 64, false, false, Formats::kMixed},    // a last slice of fewer rows
                      Case{2, 4, 32, 2, 256, true, false, Formats::kInt8},     // dstate 256
                      Case{40, 24, 64, 4, 64, true, false, Formats::kInt8},    // one block a (head, sequence)
                      Case{2, 2, 256, 1, 64, false, false, Formats::kMixed},   // the widest head
                      // 38 heads × 144 rows: on a 132-SM GPU 17 slices of 9 rows a head, the last
                      // one empty; dt as given (its format, no bias)
                      Case{1, 38, 144, 2, 64, true, false, Formats::kInt8, true},
                      Case{2, 8, 64, 1, 128, false, false, Formats::kNone, true},
                      Case{1, 80, 64, 1, 128, false, false, Formats::kMixed, false, true}),  // fp16-valued state
    case_name);

TEST(SsdConvStepCaps, RefusesWhatItDoesNotTake) {
  float dummy[8] = {};
  int32_t arrivals[1] = {};
  kernels::SsdConvStepArgs a;
  a.conv.batch = 1;
  a.conv.seqlen = 1;
  a.conv.width = 4;
  a.conv.in = a.conv.weight = a.conv.bias = dummy;
  a.conv.state = dummy;
  a.conv.in_type = a.conv.out_type = kernels::ElementType::kF32;
  a.step.batch = 1;
  a.step.heads = 8;
  a.step.headdim = 64;
  a.step.groups = 1;
  a.step.dstate = 128;
  a.step.dt = a.step.A = a.step.D = dummy;
  a.step.state = a.step.y = dummy;
  a.conv.channels = 8 * 64 + 2 * 128;
  a.conv.in_stride = a.conv.channels + 8;  // room for dt
  a.arrivals = arrivals;
  ASSERT_TRUE(kernels::ssd_conv_step_supported(a));
  const auto refused = [&](const char* what, auto change) {
    kernels::SsdConvStepArgs b = a;
    change(b);
    EXPECT_FALSE(kernels::ssd_conv_step_supported(b)) << what;
    EXPECT_EQ(kernels::launch_ssd_conv_step(b, nullptr), cudaErrorInvalidValue) << what;
  };
  refused("conv width 3", [](auto& b) { b.conv.width = 3; });
  refused("two tokens a sequence", [](auto& b) { b.conv.seqlen = b.step.steps = 2; });
  refused("dstate 96", [](auto& b) { b.step.dstate = 96, b.conv.channels = 8 * 64 + 2 * 96; });
  refused("dstate 32", [](auto& b) { b.step.dstate = 32, b.conv.channels = 8 * 64 + 2 * 32; });
  refused("channels not x|B|C", [](auto& b) { b.conv.channels += 1; });
  refused("no arrival counters", [](auto& b) { b.arrivals = nullptr; });
  refused("batch differs", [](auto& b) { b.conv.batch = 2; });
  refused("int8 conv input", [](auto& b) { b.conv.in_type = kernels::ElementType::kS8; });
  refused("bf16 state update", [](auto& b) { b.step.io_type = kernels::ElementType::kBF16; });
  refused("input rows narrower than the channels", [](auto& b) { b.conv.in_stride = b.conv.channels - 1; });
}

}  // namespace
}  // namespace ssdq
