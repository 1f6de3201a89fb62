// The chunked-SSD prefill kernel against the CPU reference cpu::ssd_chunked (run per sequence on
// the same bf16-rounded inputs, with dt computed the same way), in the mixer's layout: x, B, C
// inside one conv row per token and dt_raw a column slice of the in_proj row, with junk around
// them. Lengths below, at and past chunk multiples; several groups, heads per block, headdim and
// dstate; zero and random initial states; two launches carrying the state equal one launch; the
// quantized backend's operands (fp32 dt_raw with its format, fp32 y, an int8 state).
// Errors are max |gpu − ref| / max |ref| per tensor; every case prints its measured errors, and a
// failure names the worst element and the error per chunk and per 64-token tile.
#include "kernels/ssd_chunk_scan.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "formats/dtype.h"
#include "kernels/ssd_chunk_stages.cuh"
#include "model/quantizer.h"
#include "runtime/cpu_ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

constexpr double kTolerance = 1e-2;
constexpr uint16_t kUnwrittenBf16 = 0x7fc1;  // a NaN: any output the kernel misses fails the test
constexpr size_t kGuardElements = 4096;      // past the end of y, state and the workspace
constexpr uint16_t kGuardBf16 = 0x1234;
constexpr uint8_t kGuardByte = 0xa5;

struct Case {
  const char* name;
  int batch, seqlen, heads, headdim, groups, dstate, chunk;
  bool zero_state = false;
  float dt_min = 0.f, dt_max = __FLT_MAX__;
  bool needs_sm90_smem = false;  // headdim 128 with dstate 256: more shared memory than sm_80 has
  float dt_hi = 0.2f;            // dt is log-uniform in [1e-3, dt_hi] (before the clamp)
  int state_rows = 0;            // ChunkState rows per block forced through the stage API; 0: the plan's
};

// One launch's inputs in the mixer's layout (bf16 bits) and the fp32 parameters.
struct Problem {
  int batch = 0, seqlen = 0, heads = 0, headdim = 0, groups = 0, dstate = 0, chunk = 0;
  float dt_min = 0.f, dt_max = __FLT_MAX__;
  int64_t conv_stride = 0, x_col = 0, b_col = 0, c_col = 0;  // conv row: [x | B | C | pad]
  int64_t proj_stride = 0, dt_col = 0;                        // in_proj row: [z | xBC | dt | pad]
  std::vector<uint16_t> conv, proj;
  std::vector<float> dt_bias, A, D, state;  // state [batch, heads, headdim, dstate]
  // When set, the CPU reference reads dt_raw from these fp32 rows (proj's layout) through dt_format.
  std::vector<float> proj_f32;
  float dt_format = 0.f;

  int64_t xw() const { return int64_t(heads) * headdim; }
  int64_t state_size() const { return xw() * dstate; }
};

Problem make_problem(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem pr;
  pr.batch = c.batch;
  pr.seqlen = c.seqlen;
  pr.heads = c.heads;
  pr.headdim = c.headdim;
  pr.groups = c.groups;
  pr.dstate = c.dstate;
  pr.chunk = c.chunk;
  pr.dt_min = c.dt_min;
  pr.dt_max = c.dt_max;
  const int64_t gn = int64_t(c.groups) * c.dstate;
  pr.x_col = 0;
  pr.b_col = pr.xw();
  pr.c_col = pr.xw() + gn;
  pr.conv_stride = pr.xw() + 2 * gn + 8;
  pr.dt_col = 2 * pr.xw() + 2 * gn;
  pr.proj_stride = pr.dt_col + c.heads + 3;
  const int64_t rows = int64_t(c.batch) * c.seqlen;
  pr.conv = testing::to_bf16(testing::random_vector(rows * pr.conv_stride, -1.f, 1.f, rng));
  // Junk (large values) everywhere in in_proj rows but the dt columns, so a misread shows.
  pr.proj = testing::to_bf16(testing::random_vector(rows * pr.proj_stride, 50.f, 100.f, rng));
  pr.dt_bias = testing::random_vector(c.heads, -1.f, 1.f, rng);
  pr.A = testing::random_vector(c.heads, -8.f, -0.5f, rng);
  pr.D = testing::random_vector(c.heads, 0.5f, 1.5f, rng);
  std::uniform_real_distribution<float> log_dt(std::log(1e-3f), std::log(c.dt_hi));
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < c.heads; ++h) {
      const float target = std::exp(log_dt(rng));  // softplus⁻¹(target) − bias
      pr.proj[r * pr.proj_stride + pr.dt_col + h] = float_to_bf16(std::log(std::expm1(target)) - pr.dt_bias[h]);
    }
  }
  pr.state = c.zero_state ? std::vector<float>(size_t(c.batch) * pr.state_size(), 0.f)
                          : testing::random_vector(size_t(c.batch) * pr.state_size(), -1.f, 1.f, rng);
  return pr;
}

