// The kernels of a speculative verify window (runtime/cuda_window.cc):
// - ssd_state_update with round_every_step: K tokens in one launch give the bits of K single-token
//   launches (int8 state, fp32 state with fp16 values, plain fp32); with seq_steps, sequence b
//   advances its first seq_steps[b] tokens only (0 leaves its state and y untouched);
// - conv_state_replay against the conv state a host loop keeps (the last W-1 inputs, fp32 inputs
//   formatted as causal_conv1d stores them; bf16);
// - the replay inside a window's launch (replay_steps, store_final false) against a replay launch
//   followed by the window's launch, for the state update and the conv: the same y and outputs,
//   and the state the replay alone leaves.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "formats/dtype.h"
#include "kernels/causal_conv1d.h"
#include "kernels/conv_state_replay.h"
#include "kernels/ssd_state_update.h"
#include "model/quantizer.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

using kernels::ElementType;

enum class StateKind { kF32, kF16Values, kS8 };

struct StateCase {
  StateKind kind;
  int batch;
};

class WindowStateUpdate : public ::testing::TestWithParam<StateCase> {};

// The shapes both tests use: H heads of P rows, G groups of N, each token's inputs one row of
// x | B | C | dt (`row` floats).
constexpr int kHeads = 4, kHeadDim = 16, kGroups = 1, kDstate = 64;
constexpr int64_t kXWidth = kHeads * kHeadDim, kGroupWidth = kGroups * kDstate, kRow = kXWidth + 2 * kGroupWidth + kHeads;

// A launch of batch B over those shapes, the state `kind`, the device buffers given.
kernels::SsdStateUpdateArgs window_args(int B, StateKind kind, const float* A, const float* D, const float* bias,
                                        void* state, const float* scales) {
  kernels::SsdStateUpdateArgs a;
  a.batch = B;
  a.heads = kHeads;
  a.headdim = kHeadDim;
  a.groups = kGroups;
  a.dstate = kDstate;
  a.io_type = ElementType::kF32;
  a.x_stride = a.bc_stride = a.dt_stride = kRow;
  a.dt_bias = bias;
  a.A = A;
  a.D = D;
  a.state = state;
  a.state_type = kind == StateKind::kS8 ? ElementType::kS8 : ElementType::kF32;
  a.state_scales = kind == StateKind::kS8 ? scales : nullptr;
  a.state_fp16_values = kind == StateKind::kF16Values;
  a.y_stride = kXWidth;
  return a;
}

// The token rows from `rows` on as the launch's x, B, C and dt, its y to `y`.
void point_at(kernels::SsdStateUpdateArgs& args, const float* rows, float* y) {
  args.x = rows;
  args.B = rows + kXWidth;
  args.C = rows + kXWidth + kGroupWidth;
  args.dt = rows + kXWidth + 2 * kGroupWidth;
  args.y = y;
}

