// The SSDi8 prefill kernel against runtime/quantized_ssd.h ssdi8_chunked, run sequence by sequence
// on the same inputs (dt through the CPU layer's softplus and clamp). The integer parts are exact,
// but dt and the exp-based decays can differ from glibc in the last bit, which moves an int8 value
// by one step at times: final states within one step, off on at most 0.5 % of the elements; y to
// 1e-3 of its largest value. Scales come from the data, as calibration would set them. The kernel
// reads x in fp16 and B, C as int8 (as the conv writes them); the CPU reads the same values in fp32.
#include "kernels/ssdi8_chunk_scan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/dtype.h"
#include "model/quantizer.h"
#include "runtime/cpu_ops.h"
#include "model/quantized_model.h"
#include "runtime/quantized_ssd.h"
#include "tests/gpu/gpu_test_util.h"

namespace ssdq {
namespace {

struct Case {
  const char* name;
  int batch, seqlen, heads, headdim, groups, dstate, chunk;
  float a_lo = -8.f, a_hi = -0.5f;  // A range: strong decay forgets the entering state within a chunk
  bool zero_state = false;
  float dt_min = 0.f, dt_max = 3.4e38f;
  bool odd_rows = false;  // odd row strides (the kernel's element-wise fallbacks) rather than whole 16 / 8 bytes of x / y
};

// Token rows [x | B | C | dt_raw | pad] as the CPU reads them (dt_raw where in_proj leaves it), y
// rows padded; the kernel's fp16 x rows (x16_stride) and int8 B|C rows (bc_stride, C at GN).
struct Problem {
  Case c;
  int64_t E, GN, row, y_stride, x16_stride, bc_stride;
  std::vector<float> inputs, dt_bias, A, D;
  std::vector<float> s_B, s_C, s_xs, s_s, s_cb;
  std::vector<int8_t> state;  // [batch, H, P, N]
  const float* x(int64_t r) const { return inputs.data() + r * row; }
  const float* B(int64_t r) const { return x(r) + E; }
  const float* C(int64_t r) const { return x(r) + E + GN; }
  const float* dt_raw(int64_t r) const { return x(r) + E + 2 * GN; }
};

ActQuant int8_format(std::vector<float> scales, int64_t channels, int64_t channels_per_scale) {
  ActQuant q;
  q.format = ActFormat::kInt8;
  q.scales = std::move(scales);
  q.index.resize(channels);
  for (int64_t c = 0; c < channels; ++c) q.index[c] = static_cast<int32_t>(c / channels_per_scale);
  return q;
}

float scale_of(float absmax) { return absmax > 0.f ? absmax / 127.f : 1.f; }

// dt as the quantized CPU layer computes it: [length, H] from the rows of one sequence.
std::vector<float> cpu_dt(const Problem& pr, int64_t first_row, int64_t length) {
  const int H = pr.c.heads;
  std::vector<float> dt(length * H);
  for (int64_t t = 0; t < length; ++t)
    for (int h = 0; h < H; ++h)
      dt[t * H + h] = static_cast<float>(std::clamp<double>(cpu::softplus(pr.dt_raw(first_row + t)[h] + pr.dt_bias[h]),
                                                            pr.c.dt_min, pr.c.dt_max));
  return dt;
}

Problem make_problem(const Case& c, unsigned seed) {
  std::mt19937 rng(seed);
  Problem pr;
  pr.c = c;
  const int H = c.heads, P = c.headdim, G = c.groups, N = c.dstate;
  pr.E = int64_t(H) * P;
  pr.GN = int64_t(G) * N;
  pr.row = c.odd_rows ? pr.E + 2 * pr.GN + H + 3 : (pr.E + 2 * pr.GN + H + 3) / 4 * 4 + 4;
  pr.y_stride = c.odd_rows ? pr.E + 7 : pr.E + 8;
  pr.x16_stride = c.odd_rows ? pr.E + 3 : pr.E + 8;
  pr.bc_stride = 2 * pr.GN + 32;
  const int64_t rows = int64_t(c.batch) * c.seqlen;
  pr.inputs = testing::random_vector(rows * pr.row, -1.f, 1.f, rng);
  std::uniform_real_distribution<float> x_dist(-2.f, 2.f), dt_dist(-4.f, 1.f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = pr.inputs.data() + r * pr.row;
    for (int64_t i = 0; i < pr.E; ++i) row[i] = round_to_fp16(x_dist(rng));  // SSDi8 keeps x in fp16
    for (int h = 0; h < H; ++h) row[pr.E + 2 * pr.GN + h] = dt_dist(rng);
  }
  pr.dt_bias = testing::random_vector(H, -3.f, -1.f, rng);
  pr.A = testing::random_vector(H, c.a_lo, c.a_hi, rng);
  pr.D = testing::random_vector(H, 0.5f, 1.5f, rng);

  // B and C: per-group scales from their maxima, values fake-quantized as the layer hands them over.
  std::vector<float> b_max(G, 0.f), c_max(G, 0.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < pr.GN; ++j) {
      b_max[j / N] = std::max(b_max[j / N], std::abs(pr.B(r)[j]));
      c_max[j / N] = std::max(c_max[j / N], std::abs(pr.C(r)[j]));
    }
  for (int g = 0; g < G; ++g) {
    pr.s_B.push_back(scale_of(b_max[g]));
    pr.s_C.push_back(scale_of(c_max[g]));
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < pr.GN; ++j) {
      float* b = pr.inputs.data() + r * pr.row + pr.E + j;
      float* cc = b + pr.GN;
      *b = dequantize_value(quantize_value(*b, pr.s_B[j / N], QuantBits::kInt8), pr.s_B[j / N]);
      *cc = dequantize_value(quantize_value(*cc, pr.s_C[j / N], QuantBits::kInt8), pr.s_C[j / N]);
    }

  // X_scaled, state and CB scales from their maxima over the chunks, the state run in fp32 from zero.
  std::vector<float> xs_max(pr.E, 0.f), state_max(pr.E, 0.f), cb_max(G, 0.f), cs(c.chunk);
  for (int b = 0; b < c.batch; ++b) {
    const int64_t first = int64_t(b) * c.seqlen;
    const std::vector<float> dt = cpu_dt(pr, first, c.seqlen);
    std::vector<float> S(pr.E * N, 0.f);
    for (int start = 0; start < c.seqlen; start += c.chunk) {
      const int L = std::min(c.chunk, c.seqlen - start);
      const int64_t r0 = first + start;
      for (int g = 0; g < G; ++g)
        for (int t = 0; t < L; ++t)
          for (int s = 0; s <= t; ++s) {
            float acc = 0.f;
            for (int n = 0; n < N; ++n) acc += pr.C(r0 + t)[g * N + n] * pr.B(r0 + s)[g * N + n];
            cb_max[g] = std::max(cb_max[g], std::abs(acc));
          }
      for (int h = 0; h < H; ++h) {
        const int g = h / (H / G);
        const float* dth = dt.data() + int64_t(start) * H + h;
        chunk_cumsum(dth, H, pr.A[h], L, cs.data());
        const float decay = std::exp(cs[L - 1]);
        for (int64_t i = int64_t(h) * P * N; i < int64_t(h + 1) * P * N; ++i) S[i] *= decay;
        for (int t = 0; t < L; ++t) {
          const float lut = state_lut(cs.data(), dth, H, L, t);
          const float* bt = pr.B(r0 + t) + g * N;
          for (int p = 0; p < P; ++p) {
            const float v = lut * pr.x(r0 + t)[h * P + p];
            xs_max[h * P + p] = std::max(xs_max[h * P + p], std::abs(v));
            float* s = S.data() + (int64_t(h) * P + p) * N;
            for (int n = 0; n < N; ++n) s[n] += v * bt[n];
          }
        }
        for (int p = 0; p < P; ++p) {
          const float* s = S.data() + (int64_t(h) * P + p) * N;
          for (int n = 0; n < N; ++n) state_max[h * P + p] = std::max(state_max[h * P + p], std::abs(s[n]));
        }
      }
    }
  }
  for (int64_t i = 0; i < pr.E; ++i) {
    pr.s_xs.push_back(scale_of(xs_max[i]));
    pr.s_s.push_back(scale_of(state_max[i]));
  }
  for (int g = 0; g < G; ++g) pr.s_cb.push_back(scale_of(cb_max[g]));

  pr.state.assign(int64_t(c.batch) * pr.E * N, 0);
  if (!c.zero_state) {
    std::uniform_int_distribution<int> q(-100, 100);
    for (int8_t& v : pr.state) v = static_cast<int8_t>(q(rng));
  }
  return pr;
}

struct Outputs {
  std::vector<int8_t> state;
  std::vector<float> y;  // [batch·seqlen, y_stride]
};

Outputs cpu_reference(const Problem& pr) {
  const Case& c = pr.c;
  const int64_t E = pr.E, N = c.dstate;
  const ActQuant qB = int8_format(pr.s_B, pr.GN, N), qC = int8_format(pr.s_C, pr.GN, N);
  const ActQuant qxs = int8_format(pr.s_xs, E, 1), qs = int8_format(pr.s_s, E, 1);
  const ActQuant qcb = int8_format(pr.s_cb, c.groups, 1);
  Outputs out;
  out.state.resize(pr.state.size());
  out.y.assign(int64_t(c.batch) * c.seqlen * pr.y_stride, 0.f);
  for (int b = 0; b < c.batch; ++b) {
    const int64_t first = int64_t(b) * c.seqlen;
    const std::vector<float> dt = cpu_dt(pr, first, c.seqlen);
    std::vector<float> state(E * N), y(c.seqlen * E);
    for (int64_t i = 0; i < E * N; ++i) state[i] = dequantize_value(pr.state[b * E * N + i], pr.s_s[i / N]);
    const cpu::SsdInputs in{pr.x(first), pr.row, pr.B(first), pr.C(first), pr.row, dt.data(), pr.A.data(), pr.D.data()};
    ssdi8_chunked({c.heads, c.headdim, c.groups, c.dstate}, in, c.seqlen, c.chunk, {qB, qC, qxs, qs, qcb},
                  state.data(), y.data());
    for (int64_t i = 0; i < E * N; ++i)
      out.state[b * E * N + i] = quantize_value(state[i], pr.s_s[i / N], QuantBits::kInt8);
    for (int64_t t = 0; t < c.seqlen; ++t)
      std::copy(y.begin() + t * E, y.begin() + (t + 1) * E, out.y.begin() + (first + t) * pr.y_stride);
  }
  return out;
}

// The kernel's operands: x in fp16 (exact: the values are fp16 already), B and C as their int8 q.
std::vector<__half> x16_rows(const Problem& pr) {
  const int64_t rows = int64_t(pr.c.batch) * pr.c.seqlen;
  std::vector<__half> x(rows * pr.x16_stride, __float2half(0.f));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < pr.E; ++i) x[r * pr.x16_stride + i] = __float2half_rn(pr.x(r)[i]);
  return x;
}
std::vector<int8_t> bc_rows(const Problem& pr) {
  const int64_t rows = int64_t(pr.c.batch) * pr.c.seqlen, N = pr.c.dstate;
  std::vector<int8_t> bc(rows * pr.bc_stride, 0x55);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < pr.GN; ++j) {
      bc[r * pr.bc_stride + j] = quantize_value(pr.B(r)[j], pr.s_B[j / N], QuantBits::kInt8);
      bc[r * pr.bc_stride + pr.GN + j] = quantize_value(pr.C(r)[j], pr.s_C[j / N], QuantBits::kInt8);
    }
  return bc;
}