// Tokens [start, start + length) of every sequence, as a problem of its own.
Problem slice_tokens(const Problem& whole, int start, int length) {
  Problem pr = whole;
  pr.seqlen = length;
  pr.conv.assign(size_t(whole.batch) * length * whole.conv_stride, 0);
  pr.proj.assign(size_t(whole.batch) * length * whole.proj_stride, 0);
  for (int b = 0; b < whole.batch; ++b) {
    const int64_t from = int64_t(b) * whole.seqlen + start, to = int64_t(b) * length;
    std::copy_n(whole.conv.begin() + from * whole.conv_stride, length * whole.conv_stride,
                pr.conv.begin() + to * whole.conv_stride);
    std::copy_n(whole.proj.begin() + from * whole.proj_stride, length * whole.proj_stride,
                pr.proj.begin() + to * whole.proj_stride);
  }
  return pr;
}

struct Outputs {
  std::vector<float> y;      // [batch, seqlen, heads * headdim]
  std::vector<float> state;  // [batch, heads, headdim, dstate]
};

// An activation format applied to one value (kernels/quant_epilogue.cuh apply_format_code).
float apply_format(float value, float code) {
  if (code > 0.f) return dequantize_value(quantize_value(value, code, QuantBits::kInt8), code);
  if (code < 0.f) return half_to_float(float_to_half(value));
  return value;
}

Outputs cpu_reference(const Problem& pr) {
  const std::vector<float> conv = testing::from_bf16(pr.conv);
  Outputs out;
  out.y.assign(size_t(pr.batch) * pr.seqlen * pr.xw(), 0.f);
  out.state = pr.state;
  std::vector<float> dt(size_t(pr.seqlen) * pr.heads);
  for (int b = 0; b < pr.batch; ++b) {
    const int64_t row0 = int64_t(b) * pr.seqlen;
    for (int t = 0; t < pr.seqlen; ++t) {
      for (int h = 0; h < pr.heads; ++h) {
        const int64_t at = (row0 + t) * pr.proj_stride + pr.dt_col + h;
        const float raw = pr.proj_f32.empty() ? bf16_to_float(pr.proj[at]) : apply_format(pr.proj_f32[at], pr.dt_format);
        dt[size_t(t) * pr.heads + h] = std::min(std::max(cpu::softplus(raw + pr.dt_bias[h]), pr.dt_min), pr.dt_max);
      }
    }
    const float* rows = conv.data() + row0 * pr.conv_stride;
    const cpu::SsdInputs in{rows + pr.x_col, pr.conv_stride, rows + pr.b_col, rows + pr.c_col, pr.conv_stride,
                            dt.data(),       pr.A.data(),    pr.D.data()};
    cpu::ssd_chunked({pr.heads, pr.headdim, pr.groups, pr.dstate}, in, pr.seqlen, pr.chunk,
                     out.state.data() + b * pr.state_size(), out.y.data() + row0 * pr.xw());
  }
  return out;
}

kernels::SsdChunkScanArgs make_args(const Problem& pr) {
  kernels::SsdChunkScanArgs args;
  args.batch = pr.batch;
  args.seqlen = pr.seqlen;
  args.heads = pr.heads;
  args.headdim = pr.headdim;
  args.groups = pr.groups;
  args.dstate = pr.dstate;
  args.chunk = pr.chunk;
  args.x_row_stride = pr.conv_stride;
  args.bc_row_stride = pr.conv_stride;
  args.dt_row_stride = pr.proj_stride;
  args.dt_min = pr.dt_min;
  args.dt_max = pr.dt_max;
  return args;
}

template <typename T>
void expect_guard(const std::vector<T>& values, size_t start, T guard, const char* what) {
  size_t touched = 0;
  for (size_t i = start; i < values.size(); ++i) touched += values[i] != guard;
  EXPECT_EQ(touched, 0u) << touched << " elements written past the end of " << what;
}

