// The calibration kernels against their CPU references: kernels/channel_stats.h against
// ChannelStats::add_rows (same inputs: every statistic equal, sums to double rounding), and
// kernels/ssd_internals.h against observe_ssd_internals (fp32 summation order apart).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "calib/channel_stats.h"
#include "gpu_test_util.h"
#include "kernels/channel_stats.h"
#include "kernels/ssd_internals.h"
#include "pipeline/ssd_internals.h"
#include "runtime/cpu_ops.h"

namespace ssdq {
namespace {

using testing::DeviceBuffer;

struct DeviceStats {
  int width;
  DeviceBuffer<float> absmax, top;
  DeviceBuffer<double> sums;
  DeviceBuffer<unsigned long long> histogram, first_bad;
  explicit DeviceStats(int w)
      : width(w),
        absmax(std::vector<float>(w, 0.f)),
        top(std::vector<float>(size_t(w) * ChannelStats::kTopValues, 0.f)),
        sums(std::vector<double>(w, 0.0)),
        histogram(std::vector<unsigned long long>(ChannelStats::kHistogramBins, 0)),
        first_bad(std::vector<unsigned long long>(1, std::numeric_limits<unsigned long long>::max())) {}

  void add(const DeviceBuffer<float>& data, int64_t row0, int64_t rows, int64_t stride) {
    kernels::ChannelStatsArgs a;
    a.rows = rows;
    a.width = width;
    a.data = data.get() + row0 * stride;
    a.stride = stride;
    a.absmax = absmax.get();
    a.sums = sums.get();
    a.histogram = histogram.get();
    a.top = top.get();
    a.first_bad = first_bad.get();
    DeviceBuffer<char> workspace(std::vector<char>(kernels::channel_stats_workspace_bytes(a) + 256));
    a.workspace = workspace.get();
    ASSERT_TRUE(kernels::channel_stats_supported(a));
    ASSERT_EQ(kernels::launch_channel_stats(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }

  ChannelStats read(int64_t rows) const {
    std::vector<unsigned long long> counts = histogram.to_host();
    return ChannelStats::from_parts(absmax.to_host(), sums.to_host(), rows,
                                    std::vector<int64_t>(counts.begin(), counts.end()), top.to_host());
  }
};

std::vector<float> outlier_rows(int64_t rows, int64_t stride, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> data = testing::random_vector(rows * stride, -1.f, 1.f, rng);
  std::uniform_int_distribution<int64_t> pick(0, rows * stride - 1);
  for (int i = 0; i < 200; ++i) data[pick(rng)] *= 300.f;  // outliers, so top values are not all near 1
  for (int i = 0; i < 50; ++i) data[pick(rng)] = 0.f;
  return data;
}

TEST(ChannelStatsKernel, EqualsTheCpuOverTwoCalls) {
  const int64_t rows = 3001, width = 333, stride = 340;
  const std::vector<float> host = outlier_rows(rows, stride, 7);
  const DeviceBuffer<float> data(host);
  DeviceStats gpu(width);
  gpu.add(data, 0, 1800, stride);
  gpu.add(data, 1800, rows - 1800, stride);
  ChannelStats cpu(width, true, {true, true});
  cpu.add_rows(host.data(), 1800, stride, "test");
  cpu.add_rows(host.data() + 1800 * stride, rows - 1800, stride, "test");
  const ChannelStats got = gpu.read(rows);
  EXPECT_EQ(got.absmax(), cpu.absmax());
  EXPECT_EQ(got.histogram(), cpu.histogram());
  EXPECT_EQ(got.top_values_table(), cpu.top_values_table());
  for (int64_t c = 0; c < width; ++c) EXPECT_NEAR(got.sums()[c], cpu.sums()[c], 1e-9 * (1 + std::abs(cpu.sums()[c])));
  EXPECT_EQ(gpu.first_bad.to_host()[0], std::numeric_limits<unsigned long long>::max());
}

TEST(ChannelStatsKernel, NamesTheFirstNonFiniteValue) {
  const int64_t rows = 500, width = 70;
  std::vector<float> host = outlier_rows(rows, width, 3);
  host[300 * width + 9] = std::numeric_limits<float>::infinity();
  host[120 * width + 41] = std::nanf("");
  const DeviceBuffer<float> data(host);
  DeviceStats gpu(width);
  gpu.add(data, 0, rows, width);
  EXPECT_EQ(gpu.first_bad.to_host()[0], 120u * width + 41);
}

TEST(SsdInternalsKernel, MatchesTheCpu) {
  // Two groups, a last chunk shorter than the others, a non-zero initial state.
  const int batch = 2, seqlen = 300, chunk = 128, H = 4, P = 32, G = 2, N = 32, E = H * P;
  const int64_t rows = int64_t(batch) * seqlen, x_stride = E + 2 * G * N + 8, dt_stride = H + 3;
  std::mt19937 rng(11);
  const std::vector<float> xbc = testing::random_vector(rows * x_stride, -1.f, 1.f, rng);
  const std::vector<float> dt_raw = testing::random_vector(rows * dt_stride, -4.f, 1.f, rng);
  const std::vector<float> dt_bias = testing::random_vector(H, -1.f, 0.5f, rng);
  const std::vector<float> A = testing::random_vector(H, -3.f, -0.2f, rng);
  const std::vector<float> initial = testing::random_vector(size_t(batch) * H * P * N, -0.5f, 0.5f, rng);
  const float dt_min = 0.001f, dt_max = 2.f;

  ChannelStats cpu_xs(E, true, {true, true}), cpu_state(H * P * N, false), cpu_cb(G, false, {true, true});
  for (int b = 0; b < batch; ++b) {
    std::vector<float> dt(seqlen * H);
    for (int t = 0; t < seqlen; ++t)
      for (int h = 0; h < H; ++h)
        dt[t * H + h] = std::clamp(cpu::softplus(dt_raw[(b * seqlen + t) * dt_stride + h] + dt_bias[h]), dt_min, dt_max);
    const float* x = xbc.data() + int64_t(b) * seqlen * x_stride;
    const cpu::SsdInputs in{x, x_stride, x + E, x + E + G * N, x_stride, dt.data(), A.data(), nullptr};
    observe_ssd_internals(cpu::SsdDims{H, P, G, N}, in, seqlen, chunk, initial.data() + int64_t(b) * H * P * N, cpu_xs,
                          cpu_state, cpu_cb);
  }

  const DeviceBuffer<float> d_xbc(xbc), d_dt(dt_raw), d_bias(dt_bias), d_A(A), d_initial(initial);
  DeviceBuffer<float> x_scaled(std::vector<float>(rows * E)), state_absmax(std::vector<float>(H * P * N, 0.f));
  kernels::SsdInternalsArgs a;
  a.batch = batch;
  a.seqlen = seqlen;
  a.chunk = chunk;
  a.heads = H;
  a.headdim = P;
  a.groups = G;
  a.dstate = N;
  a.x = d_xbc.get();
  a.x_stride = x_stride;
  a.B = d_xbc.get() + E;
  a.C = d_xbc.get() + E + G * N;
  a.bc_stride = x_stride;
  a.dt_raw = d_dt.get();
  a.dt_stride = dt_stride;
  a.dt_bias = d_bias.get();
  a.A = d_A.get();
  a.dt_min = dt_min;
  a.dt_max = dt_max;
  a.initial_state = d_initial.get();
  const int chunks = kernels::ssd_internals_chunks(a);
  DeviceBuffer<float> cb(std::vector<float>(size_t(batch) * chunks * G));
  a.x_scaled = x_scaled.get();
  a.state_absmax = state_absmax.get();
  a.cb = cb.get();
  DeviceBuffer<char> workspace(std::vector<char>(kernels::ssd_internals_workspace_bytes(a) + 256));
  a.workspace = workspace.get();
  ASSERT_TRUE(kernels::ssd_internals_supported(a));
  ASSERT_EQ(kernels::launch_ssd_internals(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  ChannelStats gpu_xs(E, true, {true, true}), gpu_cb(G, false, {true, true});
  const std::vector<float> xs_rows = x_scaled.to_host(), cb_rows = cb.to_host();
  gpu_xs.add_rows(xs_rows.data(), rows, E, "x_scaled");
  gpu_cb.add_rows(cb_rows.data(), int64_t(batch) * chunks, G, "cb");
  EXPECT_EQ(gpu_cb.rows(), cpu_cb.rows());
  EXPECT_LT(testing::max_relative_error(gpu_xs.absmax(), cpu_xs.absmax()), 1e-5);
  EXPECT_LT(testing::max_relative_error(state_absmax.to_host(), cpu_state.absmax()), 1e-4);
  EXPECT_LT(testing::max_relative_error(gpu_cb.top_values_table(), cpu_cb.top_values_table()), 1e-5);
  EXPECT_LT(testing::max_relative_error(gpu_xs.top_values_table(), cpu_xs.top_values_table()), 1e-5);
  const std::vector<float> got_mean = gpu_xs.mean(), want_mean = cpu_xs.mean();
  for (int c = 0; c < E; ++c) EXPECT_NEAR(got_mean[c], want_mean[c], 1e-6) << c;
}

}  // namespace
}  // namespace ssdq
