// The decode-step SSD kernel against the CPU reference cpu::ssd_step applied token by token:
// fp32 and bf16 inputs, dt given or computed from dt_raw + bias (softplus, clamp), one step per
// launch over several launches (the state carries over) and several steps in one launch.
#include "kernels/ssd_state_update.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "formats/dtype.h"
#include "model/quantizer.h"
#include "runtime/cpu_ops.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/int8_check.h"

namespace ssdq {
namespace {

struct Case {
  int batch, heads, headdim, groups, dstate, steps;
  bool bf16, dt_bias;
  bool fp16_state = false;  // the fp32 state stored rounded to fp16 values (its fp16 format)
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return fmt::format("b{}_h{}_p{}_g{}_n{}_steps{}_{}{}{}", c.batch, c.heads, c.headdim, c.groups, c.dstate, c.steps,
                     c.bf16 ? "bf16" : "f32", c.dt_bias ? "_bias" : "", c.fp16_state ? "_fp16_state" : "");
}

class SsdStateUpdate : public ::testing::TestWithParam<Case> {};

// A launch over rows laid out [x (heads · P) | B (G · N) | C (G · N) | dt (heads)] of `elem`-byte
// values from `base`, one row every `stride` values, the head parameters given.
struct InterleavedShape {
  int batch, heads, headdim, groups, dstate;
  bool bf16;
};
kernels::SsdStateUpdateArgs interleaved_args(const InterleavedShape& s, const char* base, int64_t stride, int steps,
                                             const float* dt_bias, const float* A, const float* D, void* state, void* y,
                                             int64_t y_stride) {
  const int64_t xw = int64_t(s.heads) * s.headdim, gw = int64_t(s.groups) * s.dstate;
  const size_t elem = s.bf16 ? 2 : 4;
  kernels::SsdStateUpdateArgs a;
  a.batch = s.batch;
  a.heads = s.heads;
  a.headdim = s.headdim;
  a.groups = s.groups;
  a.dstate = s.dstate;
  a.steps = steps;
  a.io_type = s.bf16 ? kernels::ElementType::kBF16 : kernels::ElementType::kF32;
  a.x = base;
  a.B = base + xw * elem;
  a.C = base + (xw + gw) * elem;
  a.dt = base + (xw + 2 * gw) * elem;
  a.x_stride = a.bc_stride = a.dt_stride = stride;
  a.dt_bias = dt_bias;
  a.dt_max = 1e30f;
  a.A = A;
  a.D = D;
  a.state = state;
  a.y = y;
  a.y_stride = y_stride;
  return a;
}

TEST_P(SsdStateUpdate, MatchesCpuReference) {
  testing::require_device();
  const Case c = GetParam();
  std::mt19937 rng(1234 + c.heads * 7 + c.dstate + c.steps);
  const int64_t xw = c.heads * c.headdim, gw = c.groups * c.dstate;
  const int64_t row = xw + 2 * gw + c.heads;  // one token's row: [x | B | C | dt], like the in_proj/conv layout
  const int64_t rows = int64_t(c.batch) * c.steps;
  std::vector<float> A = testing::random_vector(c.heads, -8.f, -0.5f, rng);
  std::vector<float> D = testing::random_vector(c.heads, 0.5f, 1.5f, rng);
  std::vector<float> bias = testing::random_vector(c.heads, -4.f, -1.f, rng);
  std::vector<float> state = testing::random_vector(size_t(c.batch) * xw * c.dstate, -1.f, 1.f, rng);
  std::vector<float> inputs = testing::random_vector(rows * row, -1.5f, 1.5f, rng);
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < c.heads; ++h)
      inputs[r * row + xw + 2 * gw + h] = c.dt_bias ? testing::random_vector(1, -3.f, 1.f, rng)[0]
                                                    : testing::random_vector(1, 0.001f, 0.3f, rng)[0];
  if (c.bf16)
    for (float& v : inputs) v = bf16_to_float(float_to_bf16(v));