// The four stages of launch_ssd_chunk_scan's plan, with ChunkState's rows per block replaced.
cudaError_t launch_with_state_rows(const kernels::SsdChunkScanArgs& args, int state_rows) {
  namespace sc = kernels::ssd_chunk;
  sc::Plan plan;
  if (!sc::make_plan(args, &plan) || !sc::state_rows_valid(args, state_rows)) return cudaErrorInvalidValue;
  plan.state_rows = state_rows;
  for (const sc::StageLaunch& stage :
       {sc::cumsum_stage(plan), sc::bmm_stage(plan), sc::state_stage(plan), sc::output_stage(plan)}) {
    const cudaError_t status = sc::launch_stage(stage, plan, nullptr);
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

// Runs the kernel; checks that nothing past y, the state and the workspace was written.
Outputs run_gpu(const Problem& pr, int state_rows = 0) {
  kernels::SsdChunkScanArgs args = make_args(pr);
  const size_t y_size = size_t(pr.batch) * pr.seqlen * pr.xw();
  const size_t state_size = pr.state.size();
  std::vector<uint16_t> y_init(y_size + kGuardElements, kGuardBf16);
  std::fill_n(y_init.begin(), y_size, kUnwrittenBf16);
  std::vector<float> state_init = pr.state;
  state_init.resize(state_size + kGuardElements, 123.f);
  testing::DeviceBuffer<uint16_t> conv(pr.conv), proj(pr.proj), y(y_init);
  testing::DeviceBuffer<float> dt_bias(pr.dt_bias), A(pr.A), D(pr.D), state(state_init);
  const __nv_bfloat16* conv_ptr = testing::as_bf16(conv);
  args.x = conv_ptr + pr.x_col;
  args.B = conv_ptr + pr.b_col;
  args.C = conv_ptr + pr.c_col;
  args.dt_raw = testing::as_bf16(proj) + pr.dt_col;
  args.dt_bias = dt_bias.get();
  args.A = A.get();
  args.D = D.get();
  args.state = state.get();
  args.y = testing::as_bf16(y);
  const size_t ws_bytes = kernels::ssd_chunk_scan_workspace_bytes(args);
  EXPECT_GT(ws_bytes, 0u);
  testing::DeviceBuffer<uint8_t> workspace(std::vector<uint8_t>(ws_bytes + kGuardElements, kGuardByte));
  args.workspace = workspace.get();
  Outputs out;
  EXPECT_TRUE(kernels::ssd_chunk_scan_supported(args));
  if (state_rows == 0) EXPECT_EQ(kernels::launch_ssd_chunk_scan(args, nullptr), cudaSuccess);
  else EXPECT_EQ(launch_with_state_rows(args, state_rows), cudaSuccess) << state_rows << " state rows";
  const cudaError_t sync = cudaDeviceSynchronize();
  EXPECT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
  if (sync != cudaSuccess) return out;
  const std::vector<uint16_t> y_host = y.to_host();
  const std::vector<float> state_host = state.to_host();
  expect_guard(y_host, y_size, kGuardBf16, "y");
  expect_guard(state_host, state_size, 123.f, "state");
  expect_guard(workspace.to_host(), ws_bytes, kGuardByte, "the workspace");
  out.y = testing::from_bf16(std::vector<uint16_t>(y_host.begin(), y_host.begin() + y_size));
  out.state.assign(state_host.begin(), state_host.begin() + state_size);
  return out;
}

// max |got − ref| / max |ref|, the worst element, and the same error restricted to groups of
// elements (chunks, tiles) for the failure message.
struct Comparison {
  double scale = 0, max_abs = 0;
  size_t worst = 0;
  size_t non_finite = 0, first_non_finite = 0;
  double relative() const { return non_finite ? INFINITY : (scale > 0 ? max_abs / scale : max_abs); }
};

Comparison compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Comparison cmp;
  for (size_t i = 0; i < ref.size(); ++i) cmp.scale = std::max(cmp.scale, std::abs(double(ref[i])));
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) {
      if (cmp.non_finite++ == 0) cmp.first_non_finite = i;
      continue;
    }
    const double diff = std::abs(double(got[i]) - ref[i]);
    if (diff > cmp.max_abs) {
      cmp.max_abs = diff;
      cmp.worst = i;
    }
  }
  return cmp;
}