// The device copies of a problem's inputs.
struct DeviceProblem {
  explicit DeviceProblem(const Problem& pr)
      : inputs(pr.inputs), dt_bias(pr.dt_bias), A(pr.A), D(pr.D), s_B(pr.s_B), s_C(pr.s_C), s_xs(pr.s_xs),
        s_s(pr.s_s), s_cb(pr.s_cb), x16(x16_rows(pr)), bc(bc_rows(pr)) {}
  testing::DeviceBuffer<float> inputs, dt_bias, A, D, s_B, s_C, s_xs, s_s, s_cb;
  testing::DeviceBuffer<__half> x16;
  testing::DeviceBuffer<int8_t> bc;
};

// Arguments for rows [first_row, first_row + batch·seqlen) of the problem.
kernels::Ssdi8ChunkScanArgs make_args(const Problem& pr, const DeviceProblem& d, int batch, int seqlen,
                                      int64_t first_row, int8_t* state, float* y) {
  const Case& c = pr.c;
  kernels::Ssdi8ChunkScanArgs a;
  a.batch = batch;
  a.seqlen = seqlen;
  a.heads = c.heads;
  a.headdim = c.headdim;
  a.groups = c.groups;
  a.dstate = c.dstate;
  a.chunk = c.chunk;
  a.x = d.x16.get() + first_row * pr.x16_stride;
  a.x_stride = pr.x16_stride;
  a.Bq = d.bc.get() + first_row * pr.bc_stride;
  a.Cq = a.Bq + pr.GN;
  a.bc_stride = pr.bc_stride;
  a.dt_raw = d.inputs.get() + first_row * pr.row + pr.E + 2 * pr.GN;
  a.dt_stride = pr.row;
  a.dt_bias = d.dt_bias.get();
  a.dt_min = c.dt_min;
  a.dt_max = c.dt_max;
  a.A = d.A.get();
  a.D = d.D.get();
  a.B_scales = d.s_B.get();
  a.C_scales = d.s_C.get();
  a.x_scaled_scales = d.s_xs.get();
  a.state_scales = d.s_s.get();
  a.cb_scales = d.s_cb.get();
  a.state = state;
  a.y = y + first_row * pr.y_stride;
  a.y_stride = pr.y_stride;
  return a;
}