  // CPU reference, token by token.
  std::vector<float> cpu_state = state, y_cpu(rows * xw), dt(c.heads);
  for (int b = 0; b < c.batch; ++b)
    for (int j = 0; j < c.steps; ++j) {
      const float* r = inputs.data() + (int64_t(b) * c.steps + j) * row;
      for (int h = 0; h < c.heads; ++h)
        dt[h] = c.dt_bias ? std::clamp(cpu::softplus(r[xw + 2 * gw + h] + bias[h]), 0.0f, 1e30f) : r[xw + 2 * gw + h];
      cpu::SsdInputs in{r, xw, r + xw, r + xw + gw, 2 * gw, dt.data(), A.data(), D.data()};
      cpu::ssd_step({c.heads, c.headdim, c.groups, c.dstate}, in, cpu_state.data() + int64_t(b) * xw * c.dstate,
                    y_cpu.data() + (int64_t(b) * c.steps + j) * xw);
    }
  // The state's fp16 format, applied once per launch (after every token when steps = 1).
  if (c.fp16_state)
    for (float& v : cpu_state) v = half_to_float(float_to_half(v));

  testing::DeviceBuffer<float> d_A(A), d_D(D), d_bias(bias), d_state(state), d_in_f32(inputs), d_y_f32(y_cpu);
  std::vector<uint16_t> inputs_bf16(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) inputs_bf16[i] = float_to_bf16(inputs[i]);
  testing::DeviceBuffer<uint16_t> d_in_bf16(inputs_bf16), d_y_bf16(std::vector<uint16_t>(y_cpu.size()));
  const char* base = c.bf16 ? reinterpret_cast<const char*>(d_in_bf16.get()) : reinterpret_cast<const char*>(d_in_f32.get());
  kernels::SsdStateUpdateArgs args = interleaved_args(
      {c.batch, c.heads, c.headdim, c.groups, c.dstate, c.bf16}, base, row, c.steps, c.dt_bias ? d_bias.get() : nullptr,
      d_A.get(), d_D.get(), d_state.get(),
      c.bf16 ? static_cast<void*>(d_y_bf16.get()) : static_cast<void*>(d_y_f32.get()), xw);
  args.state_fp16_values = c.fp16_state;
  ASSERT_TRUE(kernels::ssd_state_update_supported(args));
  ASSERT_EQ(kernels::launch_ssd_state_update(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> y_gpu(y_cpu.size());
  if (c.bf16) {
    const auto raw = d_y_bf16.to_host();
    for (size_t i = 0; i < raw.size(); ++i) y_gpu[i] = bf16_to_float(raw[i]);
  } else {
    y_gpu = d_y_f32.to_host();
  }
  const double y_tol = c.bf16 ? 1e-2 : 1e-4;
  EXPECT_LT(testing::max_relative_error(y_gpu, y_cpu, 0.05), y_tol);
  const std::vector<float> gpu_state = d_state.to_host();
  if (c.fp16_state) {
    // Every stored value an fp16 value; one fp16 step (2^-10 relative) apart from the CPU's where the
    // fp32 values straddle a rounding boundary.
    const auto not_fp16 = std::count_if(gpu_state.begin(), gpu_state.end(),
                                        [](float v) { return half_to_float(float_to_half(v)) != v; });
    EXPECT_EQ(not_fp16, 0);
    EXPECT_LT(testing::max_relative_error(gpu_state, cpu_state, 0.05), 2e-3);
  } else {
    EXPECT_LT(testing::max_relative_error(gpu_state, cpu_state, 0.05), 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SsdStateUpdate,
                         ::testing::Values(Case{1, 8, 64, 1, 128, 1, false, false}, Case{3, 8, 64, 4, 128, 1, false, true},
                                           Case{2, 80, 64, 1, 128, 1, true, true}, Case{5, 16, 32, 8, 64, 1, true, false},
                                           Case{1, 4, 64, 2, 256, 1, false, false}, Case{2, 6, 48, 3, 96, 1, false, true},
                                           Case{2, 8, 64, 2, 128, 4, false, true}, Case{3, 80, 64, 1, 128, 7, true, true},
                                           Case{1, 128, 64, 8, 128, 16, true, true},
                                           // more blocks than the GPU holds at once: no early state loads
                                           Case{24, 80, 64, 1, 128, 1, false, true},
                                           // the fp16-valued fp32 state: one step, several, many waves
                                           Case{2, 80, 64, 1, 128, 1, false, true, true},
                                           Case{2, 8, 64, 2, 128, 4, false, true, true},
                                           Case{24, 80, 64, 1, 128, 1, false, true, true},
                                           // long recurrences over many blocks: the kernel with 8 rows a warp
                                           Case{12, 40, 64, 1, 128, 200, false, true},
                                           Case{12, 40, 36, 4, 64, 130, true, true},
                                           Case{12, 40, 64, 2, 256, 100, false, false, true}),
                         case_name);

// A long launch (the prefill of the fp32 engine: many tokens, a grid that fills the GPU, taken by
// the kernel that steps 8 rows a warp) stores the bits that the same tokens give as single-token
// launches (the row-a-warp kernel): y and the state, fp32 and bf16 inputs, every dstate it takes,
// a headdim that leaves a warp's last rows empty, and per-sequence step counts.
TEST(SsdStateUpdateLong, GivesTheBitsOfSingleSteps) {
  testing::require_device();
  struct LongCase {
    int headdim, groups, dstate, steps;
    bool bf16, seq_steps;
  };
  const int batch = 12, heads = 40;  // 480 blocks of 64 rows: more than twice any GPU's SMs
  for (const auto& [P, G, N, steps, bf16, per_seq] :
       {LongCase{64, 1, 128, 96, false, false}, LongCase{36, 4, 64, 80, true, false},
        LongCase{64, 2, 256, 70, false, true}, LongCase{72, 1, 128, 65, true, true}}) {
    SCOPED_TRACE(fmt::format("headdim {}, groups {}, dstate {}, steps {}, bf16 {}, per-sequence steps {}", P, G, N,
                             steps, bf16, per_seq));
    std::mt19937 rng(77 + P + N + steps);
    const int64_t xw = int64_t(heads) * P, gw = int64_t(G) * N, row = xw + 2 * gw + heads;
    const int64_t rows = int64_t(batch) * steps;
    std::vector<float> A = testing::random_vector(heads, -8.f, -0.5f, rng), D = testing::random_vector(heads, 0.5f, 1.5f, rng);
    std::vector<float> bias = testing::random_vector(heads, -4.f, -1.f, rng);
    std::vector<float> state = testing::random_vector(size_t(batch) * xw * N, -1.f, 1.f, rng);
    std::vector<float> inputs = testing::random_vector(rows * row, -1.5f, 1.5f, rng);
    std::vector<uint16_t> inputs_bf16(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) inputs_bf16[i] = float_to_bf16(inputs[i]);
    std::vector<int32_t> counts(batch);
    for (int b = 0; b < batch; ++b) counts[b] = per_seq ? (b * 37) % (steps + 1) : steps;  // some 0, some all
    testing::DeviceBuffer<float> d_A(A), d_D(D), d_bias(bias), d_in(inputs), d_y(std::vector<float>(rows * xw, 0.f));
    testing::DeviceBuffer<uint16_t> d_in16(inputs_bf16), d_y16(std::vector<uint16_t>(rows * xw, 0));
    testing::DeviceBuffer<float> d_long_state(state), d_single_state(state), d_y_single(std::vector<float>(rows * xw, 0.f));
    testing::DeviceBuffer<uint16_t> d_y16_single(std::vector<uint16_t>(rows * xw, 0));
    testing::DeviceBuffer<int32_t> d_counts(counts);
    const size_t elem = bf16 ? 2 : 4;
    const auto args_at = [&](const char* base, int64_t stride, int n_steps, void* st, void* y) {
      return interleaved_args({batch, heads, P, G, N, bf16}, base, stride, n_steps, d_bias.get(), d_A.get(), d_D.get(),
                              st, y, stride / row * xw);
    };
    const char* in = bf16 ? reinterpret_cast<const char*>(d_in16.get()) : reinterpret_cast<const char*>(d_in.get());
    void* y_long = bf16 ? static_cast<void*>(d_y16.get()) : static_cast<void*>(d_y.get());
    void* y_single = bf16 ? static_cast<void*>(d_y16_single.get()) : static_cast<void*>(d_y_single.get());
    kernels::SsdStateUpdateArgs whole = args_at(in, row, steps, d_long_state.get(), y_long);
    if (per_seq) whole.seq_steps = d_counts.get();
    ASSERT_EQ(kernels::launch_ssd_state_update(whole, nullptr), cudaSuccess);
    // Token j of every sequence alone: rows b·steps + j, a stride of `steps` rows.
    for (int j = 0; j < steps; ++j) {
      kernels::SsdStateUpdateArgs one = args_at(in + j * row * elem, row * steps, 1, d_single_state.get(),
                                                static_cast<char*>(y_single) + j * xw * elem);
      std::vector<int32_t> active(batch);
      for (int b = 0; b < batch; ++b) active[b] = j < counts[b] ? 1 : 0;
      testing::DeviceBuffer<int32_t> d_active(active);
      one.seq_steps = d_active.get();
      ASSERT_EQ(kernels::launch_ssd_state_update(one, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_long_state.to_host(), d_single_state.to_host());
    if (bf16) {
      EXPECT_EQ(d_y16.to_host(), d_y16_single.to_host());
    } else {
      EXPECT_EQ(d_y.to_host(), d_y_single.to_host());
    }
  }
}

// The long kernel over an int8 state (the fp32 engine's passes over Quamba2 and SSDi8 artifacts):
// dequantized once, rounded once at the end, so the same bits as launches of one sequence each
// (too few blocks for the long kernel: the row-a-warp kernel), for per-channel scales and per-(c, n)
// scales through an index map, fp32 and bf16 inputs, and per-sequence step counts.
TEST(SsdStateUpdateLong, Int8StateGivesTheBitsOfOneSequenceLaunches) {
  testing::require_device();
  struct LongInt8Case {
    int headdim, dstate, steps;
    bool per_n, bf16, seq_steps;
  };
  const int batch = 12, heads = 40, G = 2;
  for (const auto& [P, N, steps, per_n, bf16, per_seq] :
       {LongInt8Case{64, 128, 96, false, false, false}, LongInt8Case{64, 128, 80, true, true, true},
        LongInt8Case{72, 64, 70, true, false, true}, LongInt8Case{64, 256, 65, false, true, false}}) {
    SCOPED_TRACE(fmt::format("headdim {}, dstate {}, steps {}, per-n scales {}, bf16 {}, per-sequence steps {}", P, N,
                             steps, per_n, bf16, per_seq));
    std::mt19937 rng(91 + P + N + steps);
    const int64_t xw = int64_t(heads) * P, gw = int64_t(G) * N, row = xw + 2 * gw + heads, rows = int64_t(batch) * steps;
    std::vector<float> A = testing::random_vector(heads, -8.f, -0.5f, rng), D = testing::random_vector(heads, 0.5f, 1.5f, rng);
    std::vector<float> bias = testing::random_vector(heads, -4.f, -1.f, rng);
    std::vector<float> inputs = testing::random_vector(rows * row, -1.5f, 1.5f, rng);
    std::vector<uint16_t> inputs_bf16(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) inputs_bf16[i] = float_to_bf16(inputs[i]);
    const int scale_rows = per_n ? 4 : int(xw), inner = per_n ? N : 1;
    std::vector<float> scales = testing::random_vector(size_t(scale_rows) * inner, 0.004f, 0.012f, rng);
    std::vector<int32_t> index(xw), counts(batch);
    for (int c = 0; c < xw; ++c) index[c] = c % 4;
    for (int b = 0; b < batch; ++b) counts[b] = per_seq ? (b * 37) % (steps + 1) : steps;
    std::uniform_int_distribution<int> q_dist(-127, 127);
    std::vector<int8_t> q_state(size_t(batch) * xw * N);
    for (auto& q : q_state) q = static_cast<int8_t>(q_dist(rng));
    testing::DeviceBuffer<float> d_A(A), d_D(D), d_bias(bias), d_in(inputs), d_scales(scales);
    testing::DeviceBuffer<uint16_t> d_in16(inputs_bf16);
    testing::DeviceBuffer<int32_t> d_index(index), d_counts(counts);
    testing::DeviceBuffer<int8_t> d_long_state(q_state), d_one_state(q_state);
    const size_t elem = bf16 ? 2 : 4;
    testing::DeviceBuffer<char> d_y_long(std::vector<char>(rows * xw * elem, 0)), d_y_one(std::vector<char>(rows * xw * elem, 0));
    const char* in = bf16 ? reinterpret_cast<const char*>(d_in16.get()) : reinterpret_cast<const char*>(d_in.get());
    const auto args_at = [&](int64_t b0, int n_batch, int n_steps, int8_t* state, char* y) {
      kernels::SsdStateUpdateArgs a =
          interleaved_args({n_batch, heads, P, G, N, bf16}, in + b0 * steps * row * elem, row, n_steps, d_bias.get(),
                           d_A.get(), d_D.get(), state + b0 * xw * N, y + b0 * steps * xw * elem, xw);
      a.state_type = kernels::ElementType::kS8;
      a.state_scales = d_scales.get();
      a.state_scale_index = per_n ? d_index.get() : nullptr;
      a.state_scale_inner = inner;
      return a;
    };
    kernels::SsdStateUpdateArgs whole = args_at(0, batch, steps, d_long_state.get(), d_y_long.get());
    if (per_seq) whole.seq_steps = d_counts.get();
    ASSERT_EQ(kernels::launch_ssd_state_update(whole, nullptr), cudaSuccess);
    for (int b = 0; b < batch; ++b) {
      if (counts[b] == 0) continue;
      ASSERT_EQ(kernels::launch_ssd_state_update(args_at(b, 1, counts[b], d_one_state.get(), d_y_one.get()), nullptr),
                cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<int8_t> long_state = d_long_state.to_host();
    EXPECT_EQ(long_state, d_one_state.to_host());
    EXPECT_NE(long_state, q_state);  // the launch stepped the state
    EXPECT_EQ(d_y_long.to_host(), d_y_one.to_host());
  }
}

// The int8 decode state of quantized artifacts: per (h, p) scales (SSDi8) and per (channel cluster,
// n) scales through an index map (Quamba2). The CPU steps the dequantized state and rounds it back
// (apply_state_format); the GPU's __expf differs from libm in the last bit (and a large batch steps
// the state in its scales' units), so a state value next to a rounding boundary may land one step
// away — rarely.
TEST(SsdStateUpdateInt8, MatchesTheCpuOnTheDequantizedState) {
  testing::require_device();
  const int H = 8, G = 2;
  struct Int8Case {
    int batch, P, N;
    bool per_n;
    float x_gain = 1.f;  // > 1: x large enough that many new state values pass ±127 (saturate)
    int steps = 1;       // > 1: the fused multi-step update, rounded to int8 once at the end (the
                         // row-a-warp kernel at any batch: the packed one takes single steps)
  };
  // Batch 160: 1,280 blocks, more than the GPU holds at once: for dstate 64, 128 and 256 the kernel
  // with a lane's values packed (a chunk and a ragged last chunk of rows at P = 100), for 96 the
  // row-a-warp kernel without the early state loads.
  for (const auto& [batch, P, N, per_n, x_gain, steps] :
       {Int8Case{2, 64, 128, false}, Int8Case{2, 64, 128, true}, Int8Case{160, 64, 128, false},
        Int8Case{160, 64, 128, true}, Int8Case{160, 100, 64, false}, Int8Case{160, 64, 256, true},
        Int8Case{160, 64, 96, false}, Int8Case{160, 64, 128, false, 40.f}, Int8Case{2, 64, 128, false, 40.f},
        Int8Case{2, 64, 128, false, 1.f, 4}, Int8Case{3, 64, 128, true, 1.f, 3}, Int8Case{160, 64, 64, false, 1.f, 2}}) {
    SCOPED_TRACE(fmt::format("batch {}, headdim {}, dstate {}, per-n scales {}, x gain {}, steps {}", batch, P, N,
                             per_n, x_gain, steps));
    const int64_t xw = H * P, gw = G * N, row = xw + 2 * gw + H, rows = int64_t(batch) * steps;
    std::mt19937 rng(per_n ? 11 : 12 + batch + steps);
    std::vector<float> A = testing::random_vector(H, -8.f, -0.5f, rng), D = testing::random_vector(H, 0.5f, 1.5f, rng);
    std::vector<float> inputs = testing::random_vector(rows * row, -1.5f, 1.5f, rng);
    for (int64_t r = 0; r < rows; ++r)
      for (int h = 0; h < H; ++h) inputs[r * row + xw + 2 * gw + h] = testing::random_vector(1, 0.001f, 0.3f, rng)[0];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < xw; ++i) inputs[r * row + i] *= x_gain;
    // Scales: per channel c (inner 1), or 4 scale rows × N picked by c % 4 (inner N).
    const int scale_rows = per_n ? 4 : xw, inner = per_n ? N : 1;
    std::vector<float> scales = testing::random_vector(size_t(scale_rows) * inner, 0.004f, 0.012f, rng);
    std::vector<int32_t> index(xw);
    for (int c = 0; c < xw; ++c) index[c] = c % 4;
    auto scale_of = [&](int c, int n) { return scales[(per_n ? index[c] : c) * inner + (per_n ? n : 0)]; };
    std::uniform_int_distribution<int> q_dist(-127, 127);
    std::vector<int8_t> q_state(size_t(batch) * xw * N);
    for (auto& q : q_state) q = static_cast<int8_t>(q_dist(rng));
    std::vector<float> state(q_state.size()), y_cpu(rows * xw);
    for (size_t i = 0; i < q_state.size(); ++i) state[i] = dequantize_value(q_state[i], scale_of(int((i / N) % xw), int(i % N)));
    // Several steps in one launch keep the state in fp32 between them, so the CPU steps the float
    // state `steps` times and the comparison rounds once, after the last.
    for (int64_t r = 0; r < rows; ++r) {
      const float* in_row = inputs.data() + r * row;
      cpu::SsdInputs in{in_row, xw, in_row + xw, in_row + xw + gw, 2 * gw, in_row + xw + 2 * gw, A.data(), D.data()};
      cpu::ssd_step({H, P, G, N}, in, state.data() + (r / steps) * xw * N, y_cpu.data() + r * xw);
    }
    testing::DeviceBuffer<float> d_A(A), d_D(D), d_in(inputs), d_y(std::vector<float>(y_cpu.size())), d_scales(scales);
    testing::DeviceBuffer<int8_t> d_state(q_state);
    testing::DeviceBuffer<int32_t> d_index(index);
    kernels::SsdStateUpdateArgs args;
    args.batch = batch;
    args.steps = steps;
    args.heads = H;
    args.headdim = P;
    args.groups = G;
    args.dstate = N;
    args.x = d_in.get();
    args.B = d_in.get() + xw;
    args.C = d_in.get() + xw + gw;
    args.dt = d_in.get() + xw + 2 * gw;
    args.x_stride = args.bc_stride = args.dt_stride = row;
    args.A = d_A.get();
    args.D = d_D.get();
    args.state = d_state.get();
    args.state_type = kernels::ElementType::kS8;
    args.state_scales = d_scales.get();
    args.state_scale_index = per_n ? d_index.get() : nullptr;
    args.state_scale_inner = inner;
    args.y = d_y.get();
    args.y_stride = xw;
    ASSERT_TRUE(kernels::ssd_state_update_supported(args));
    ASSERT_EQ(kernels::launch_ssd_state_update(args, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    // y sums terms that grow with x; its rounding error is relative to them, not to y alone
    EXPECT_LT(testing::max_relative_error(d_y.to_host(), y_cpu, 0.05 * x_gain), 1e-4);
    const std::vector<int8_t> new_state = d_state.to_host();
    testing::expect_int8_within_one_step(new_state, state,
                                         [&](size_t i) { return scale_of(int((i / N) % xw), int(i % N)); });
    if (x_gain > 1.f) {  // the case is meant to reach the clamp on many values
      const auto clamped = std::count_if(new_state.begin(), new_state.end(), [](int8_t q) { return q == 127 || q == -127; });
      EXPECT_GT(clamped, int64_t(new_state.size()) / 20) << clamped << " of " << new_state.size() << " at ±127";
    }
  }
}

TEST(SsdStateUpdateCaps, RejectsUnsupportedShapes) {
  kernels::SsdStateUpdateArgs args;
  float dummy = 0;
  args.x = args.B = args.C = args.dt = &dummy;
  args.A = args.D = &dummy;
  args.state = &dummy;
  args.y = &dummy;
  args.batch = 1;
  args.heads = 6;
  args.headdim = 64;
  args.groups = 4;  // 6 heads do not split into 4 groups
  args.dstate = 128;
  EXPECT_FALSE(kernels::ssd_state_update_supported(args));
  args.groups = 1;
  args.dstate = 100;  // not a multiple of 32
  EXPECT_FALSE(kernels::ssd_state_update_supported(args));
  EXPECT_EQ(kernels::launch_ssd_state_update(args, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ssdq