// Relative error per bucket, bucket(i) for element i.
template <typename Bucket>
std::string bucket_errors(const std::vector<float>& got, const std::vector<float>& ref, double scale, int buckets,
                          Bucket bucket) {
  std::vector<double> worst(buckets, 0.0);
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::isfinite(got[i]) ? std::abs(double(got[i]) - ref[i]) : INFINITY;
    double& w = worst[bucket(i)];
    w = std::max(w, diff / (scale > 0 ? scale : 1.0));
  }
  std::string out;
  for (int k = 0; k < buckets; ++k) out += fmt::format("{}{:.2e}", k ? " " : "", worst[k]);
  return out;
}

std::string describe_y(const Problem& pr, const std::vector<float>& got, const std::vector<float>& ref,
                       const Comparison& cmp) {
  const size_t at = cmp.non_finite ? cmp.first_non_finite : cmp.worst;
  const int64_t row = at / pr.xw(), col = at % pr.xw();
  const int64_t b = row / pr.seqlen, t = row % pr.seqlen;
  std::string out = fmt::format(
      "y: rel err {:.3e} (max |Δ| {:.3e}, max |ref| {:.3e}, {} non-finite); {} at b={} t={} (chunk {}, offset {}) "
      "h={} p={}: gpu {} ref {}",
      cmp.relative(), cmp.max_abs, cmp.scale, cmp.non_finite, cmp.non_finite ? "first non-finite" : "worst", b, t,
      t / pr.chunk, t % pr.chunk, col / pr.headdim, col % pr.headdim, got[at], ref[at]);
  const int nchunks = (pr.seqlen + pr.chunk - 1) / pr.chunk;
  out += "\n  per chunk: " + bucket_errors(got, ref, cmp.scale, nchunks, [&](size_t i) {
    return int((i / pr.xw()) % pr.seqlen / pr.chunk);
  });
  out += "\n  per 64-token tile of the chunk: " + bucket_errors(got, ref, cmp.scale, pr.chunk / 64, [&](size_t i) {
    return int((i / pr.xw()) % pr.seqlen % pr.chunk / 64);
  });
  out += "\n  per head: " + bucket_errors(got, ref, cmp.scale, pr.heads, [&](size_t i) {
    return int(i % pr.xw() / pr.headdim);
  });
  return out;
}

std::string describe_state(const Problem& pr, const std::vector<float>& got, const std::vector<float>& ref,
                           const Comparison& cmp) {
  const size_t at = cmp.non_finite ? cmp.first_non_finite : cmp.worst;
  const int64_t n = at % pr.dstate, p = at / pr.dstate % pr.headdim;
  const int64_t h = at / (int64_t(pr.dstate) * pr.headdim) % pr.heads, b = at / pr.state_size();
  std::string out = fmt::format(
      "state: rel err {:.3e} (max |Δ| {:.3e}, max |ref| {:.3e}, {} non-finite); {} at b={} h={} p={} n={}: "
      "gpu {} ref {}",
      cmp.relative(), cmp.max_abs, cmp.scale, cmp.non_finite, cmp.non_finite ? "first non-finite" : "worst", b, h, p, n,
      got[at], ref[at]);
  out += "\n  per head: " + bucket_errors(got, ref, cmp.scale, pr.heads, [&](size_t i) {
    return int(i / (size_t(pr.dstate) * pr.headdim) % pr.heads);
  });
  out += "\n  per 16 headdim rows: " + bucket_errors(got, ref, cmp.scale, pr.headdim / 16, [&](size_t i) {
    return int(i / pr.dstate % pr.headdim / 16);
  });
  return out;
}

// With compare_state false (an int8 state, checked step by step by its test) only y.
void expect_close(const char* label, const Problem& pr, const Outputs& got, const Outputs& ref,
                  bool compare_state = true) {
  ASSERT_EQ(got.y.size(), ref.y.size()) << label;
  const Comparison y = compare(got.y, ref.y);
  std::printf("[ %s ] y rel err %.3e (max |ref| %.3g)", label, y.relative(), y.scale);
  EXPECT_LE(y.relative(), kTolerance) << label << "\n" << describe_y(pr, got.y, ref.y, y);
  if (compare_state) {
    ASSERT_EQ(got.state.size(), ref.state.size()) << label;
    const Comparison state = compare(got.state, ref.state);
    std::printf(", state rel err %.3e (max |ref| %.3g)", state.relative(), state.scale);
    EXPECT_LE(state.relative(), kTolerance) << label << "\n" << describe_state(pr, got.state, ref.state, state);
  }
  std::printf("\n");
}