// tables_apart: ChunkCumsum by launch_ssdi8_chunk_tables on a second stream first (as the backend
// runs it), the scan after an event with tables_ready.
Outputs run_gpu(const Problem& pr, kernels::Ssdi8ChunkScanSchedule schedule = kernels::Ssdi8ChunkScanSchedule::kAuto,
                float dt_format = 0.f, bool tables_apart = false, int table_span = 0) {
  const Case& c = pr.c;
  DeviceProblem d(pr);
  testing::DeviceBuffer<int8_t> state(pr.state);
  // NaN everywhere: an element the kernel fails to write fails the comparison.
  testing::DeviceBuffer<float> y(std::vector<float>(int64_t(c.batch) * c.seqlen * pr.y_stride,
                                                    std::numeric_limits<float>::quiet_NaN()));
  kernels::Ssdi8ChunkScanArgs a = make_args(pr, d, c.batch, c.seqlen, 0, state.get(), y.get());
  // Garbage in the workspace: the kernels must write every byte they read.
  testing::DeviceBuffer<int8_t> workspace(std::vector<int8_t>(kernels::ssdi8_chunk_scan_workspace_bytes(a), 0x55));
  a.workspace = workspace.get();
  a.schedule = schedule;
  a.dt_format = dt_format;
  a.table_heads_per_block = table_span;
  Outputs out;
  EXPECT_TRUE(kernels::ssdi8_chunk_scan_supported(a));
  if (tables_apart) {
    cudaStream_t side = nullptr;
    cudaEvent_t done = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
    EXPECT_EQ(kernels::launch_ssdi8_chunk_tables(a, side), cudaSuccess);
    EXPECT_EQ(cudaEventRecord(done, side), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent(nullptr, done, 0), cudaSuccess);
    a.tables_ready = true;
    EXPECT_EQ(kernels::launch_ssdi8_chunk_scan(a, nullptr), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaEventDestroy(done);
    cudaStreamDestroy(side);
  } else {
    EXPECT_EQ(kernels::launch_ssdi8_chunk_scan(a, nullptr), cudaSuccess);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.state = state.to_host();
  out.y = y.to_host();
  return out;
}

// Every value within one step of the CPU's; off at all on at most 0.5 % of them (at least one).
void expect_states_within_one_step(const char* label, const std::vector<int8_t>& gpu, const std::vector<int8_t>& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size());
  int64_t off = 0, worst = 0, first_bad = -1;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const int64_t d = std::abs(int(gpu[i]) - int(cpu[i]));
    off += d != 0;
    if (d > worst) worst = d;
    if (d > 1 && first_bad < 0) first_bad = int64_t(i);
  }
  std::printf("[ %s ] state: %lld of %zu elements one step off, largest difference %lld\n", label,
              static_cast<long long>(off), gpu.size(), static_cast<long long>(worst));
  EXPECT_LE(worst, 1) << label << ": first at element " << first_bad << " (gpu " << int(gpu[first_bad]) << ", cpu "
                      << int(cpu[first_bad]) << ")";
  EXPECT_LE(off, std::max<int64_t>(1, int64_t(gpu.size()) / 200)) << label;
}