TEST_P(WindowStateUpdate, StepsInOneLaunchAreSingleSteps) {
  testing::require_device();
  const StateCase sc = GetParam();
  const int B = sc.batch, H = kHeads, N = kDstate, K = 5;
  const int64_t xw = kXWidth, row = kRow, channels = kXWidth;
  std::mt19937 rng(77 + B);
  const std::vector<float> A = testing::random_vector(H, -6.f, -0.5f, rng), D = testing::random_vector(H, 0.5f, 1.5f, rng),
                           bias = testing::random_vector(H, -4.f, -1.f, rng),
                           inputs = testing::random_vector(int64_t(B) * K * row, -1.5f, 1.5f, rng);
  const std::vector<float> scales = testing::random_vector(channels, 0.002f, 0.02f, rng);
  const size_t state_elems = size_t(B) * channels * N;
  std::vector<float> state_f32 = testing::random_vector(state_elems, -1.f, 1.f, rng);
  std::vector<int8_t> state_s8(state_elems);
  for (size_t i = 0; i < state_elems; ++i) state_s8[i] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  const bool s8 = sc.kind == StateKind::kS8;
  const size_t state_bytes = state_elems * (s8 ? 1 : 4);
  std::vector<char> initial(state_bytes);
  std::memcpy(initial.data(), s8 ? static_cast<const void*>(state_s8.data()) : state_f32.data(), state_bytes);

  testing::DeviceBuffer<float> d_A(A), d_D(D), d_bias(bias), d_in(inputs), d_scales(scales);
  testing::DeviceBuffer<char> d_state(initial);
  testing::DeviceBuffer<float> d_y(std::vector<float>(int64_t(B) * K * xw, 0.f));
  const kernels::SsdStateUpdateArgs a =
      window_args(B, sc.kind, d_A.get(), d_D.get(), d_bias.get(), d_state.get(), d_scales.get());
  const auto point = point_at;

  // Reference: K launches of one token each (rows b * K + j, so batch stride K rows: one launch a
  // token with x_stride scaled by K).
  std::vector<std::vector<float>> y_single;
  for (int j = 0; j < K; ++j) {
    kernels::SsdStateUpdateArgs one = a;
    one.steps = 1;
    one.x_stride = one.bc_stride = one.dt_stride = row * K;
    one.y_stride = xw * K;
    point(one, d_in.get() + int64_t(j) * row, d_y.get() + int64_t(j) * xw);
    ASSERT_EQ(kernels::launch_ssd_state_update(one, nullptr), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<char> single_state = d_state.to_host();
  const std::vector<float> single_y = d_y.to_host();

  // One launch of K tokens, rounded after each.
  d_state.upload(initial);
  kernels::SsdStateUpdateArgs window = a;
  window.steps = K;
  window.round_every_step = true;
  point(window, d_in.get(), d_y.get());
  ASSERT_EQ(kernels::launch_ssd_state_update(window, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(d_state.to_host(), single_state) << "state after K tokens";
  EXPECT_EQ(d_y.to_host(), single_y) << "y of every token";

  // Per-sequence counts: sequence b advances counts[b] tokens, against single launches of batch 1.
  std::vector<int32_t> counts(B);
  for (int b = 0; b < B; ++b) counts[b] = b % (K + 1);
  testing::DeviceBuffer<int32_t> d_counts(counts);
  d_state.upload(initial);
  window.seq_steps = d_counts.get();
  ASSERT_EQ(kernels::launch_ssd_state_update(window, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<char> counted = d_state.to_host();
  const size_t seq_bytes = state_bytes / B;
  for (int b = 0; b < B; ++b) {
    std::vector<char> one_seq(initial.begin() + b * seq_bytes, initial.begin() + (b + 1) * seq_bytes);
    testing::DeviceBuffer<char> d_one(one_seq);
    for (int j = 0; j < counts[b]; ++j) {
      kernels::SsdStateUpdateArgs one = a;
      one.batch = 1;
      one.steps = 1;
      one.state = d_one.get();
      point(one, d_in.get() + (int64_t(b) * K + j) * row, d_y.get());
      ASSERT_EQ(kernels::launch_ssd_state_update(one, nullptr), cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<char> expected = d_one.to_host();
    EXPECT_EQ(std::vector<char>(counted.begin() + b * seq_bytes, counted.begin() + (b + 1) * seq_bytes), expected)
        << "sequence " << b << " after " << counts[b] << " tokens";
  }
}

TEST_P(WindowStateUpdate, ReplayInTheWindowsLaunchIsAReplayThenTheWindow) {
  testing::require_device();
  const StateCase sc = GetParam();
  const int B = sc.batch, H = kHeads, N = kDstate, K0 = 5, K = 3;
  const int64_t xw = kXWidth, gw = kGroupWidth, row = kRow, channels = kXWidth;
  std::mt19937 rng(91 + B);
  const std::vector<float> A = testing::random_vector(H, -6.f, -0.5f, rng), D = testing::random_vector(H, 0.5f, 1.5f, rng),
                           bias = testing::random_vector(H, -4.f, -1.f, rng),
                           kept = testing::random_vector(int64_t(B) * K0 * row, -1.5f, 1.5f, rng),
                           fresh = testing::random_vector(int64_t(B) * K * row, -1.5f, 1.5f, rng),
                           scales = testing::random_vector(channels, 0.002f, 0.02f, rng);
  const bool s8 = sc.kind == StateKind::kS8;
  const size_t state_elems = size_t(B) * channels * N, state_bytes = state_elems * (s8 ? 1 : 4);
  std::vector<char> initial(state_bytes);
  if (s8) {
    for (char& v : initial) v = static_cast<char>(static_cast<int>(rng() % 255) - 127);
  } else {
    const std::vector<float> f = testing::random_vector(state_elems, -1.f, 1.f, rng);
    std::memcpy(initial.data(), f.data(), state_bytes);
  }
  std::vector<int32_t> counts(B + 1);
  for (int b = 0; b < B; ++b) counts[b] = (b * 2) % (K0 + 1);
  counts[B] = K0;
  testing::DeviceBuffer<float> d_A(A), d_D(D), d_bias(bias), d_kept(kept), d_fresh(fresh), d_scales(scales);
  testing::DeviceBuffer<char> d_state(initial);
  testing::DeviceBuffer<int32_t> d_counts(counts);
  testing::DeviceBuffer<float> d_y(std::vector<float>(int64_t(B) * K * xw, 0.f)),
      d_replay_y(std::vector<float>(int64_t(B) * K0 * xw, 0.f));
  kernels::SsdStateUpdateArgs a =
      window_args(B, sc.kind, d_A.get(), d_D.get(), d_bias.get(), d_state.get(), d_scales.get());
  a.round_every_step = true;
  const auto point = point_at;

  // Reference: the kept tokens replayed (their counts), then the window's K tokens.
  kernels::SsdStateUpdateArgs replay = a;
  replay.steps = K0;
  replay.seq_steps = d_counts.get();
  point(replay, d_kept.get(), d_replay_y.get());
  ASSERT_EQ(kernels::launch_ssd_state_update(replay, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<char> replayed = d_state.to_host();
  kernels::SsdStateUpdateArgs window = a;
  window.steps = K;
  point(window, d_fresh.get(), d_y.get());
  ASSERT_EQ(kernels::launch_ssd_state_update(window, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<char> after_window = d_state.to_host();
  const std::vector<float> window_y = d_y.to_host();

  // One launch: the replay first, the state stored after it and not after the window.
  for (const bool store_final : {false, true}) {
    d_state.upload(initial);
    d_y.upload(std::vector<float>(int64_t(B) * K * xw, 0.f));
    kernels::SsdStateUpdateArgs fused = window;
    fused.replay_steps = d_counts.get();
    fused.replay_x = d_kept.get();
    fused.replay_B = d_kept.get() + xw;
    fused.replay_dt = d_kept.get() + xw + 2 * gw;
    fused.store_final = store_final;
    ASSERT_EQ(kernels::launch_ssd_state_update(fused, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_y.to_host(), window_y) << "y of the window's tokens, store_final " << store_final;
    EXPECT_EQ(d_state.to_host(), store_final ? after_window : replayed) << "state, store_final " << store_final;
  }
  kernels::SsdStateUpdateArgs unrounded = window;
  unrounded.round_every_step = false;
  unrounded.replay_steps = d_counts.get();
  unrounded.replay_x = unrounded.replay_B = unrounded.replay_dt = d_kept.get();
  EXPECT_FALSE(kernels::ssd_state_update_supported(unrounded)) << "a replay rounds as single steps do";
}

INSTANTIATE_TEST_SUITE_P(States, WindowStateUpdate,
                         ::testing::Values(StateCase{StateKind::kF32, 3}, StateCase{StateKind::kF16Values, 3},
                                           StateCase{StateKind::kS8, 3}, StateCase{StateKind::kS8, 7}));

TEST(ConvStateReplay, KeepsTheLastInputsOfEachSequencesCount) {
  testing::require_device();
  const int B = 4, C = 200, W = 4, K = 6, keep = W - 1;
  const int64_t stride = C + 17;  // inputs are columns of a wider row, as in_proj writes them
  std::mt19937 rng(5);
  const std::vector<float> state = testing::random_vector(int64_t(B) * C * keep, -2.f, 2.f, rng),
                           in = testing::random_vector(int64_t(B) * K * stride, -2.f, 2.f, rng);
  std::vector<float> codes(C);
  for (int c = 0; c < C; ++c) codes[c] = c % 3 == 0 ? 0.f : c % 3 == 1 ? -1.f : 0.03f;  // as is, fp16, int8
  const std::vector<int32_t> counts = {0, 1, 2, 6};
  auto formatted = [&](float v, int c) {
    return codes[c] > 0   ? dequantize_value(quantize_value(v, codes[c], QuantBits::kInt8), codes[c])
           : codes[c] < 0 ? half_to_float(float_to_half(v))
                          : v;
  };
  std::vector<float> expected = state;
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < C; ++c) {
      std::vector<float> seq(state.begin() + (int64_t(b) * C + c) * keep, state.begin() + (int64_t(b) * C + c + 1) * keep);
      for (int t = 0; t < counts[b]; ++t) seq.push_back(formatted(in[(int64_t(b) * K + t) * stride + c], c));
      for (int k = 0; k < keep; ++k) expected[(int64_t(b) * C + c) * keep + k] = seq[seq.size() - keep + k];
    }
  testing::DeviceBuffer<float> d_state(state), d_in(in), d_codes(codes);
  testing::DeviceBuffer<int32_t> d_counts(counts);
  kernels::ConvStateReplayArgs a;
  a.batch = B;
  a.channels = C;
  a.width = W;
  a.steps = K;
  a.seq_steps = d_counts.get();
  a.in = d_in.get();
  a.in_stride = stride;
  a.type = ElementType::kF32;
  a.in_formats = d_codes.get();
  a.state = d_state.get();
  ASSERT_EQ(kernels::launch_conv_state_replay(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(d_state.to_host(), expected);

  // bf16: the inputs copied as they are.
  std::vector<uint16_t> state16(state.size()), in16(in.size()), expected16(state.size());
  for (size_t i = 0; i < state.size(); ++i) state16[i] = float_to_bf16(state[i]);
  for (size_t i = 0; i < in.size(); ++i) in16[i] = float_to_bf16(in[i]);
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < C; ++c)
      for (int k = 0; k < keep; ++k) {
        const int i = counts[b] + k;
        expected16[(int64_t(b) * C + c) * keep + k] =
            i < keep ? state16[(int64_t(b) * C + c) * keep + i] : in16[(int64_t(b) * K + i - keep) * stride + c];
      }
  testing::DeviceBuffer<uint16_t> d_state16(state16), d_in16(in16);
  a.in = d_in16.get();
  a.state = d_state16.get();
  a.type = ElementType::kBF16;
  a.in_formats = nullptr;
  ASSERT_EQ(kernels::launch_conv_state_replay(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(d_state16.to_host(), expected16);

  a.in_formats = d_codes.get();  // formats are the fp32 path's
  EXPECT_FALSE(kernels::conv_state_replay_supported(a));
}

// The conv of a window that first takes in the previous window's kept rows: fp32 inputs with
// formats (as is, fp16, int8) and bf16, against conv_state_replay followed by the window's conv.
TEST(CausalConv1dWindow, ReplayInTheWindowsLaunchIsAReplayThenTheWindow) {
  testing::require_device();
  const int B = 4, C = 200, W = 4, K0 = 6, K = 4, keep = W - 1;
  const int64_t stride = C + 17;
  std::mt19937 rng(8);
  const std::vector<float> state = testing::random_vector(int64_t(B) * C * keep, -2.f, 2.f, rng),
                           kept = testing::random_vector(int64_t(B) * K0 * stride, -2.f, 2.f, rng),
                           fresh = testing::random_vector(int64_t(B) * K * stride, -2.f, 2.f, rng),
                           weight = testing::random_vector(int64_t(C) * W, -1.f, 1.f, rng),
                           bias = testing::random_vector(C, -0.5f, 0.5f, rng);
  std::vector<float> codes(C), out_codes(C);
  for (int c = 0; c < C; ++c) {
    codes[c] = c % 3 == 0 ? 0.f : c % 3 == 1 ? -1.f : 0.03f;
    out_codes[c] = c % 2 == 0 ? 0.f : 0.02f;
  }
  const std::vector<int32_t> counts = {0, 1, 2, 6, K0};
  testing::DeviceBuffer<float> d_weight(weight), d_bias(bias), d_codes(codes), d_out_codes(out_codes);
  testing::DeviceBuffer<int32_t> d_counts(counts);

  auto check = [&](ElementType type, const auto& state_init, const auto& kept_rows, const auto& fresh_rows) {
    using T = typename std::decay_t<decltype(state_init)>::value_type;
    const bool f32 = type == ElementType::kF32;
    testing::DeviceBuffer<T> d_state(state_init), d_kept(kept_rows), d_fresh(fresh_rows);
    testing::DeviceBuffer<T> d_out(std::vector<T>(int64_t(B) * K * C));
    // Reference: conv_state_replay, then the window's conv.
    kernels::ConvStateReplayArgs r;
    r.batch = B;
    r.channels = C;
    r.width = W;
    r.steps = K0;
    r.seq_steps = d_counts.get();
    r.in = d_kept.get();
    r.in_stride = stride;
    r.type = type;
    r.in_formats = f32 ? d_codes.get() : nullptr;
    r.state = d_state.get();
    ASSERT_EQ(kernels::launch_conv_state_replay(r, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<T> replayed = d_state.to_host();
    kernels::CausalConv1dArgs conv;
    conv.batch = B;
    conv.seqlen = K;
    conv.channels = C;
    conv.width = W;
    conv.in = d_fresh.get();
    conv.in_stride = stride;
    conv.weight = d_weight.get();
    conv.bias = d_bias.get();
    conv.state = d_state.get();
    conv.out = d_out.get();
    conv.in_type = conv.out_type = type;
    conv.in_formats = f32 ? d_codes.get() : nullptr;
    conv.out_formats = f32 ? d_out_codes.get() : nullptr;
    ASSERT_EQ(kernels::launch_causal_conv1d(conv, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<T> after_window = d_state.to_host(), window_out = d_out.to_host();
    for (const bool store_final : {false, true}) {
      d_state.upload(state_init);
      d_out.upload(std::vector<T>(int64_t(B) * K * C));
      kernels::CausalConv1dArgs fused = conv;
      fused.replay_steps = d_counts.get();
      fused.replay_in = d_kept.get();
      fused.store_final = store_final;
      ASSERT_TRUE(kernels::causal_conv1d_supported(fused));
      ASSERT_EQ(kernels::launch_causal_conv1d(fused, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(d_out.to_host(), window_out) << "outputs, store_final " << store_final << ", fp32 " << f32;
      EXPECT_EQ(d_state.to_host(), store_final ? after_window : replayed)
          << "state, store_final " << store_final << ", fp32 " << f32;
    }
  };
  check(ElementType::kF32, state, kept, fresh);
  auto to_bf16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
    return out;
  };
  check(ElementType::kBF16, to_bf16(state), to_bf16(kept), to_bf16(fresh));
}

}  // namespace
}  // namespace ssdq