bool device_lacks_sm90_smem() {
  int device = 0, smem = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  return smem < 220 * 1024;
}

class SsdChunkScan : public ::testing::TestWithParam<Case> {};

TEST_P(SsdChunkScan, MatchesCpuReference) {
  testing::require_device();
  const Case c = GetParam();
  const Problem pr = make_problem(c, 1000u + c.seqlen * 31u + c.heads * 7u + c.dstate + c.chunk * 3u + c.batch);
  if (c.needs_sm90_smem && device_lacks_sm90_smem()) GTEST_SKIP() << "needs sm_90's 227 KB of shared memory per block";
  const Outputs ref = cpu_reference(pr);
  const Outputs got = run_gpu(pr, c.state_rows);
  expect_close(c.name, pr, got, ref);
}

// Paths on a 132-SM H100/H200: heads per ChunkScan block is the largest k of 8, 4, 2 that divides
// heads/groups with batch·chunks·(chunk/64)·heads/k ≥ 264 (mamba2_2p7b: 8, len1024_b4: 4,
// len1024_b3: 2), else 1; ChunkState takes 128 (or else 64) state rows per block when
// batch·heads·headdim/rows ≥ 264 (none of these: the rows* cases force 128 and 64), else 32.
INSTANTIATE_TEST_SUITE_P(
    Shapes, SsdChunkScan,
    ::testing::Values(Case{"len1", 1, 1, 8, 64, 1, 128, 256}, Case{"len17_zero_state", 1, 17, 8, 64, 2, 128, 256, true},
                      Case{"len64_chunk64", 1, 64, 8, 64, 2, 64, 64}, Case{"len255_b2", 2, 255, 8, 64, 1, 128, 256},
                      Case{"len256_g4", 1, 256, 8, 64, 4, 128, 256}, Case{"len257_b3", 3, 257, 8, 64, 2, 128, 256},
                      Case{"len384_last_chunk_two_tiles", 2, 384, 8, 64, 2, 128, 256},
                      Case{"len600_chunk128_g4", 1, 600, 16, 64, 4, 64, 128},
                      Case{"len600_chunk64", 2, 600, 8, 64, 1, 128, 64},
                      Case{"len1024_b3_2heads_per_block", 3, 1024, 16, 64, 2, 128, 256},
                      Case{"len1024_chunk64_g4_b3_zero_state", 3, 1024, 8, 64, 4, 64, 64, true},
                      Case{"len1024_b4_4heads_per_block_g4", 4, 1024, 32, 64, 4, 64, 256},
                      Case{"mamba2_2p7b_heads_b4_len300", 4, 300, 80, 64, 1, 128, 256},
                      Case{"dt_clamped", 2, 300, 8, 64, 1, 128, 128, false, 0.01f, 0.1f},
                      Case{"strong_decay_dt_to_4", 2, 300, 8, 64, 1, 128, 256, false, 0.f, __FLT_MAX__, false, 4.f},
                      Case{"headdim32", 2, 300, 8, 32, 1, 128, 128}, Case{"dstate16", 2, 130, 4, 64, 2, 16, 64},
                      Case{"dstate48_g3", 1, 200, 6, 64, 3, 48, 128},
                      Case{"headdim128", 1, 500, 4, 128, 1, 128, 256},
                      Case{"dstate256", 1, 300, 4, 64, 1, 256, 256},
                      Case{"headdim128_dstate256", 1, 200, 2, 128, 1, 256, 256, false, 0.f, __FLT_MAX__, true},
                      Case{"rows128_two_heads_g2", 2, 300, 8, 64, 2, 128, 256, false, 0.f, __FLT_MAX__, false, 0.2f, 128},
                      Case{"rows128_four_heads_headdim32", 1, 200, 8, 32, 1, 128, 128, false, 0.f, __FLT_MAX__, false,
                           0.2f, 128},
                      Case{"rows128_dstate48", 1, 150, 4, 64, 1, 48, 64, false, 0.f, __FLT_MAX__, false, 0.2f, 128},
                      Case{"rows64_dstate256", 1, 130, 4, 64, 1, 256, 128, false, 0.f, __FLT_MAX__, false, 0.2f, 64},
                      Case{"rows64_two_heads_headdim32", 1, 200, 4, 32, 2, 64, 64, false, 0.f, __FLT_MAX__, false,
                           0.2f, 64}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// Prefill of n tokens then of m more from the carried state equals one prefill of n + m tokens
// (up to the bf16 roundings, which fall at different chunk boundaries).
TEST(SsdChunkScanCarry, TwoLaunchesEqualOne) {
  testing::require_device();
  const int n = 300, m = 157;
  const Case c{"carry", 2, n + m, 8, 64, 2, 64, 128};
  const Problem whole = make_problem(c, 77);
  Problem first = slice_tokens(whole, 0, n), second = slice_tokens(whole, n, m);
  const Outputs one = run_gpu(whole);
  const Outputs a = run_gpu(first);
  ASSERT_FALSE(a.state.empty());
  second.state = a.state;
  const Outputs b = run_gpu(second);
  ASSERT_FALSE(b.y.empty());
  Outputs two;
  two.state = b.state;
  for (int s = 0; s < whole.batch; ++s) {
    two.y.insert(two.y.end(), a.y.begin() + int64_t(s) * n * whole.xw(), a.y.begin() + int64_t(s + 1) * n * whole.xw());
    two.y.insert(two.y.end(), b.y.begin() + int64_t(s) * m * whole.xw(), b.y.begin() + int64_t(s + 1) * m * whole.xw());
  }
  expect_close("two launches vs one", whole, two, one);
  expect_close("two launches vs cpu", whole, two, cpu_reference(whole));
}

TEST(SsdChunkScanArgs, RejectsUnsupportedArguments) {
  testing::require_device();
  testing::DeviceBuffer<uint8_t> buffer(std::vector<uint8_t>(1 << 16));
  kernels::SsdChunkScanArgs good;
  good.batch = 2;
  good.seqlen = 100;
  good.heads = 8;
  good.headdim = 64;
  good.groups = 2;
  good.dstate = 128;
  good.chunk = 256;
  auto* bf = reinterpret_cast<__nv_bfloat16*>(buffer.get());
  auto* fp = reinterpret_cast<float*>(buffer.get());
  good.x = good.B = good.C = bf;
  good.dt_raw = bf;
  good.y = bf;
  good.dt_bias = good.A = good.D = fp;
  good.state = fp;
  good.workspace = buffer.get();
  good.x_row_stride = good.bc_row_stride = 8 * 64 + 2 * 2 * 128;
  good.dt_row_stride = 8;
  ASSERT_TRUE(kernels::ssd_chunk_scan_supported(good));
  EXPECT_GT(kernels::ssd_chunk_scan_workspace_bytes(good), 0u);

  struct Bad {
    const char* why;
    void (*edit)(kernels::SsdChunkScanArgs&);
  };
  const Bad bad[] = {
      {"headdim 48", [](kernels::SsdChunkScanArgs& a) { a.headdim = 48; }},
      {"dstate 100", [](kernels::SsdChunkScanArgs& a) { a.dstate = 100; }},
      {"dstate 272", [](kernels::SsdChunkScanArgs& a) { a.dstate = 272; }},
      {"chunk 100", [](kernels::SsdChunkScanArgs& a) { a.chunk = 100; }},
      {"chunk 512", [](kernels::SsdChunkScanArgs& a) { a.chunk = 512; }},
      {"heads not divisible by groups", [](kernels::SsdChunkScanArgs& a) { a.groups = 3; }},
      {"seqlen 0", [](kernels::SsdChunkScanArgs& a) { a.seqlen = 0; }},
      {"batch 0", [](kernels::SsdChunkScanArgs& a) { a.batch = 0; }},
      {"x row stride not a multiple of 8", [](kernels::SsdChunkScanArgs& a) { a.x_row_stride += 4; }},
      {"B/C row stride not a multiple of 8", [](kernels::SsdChunkScanArgs& a) { a.bc_row_stride += 2; }},
      {"x not 16-byte aligned", [](kernels::SsdChunkScanArgs& a) { a.x = static_cast<const __nv_bfloat16*>(a.x) + 1; }},
      {"C not 16-byte aligned", [](kernels::SsdChunkScanArgs& a) { a.C = static_cast<const __nv_bfloat16*>(a.C) + 4; }},
      {"y not 16-byte aligned", [](kernels::SsdChunkScanArgs& a) { a.y = static_cast<__nv_bfloat16*>(a.y) + 2; }},
      {"dt as int8", [](kernels::SsdChunkScanArgs& a) { a.dt_type = kernels::ElementType::kS8; }},
      {"y as fp16", [](kernels::SsdChunkScanArgs& a) { a.y_type = kernels::ElementType::kF16; }},
      {"bf16 operands, fp32 y", [](kernels::SsdChunkScanArgs& a) { a.y_type = kernels::ElementType::kF32; }},
      {"fp16 operands, bf16 y", [](kernels::SsdChunkScanArgs& a) { a.operand_type = kernels::ElementType::kF16; }},
      {"state as bf16", [](kernels::SsdChunkScanArgs& a) { a.state_type = kernels::ElementType::kBF16; }},
      {"int8 state without scales", [](kernels::SsdChunkScanArgs& a) { a.state_type = kernels::ElementType::kS8; }},
      {"int8 state with 3 scales a row",
       [](kernels::SsdChunkScanArgs& a) {
         a.state_type = kernels::ElementType::kS8;
         a.state_scales = static_cast<const float*>(a.A);
         a.state_scale_inner = 3;
       }},
      {"no workspace", [](kernels::SsdChunkScanArgs& a) { a.workspace = nullptr; }},
      {"no dt_bias", [](kernels::SsdChunkScanArgs& a) { a.dt_bias = nullptr; }},
  };
  for (const Bad& b : bad) {
    kernels::SsdChunkScanArgs args = good;
    b.edit(args);
    EXPECT_FALSE(kernels::ssd_chunk_scan_supported(args)) << b.why;
    EXPECT_EQ(kernels::launch_ssd_chunk_scan(args, nullptr), cudaErrorInvalidValue) << b.why;
  }
  kernels::SsdChunkScanArgs largest = good;  // ChunkScan needs 208 KB of shared memory: sm_90 only
  largest.headdim = 128;
  largest.dstate = 256;
  EXPECT_EQ(kernels::ssd_chunk_scan_supported(largest), !device_lacks_sm90_smem());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The quantized backend's float-SSD recipes: fp16 x, B, C, dt_raw fp32 with its activation format
// applied first, y in fp32, the state fp32 or int8 (q·scale in, sat±127(rne(S / scale)) out).
// fp16 operands round 8 times finer than bf16: the bound is a tenth of the bf16 cases'.
struct QuantizedIo {
  const char* name;
  float dt_format;   // > 0 int8 with that scale, < 0 fp16, 0 as is
  bool int8_state;
  int scale_inner;   // 1 (one scale a channel) or dstate
  bool scale_index;  // channels share scale rows through state_scale_index
};

class SsdChunkScanQuantizedIo : public ::testing::TestWithParam<QuantizedIo> {};

TEST_P(SsdChunkScanQuantizedIo, MatchesCpuReference) {
  testing::require_device();
  const QuantizedIo io = GetParam();
  const Case c{"quantized io", 2, 300, 8, 64, 2, 64, 128};
  Problem pr = make_problem(c, 4242);
  const int64_t rows = int64_t(pr.batch) * pr.seqlen, channels = pr.xw();
  std::mt19937 rng(5);
  // State scales: one row per channel, or rows shared by pairs of channels; the initial state's
  // values are multiples of them.
  const int64_t scale_rows = io.scale_index ? channels / 2 : channels;
  const std::vector<float> scales = testing::random_vector(scale_rows * io.scale_inner, 0.004f, 0.012f, rng);
  std::vector<int32_t> index(channels);
  for (int64_t ch = 0; ch < channels; ++ch) index[ch] = static_cast<int32_t>(io.scale_index ? ch / 2 : ch);
  auto scale_of = [&](int64_t element) {
    const int64_t ch = element / pr.dstate % channels, n = element % pr.dstate;
    return scales[index[ch] * io.scale_inner + (io.scale_inner == 1 ? 0 : n)];
  };
  std::vector<int8_t> state_q(pr.state.size());
  if (io.int8_state) {
    for (size_t i = 0; i < pr.state.size(); ++i) {
      state_q[i] = quantize_value(pr.state[i], scale_of(i), QuantBits::kInt8);
      pr.state[i] = dequantize_value(state_q[i], scale_of(i));
    }
  }
  // x, B, C in fp16: the problem's bf16 values (exact in fp16 but for a few tiny ones, which the
  // reference then reads rounded the same way).
  std::vector<uint16_t> conv16(pr.conv.size());
  for (size_t i = 0; i < pr.conv.size(); ++i) {
    conv16[i] = float_to_half(bf16_to_float(pr.conv[i]));
    pr.conv[i] = float_to_bf16(half_to_float(conv16[i]));
    ASSERT_EQ(bf16_to_float(pr.conv[i]), half_to_float(conv16[i]));
  }
  // dt_raw in fp32: the bf16 values with a random fraction added, so formats round them.
  std::vector<float> proj32(pr.proj.size());
  std::uniform_real_distribution<float> fraction(-0.03f, 0.03f);
  for (size_t i = 0; i < pr.proj.size(); ++i) proj32[i] = bf16_to_float(pr.proj[i]) + fraction(rng);
  pr.proj_f32 = proj32;
  pr.dt_format = io.dt_format;
  Outputs ref = cpu_reference(pr);

  kernels::SsdChunkScanArgs args = make_args(pr);
  const size_t y_size = size_t(rows) * channels;
  testing::DeviceBuffer<uint16_t> conv(conv16);
  testing::DeviceBuffer<float> proj(proj32), y(std::vector<float>(y_size, NAN)), dt_bias(pr.dt_bias), A(pr.A), D(pr.D),
      state32(pr.state), scale_buf(scales);
  testing::DeviceBuffer<int8_t> state8(state_q);
  testing::DeviceBuffer<int32_t> index_buf(index);
  args.operand_type = kernels::ElementType::kF16;
  args.x = conv.get() + pr.x_col;
  args.B = conv.get() + pr.b_col;
  args.C = conv.get() + pr.c_col;
  args.dt_raw = proj.get() + pr.dt_col;
  args.dt_type = kernels::ElementType::kF32;
  args.dt_format = io.dt_format;
  args.dt_bias = dt_bias.get();
  args.A = A.get();
  args.D = D.get();
  args.y = y.get();
  args.y_type = kernels::ElementType::kF32;
  if (io.int8_state) {
    args.state = state8.get();
    args.state_type = kernels::ElementType::kS8;
    args.state_scales = scale_buf.get();
    args.state_scale_index = io.scale_index ? index_buf.get() : nullptr;
    args.state_scale_inner = io.scale_inner;
  } else {
    args.state = state32.get();
  }
  testing::DeviceBuffer<uint8_t> workspace(std::vector<uint8_t>(kernels::ssd_chunk_scan_workspace_bytes(args)));
  args.workspace = workspace.get();
  ASSERT_TRUE(kernels::ssd_chunk_scan_supported(args));
  ASSERT_EQ(kernels::launch_ssd_chunk_scan(args, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Outputs got;
  got.y = y.to_host();
  if (io.int8_state) {
    // The stored int8 state is the reference's final state quantized, up to one step where the
    // two fp32 states straddle a rounding boundary (a step is ~3 % of the state's range here).
    const std::vector<int8_t> q = state8.to_host();
    int64_t off_by_one = 0;
    got.state.resize(q.size());
    for (size_t i = 0; i < q.size(); ++i) {
      const int expected = quantize_value(ref.state[i], scale_of(i), QuantBits::kInt8);
      ASSERT_LE(std::abs(int(q[i]) - expected), 1) << "state element " << i;
      off_by_one += q[i] != expected;
      got.state[i] = dequantize_value(q[i], scale_of(i));
      ref.state[i] = dequantize_value(static_cast<int8_t>(expected), scale_of(i));
    }
    std::printf("[ %s ] %ld of %zu int8 state values one step off the reference's\n", io.name,
                static_cast<long>(off_by_one), q.size());
    EXPECT_LT(off_by_one, int64_t(q.size() / 20)) << io.name;
  } else {
    got.state = state32.to_host();
  }
  EXPECT_LE(compare(got.y, ref.y).relative(), kTolerance / 10) << io.name;
  expect_close(io.name, pr, got, ref, !io.int8_state);
  if (!io.int8_state) {
    EXPECT_LE(compare(got.state, ref.state).relative(), kTolerance / 10) << io.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, SsdChunkScanQuantizedIo,
                         ::testing::Values(QuantizedIo{"dt_as_is_fp32_state", 0.f, false, 1, false},
                                           QuantizedIo{"dt_int8_fp32_state", 0.07f, false, 1, false},
                                           QuantizedIo{"dt_fp16_int8_state_per_channel", -1.f, true, 1, false},
                                           QuantizedIo{"dt_int8_int8_state_per_n_indexed", 0.07f, true, 64, true}),
                         [](const ::testing::TestParamInfo<QuantizedIo>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ssdq