// Over the rows' first E values: |gpu - cpu| ≤ 1e-3 · max |cpu| everywhere but on at most 0.1 %
// of them, and ≤ 1e-2 · max |cpu| on those (NaN fails). The exception: a state element one step
// off (the float parts differ in the last bit) shifts its column's later outputs by C·s_s, which
// under weak decay reaches ~1e-3 of the output range.
void expect_y_close(const char* label, const Problem& pr, const std::vector<float>& gpu, const std::vector<float>& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size());
  const int64_t rows = int64_t(gpu.size()) / pr.y_stride;
  double scale = 0, worst = 0;
  int64_t first_bad = 0, bad = 0, loose = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < pr.E; ++i) scale = std::max(scale, std::abs(double(cpu[r * pr.y_stride + i])));
  const double tolerance = 1e-3 * scale + 1e-6;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < pr.E; ++i) {
      const int64_t at = r * pr.y_stride + i;
      const double d = std::abs(double(gpu[at]) - cpu[at]);
      if (!(d <= 10 * tolerance) && bad++ == 0) first_bad = at;  // NaN counts
      loose += !(d <= tolerance);
      worst = std::max(worst, d);
    }
  std::printf("[ %s ] y: max |gpu - cpu| %.3e, max |cpu| %.4g (relative %.3e), %lld beyond 1e-3\n", label, worst,
              scale, scale > 0 ? worst / scale : worst, static_cast<long long>(loose));
  EXPECT_LE(loose, std::max<int64_t>(1, rows * pr.E / 1000)) << label;
  EXPECT_EQ(bad, 0) << label << ": first at token " << first_bad / pr.y_stride << ", column "
                    << first_bad % pr.y_stride << ": gpu " << gpu[first_bad] << ", cpu " << cpu[first_bad];
}

class Ssdi8ChunkScan : public ::testing::TestWithParam<Case> {};

TEST_P(Ssdi8ChunkScan, MatchesCpuReference) {
  testing::require_device();
  const Case c = GetParam();
  const Problem pr = make_problem(c, 100u + c.seqlen * 7u + c.heads * 3u + c.dstate + c.chunk + c.batch);
  const Outputs ref = cpu_reference(pr);
  const Outputs got = run_gpu(pr);
  expect_states_within_one_step(c.name, got.state, ref.state);
  expect_y_close(c.name, pr, got.y, ref.y);
  // Whichever schedule kAuto took, the other gives the same bits (where the shape allows a split).
  const int64_t chunks = (c.seqlen + c.chunk - 1) / c.chunk;
  std::vector<kernels::Ssdi8ChunkScanSchedule> schedules = {kernels::Ssdi8ChunkScanSchedule::kWhole};
  if (chunks >= 2 && c.chunk >= c.dstate / 2 + 1) schedules.push_back(kernels::Ssdi8ChunkScanSchedule::kSplit);
  // And with ChunkCumsum launched apart on a second stream.
  for (auto schedule : schedules)
    for (bool tables_apart : {false, true}) {
      const Outputs forced = run_gpu(pr, schedule, 0.f, tables_apart);
      const std::string name = std::string(schedule == kernels::Ssdi8ChunkScanSchedule::kWhole ? "whole" : "split") +
                               (tables_apart ? ", ChunkCumsum apart" : "");
      EXPECT_EQ(forced.state, got.state) << name;
      int64_t differ = 0;
      for (size_t i = 0; i < got.y.size(); ++i)
        differ += std::memcmp(&forced.y[i], &got.y[i], sizeof(float)) != 0 && !(std::isnan(forced.y[i]) && std::isnan(got.y[i]));
      EXPECT_EQ(differ, 0) << name;
    }
  // ChunkCumsum with several heads a block (dt read in runs of them): the same values.
  for (int span : {3, 16}) {
    const Outputs spread = run_gpu(pr, kernels::Ssdi8ChunkScanSchedule::kAuto, 0.f, false, span);
    EXPECT_EQ(spread.state, got.state) << span << " heads a ChunkCumsum block";
    int64_t differ = 0;
    for (size_t i = 0; i < got.y.size(); ++i)
      differ += std::memcmp(&spread.y[i], &got.y[i], sizeof(float)) != 0 && !(std::isnan(spread.y[i]) && std::isnan(got.y[i]));
    EXPECT_EQ(differ, 0) << span << " heads a ChunkCumsum block";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Ssdi8ChunkScan,
    ::testing::Values(
        Case{"tiny_len600_b2", 2, 600, 8, 64, 1, 128, 256},
        Case{"tiny_len600_b2_weak_decay", 2, 600, 8, 64, 1, 128, 256, -0.2f, -0.01f},
        Case{"len1", 1, 1, 8, 64, 1, 128, 256},
        Case{"len17_zero_state", 1, 17, 8, 64, 1, 128, 256, -1.f, -0.05f, true},
        Case{"g2_h4_chunk64_len300_b2", 2, 300, 4, 64, 2, 128, 64, -1.f, -0.05f},
        Case{"chunk100_len250_headdim32_dstate64_g2", 2, 250, 4, 32, 2, 64, 100, -1.f, -0.05f},
        Case{"headdim48_dstate48_g3_chunk64", 2, 200, 6, 48, 3, 48, 64, -0.5f, -0.02f},
        Case{"headdim128_dstate256_chunk128", 1, 300, 4, 128, 1, 256, 128, -0.5f, -0.02f},
        Case{"b3_h16_g4_len1030_weak_decay", 3, 1030, 16, 64, 4, 128, 256, -0.1f, -0.005f},
        Case{"dt_clamped", 2, 300, 8, 64, 1, 128, 128, -1.f, -0.05f, false, 0.01f, 0.1f},
        Case{"mamba2_2p7b_heads_len300", 1, 300, 80, 64, 1, 128, 256},
        Case{"odd_rows_b2_len700", 2, 700, 8, 64, 1, 128, 256, -1.f, -0.05f, false, 0.f, 3.4e38f, true},
        Case{"odd_rows_g2_chunk64_len300", 2, 300, 4, 32, 2, 64, 64, -1.f, -0.05f, false, 0.f, 3.4e38f, true},
        // the smallest supported state and short chunks (split needs chunk ≥ dstate/2 + 1)
        Case{"headdim16_dstate16_chunk16_len100", 2, 100, 4, 16, 2, 16, 16, -1.f, -0.05f},
        Case{"dstate32_chunk24_len130", 1, 130, 4, 32, 1, 32, 24, -0.5f, -0.02f},
        // the split's phase layouts: headdim 128 and dstate 256; XqT apart from Bq (small dstate);
        // two 64-column slices a head on the unrolled dstate-128 kernel; a group per head
        Case{"split_headdim128_dstate256_chunk160", 1, 500, 16, 128, 4, 256, 160, -0.5f, -0.02f},
        Case{"xqt_apart_dstate32_chunk64", 1, 200, 32, 64, 1, 32, 64, -1.f, -0.05f},
        Case{"xqt_apart_dstate48_chunk30_g2", 1, 100, 32, 64, 2, 48, 30, -1.f, -0.05f},
        Case{"slices_headdim128_len1000", 1, 1000, 24, 128, 1, 128, 256, -0.5f, -0.02f},
        // the forced whole-sequence schedule without room for the chunk's C·Bᵀ words in shared
        // memory (read from L2 instead): 32 columns a block, 222,176 B, 249,056 B with them, against
        // 227 KB on an H100 or H200
        Case{"dstate256_chunk224_cbq_from_l2", 1, 500, 4, 64, 1, 256, 224, -0.5f, -0.02f},
        Case{"groups_equal_heads", 2, 300, 8, 64, 8, 64, 100, -1.f, -0.05f}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// Two launches that split a sequence at a chunk boundary equal one launch exactly: the second
// starts from the int8 state the first left, as the next chunk of one launch does.
TEST(Ssdi8ChunkScanCarry, TwoLaunchesEqualOneExactly) {
  testing::require_device();
  const Case c{"carry", 1, 640, 8, 64, 2, 128, 128, -0.2f, -0.01f};
  const Problem pr = make_problem(c, 77);
  const Outputs one = run_gpu(pr);
  DeviceProblem d(pr);
  testing::DeviceBuffer<int8_t> state(pr.state);
  testing::DeviceBuffer<float> y(std::vector<float>(int64_t(c.seqlen) * pr.y_stride, std::numeric_limits<float>::quiet_NaN()));
  const int first = 384;
  const int parts[2][2] = {{0, first}, {first, c.seqlen - first}};  // {first row, length}
  // One workspace for both launches, sized for the whole sequence (more chunks than either part).
  testing::DeviceBuffer<int8_t> workspace(std::vector<int8_t>(
      kernels::ssdi8_chunk_scan_workspace_bytes(make_args(pr, d, 1, c.seqlen, 0, state.get(), y.get())), 0x55));
  for (const auto& part : parts) {
    kernels::Ssdi8ChunkScanArgs a = make_args(pr, d, 1, part[1], part[0], state.get(), y.get());
    a.workspace = workspace.get();
    ASSERT_EQ(kernels::launch_ssdi8_chunk_scan(a, nullptr), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(state.to_host(), one.state);
  const std::vector<float> two = y.to_host();
  int64_t differ = 0;
  for (int64_t r = 0; r < c.seqlen; ++r)
    for (int64_t i = 0; i < pr.E; ++i) differ += !(two[r * pr.y_stride + i] == one.y[r * pr.y_stride + i]);
  EXPECT_EQ(differ, 0);
}

// dt's format applied in the kernel (dt_format: int8, fp16) equals formatting dt_raw first.
TEST(Ssdi8ChunkScanDtFormat, EqualsFormattingDtFirst) {
  testing::require_device();
  const Case c{"dt_format", 2, 300, 8, 64, 2, 128, 128, -0.2f, -0.01f};
  for (const float code : {0.013f, -1.f}) {
    Problem pr = make_problem(c, 91);
    const Outputs in_kernel = run_gpu(pr, kernels::Ssdi8ChunkScanSchedule::kAuto, code);
    for (int64_t r = 0; r < int64_t(c.batch) * c.seqlen; ++r)
      for (int64_t h = 0; h < c.heads; ++h) {
        float& v = pr.inputs[r * pr.row + pr.E + 2 * pr.GN + h];
        v = code > 0 ? dequantize_value(quantize_value(v, code, QuantBits::kInt8), code) : half_to_float(float_to_half(v));
      }
    const Outputs formatted_first = run_gpu(pr);
    EXPECT_EQ(in_kernel.state, formatted_first.state) << "code " << code;
    int64_t differ = 0;  // the rows' first E values (the padding stays NaN in both)
    for (int64_t r = 0; r < int64_t(c.batch) * c.seqlen; ++r)
      differ += std::memcmp(&in_kernel.y[r * pr.y_stride], &formatted_first.y[r * pr.y_stride], pr.E * sizeof(float)) != 0;
    EXPECT_EQ(differ, 0) << "code " << code;
  }
}

TEST(Ssdi8ChunkScanArgs, RejectsUnsupportedArguments) {
  testing::require_device();
  testing::DeviceBuffer<float> buffer(std::vector<float>(1 << 14));
  float* fp = buffer.get();
  const int8_t* bytes = reinterpret_cast<const int8_t*>(fp);
  kernels::Ssdi8ChunkScanArgs good;
  good.batch = 2;
  good.seqlen = 100;
  good.heads = 8;
  good.headdim = 64;
  good.groups = 2;
  good.dstate = 128;
  good.chunk = 256;
  good.x = reinterpret_cast<const __half*>(fp);
  good.Bq = bytes;
  good.Cq = bytes + 256;
  good.dt_raw = good.dt_bias = good.A = good.D = fp;
  good.B_scales = good.C_scales = good.x_scaled_scales = good.state_scales = good.cb_scales = fp;
  good.state = reinterpret_cast<int8_t*>(fp);
  good.y = fp;
  good.x_stride = good.y_stride = 2048;
  good.bc_stride = 1024;
  good.workspace = fp;
  good.dt_stride = 16;
  ASSERT_TRUE(kernels::ssdi8_chunk_scan_supported(good));

  struct Bad {
    const char* why;
    void (*edit)(kernels::Ssdi8ChunkScanArgs&);
  };
  const Bad bad[] = {
      {"dstate 100", [](kernels::Ssdi8ChunkScanArgs& a) { a.dstate = 100; }},
      {"dstate 272", [](kernels::Ssdi8ChunkScanArgs& a) { a.dstate = 272; }},
      {"headdim 0", [](kernels::Ssdi8ChunkScanArgs& a) { a.headdim = 0; }},
      {"headdim 97 (not a multiple of 16)", [](kernels::Ssdi8ChunkScanArgs& a) { a.headdim = 97; }},
      {"headdim 40 (not a multiple of 16)", [](kernels::Ssdi8ChunkScanArgs& a) { a.headdim = 40; }},
      {"headdim 130", [](kernels::Ssdi8ChunkScanArgs& a) { a.headdim = 130; }},
      {"chunk 0", [](kernels::Ssdi8ChunkScanArgs& a) { a.chunk = 0; }},
      {"chunk 257", [](kernels::Ssdi8ChunkScanArgs& a) { a.chunk = 257; }},
      {"heads not divisible by groups", [](kernels::Ssdi8ChunkScanArgs& a) { a.groups = 3; }},
      {"batch 0", [](kernels::Ssdi8ChunkScanArgs& a) { a.batch = 0; }},
      {"seqlen 0", [](kernels::Ssdi8ChunkScanArgs& a) { a.seqlen = 0; }},
      {"no state", [](kernels::Ssdi8ChunkScanArgs& a) { a.state = nullptr; }},
      {"no cb scales", [](kernels::Ssdi8ChunkScanArgs& a) { a.cb_scales = nullptr; }},
      {"no dt_bias", [](kernels::Ssdi8ChunkScanArgs& a) { a.dt_bias = nullptr; }},
      {"state not 16-byte aligned", [](kernels::Ssdi8ChunkScanArgs& a) { a.state += 4; }},
      {"no workspace", [](kernels::Ssdi8ChunkScanArgs& a) { a.workspace = nullptr; }},
      {"workspace not 16-byte aligned", [](kernels::Ssdi8ChunkScanArgs& a) { a.workspace = static_cast<char*>(a.workspace) + 8; }},
      {"no B", [](kernels::Ssdi8ChunkScanArgs& a) { a.Bq = nullptr; }},
      {"no C", [](kernels::Ssdi8ChunkScanArgs& a) { a.Cq = nullptr; }},
      {"B not 16-byte aligned", [](kernels::Ssdi8ChunkScanArgs& a) { a.Bq += 8; }},
      {"C not 16-byte aligned", [](kernels::Ssdi8ChunkScanArgs& a) { a.Cq += 4; }},
      {"bc_stride not a multiple of 16", [](kernels::Ssdi8ChunkScanArgs& a) { a.bc_stride = 1032; }},
      {"x_stride below a row", [](kernels::Ssdi8ChunkScanArgs& a) { a.x_stride = 8 * 64 - 1; }},
      {"bc_stride below a row", [](kernels::Ssdi8ChunkScanArgs& a) { a.bc_stride = 2 * 128 - 1; }},
      {"dt_stride below a row", [](kernels::Ssdi8ChunkScanArgs& a) { a.dt_stride = 7; }},
      {"y_stride below a row", [](kernels::Ssdi8ChunkScanArgs& a) { a.y_stride = 8 * 64 - 1; }},
  };
  for (const Bad& b : bad) {
    kernels::Ssdi8ChunkScanArgs a = good;
    b.edit(a);
    EXPECT_FALSE(kernels::ssdi8_chunk_scan_supported(a)) << b.why;
    EXPECT_EQ(kernels::launch_ssdi8_chunk_scan(a, nullptr), cudaErrorInvalidValue) << b.why;
  }
}

}  // namespace
}  // namespace ssdq
