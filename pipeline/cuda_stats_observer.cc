#include "pipeline/cuda_stats_observer.h"

#include <cuda_runtime.h>

#include <array>
#include <cstring>
#include <limits>
#include <vector>

#include "formats/error.h"
#include "kernels/channel_stats.h"
#include "kernels/ssd_internals.h"
#include "runtime/cuda_resources.h"

namespace ssdq {
namespace {

static_assert(kernels::kChannelStatsHistogramBins == ChannelStats::kHistogramBins);
static_assert(kernels::kChannelStatsTopValues == ChannelStats::kTopValues);

// Where one point's statistics live in the statistics block (offsets; 0-sized parts unused).
struct PointSlots {
  int64_t channels = 0;
  bool sums = false, histogram = false, top = false;
  size_t absmax_at = 0, sums_at = 0, histogram_at = 0, top_at = 0;
};

// Scratch that grows to the largest call; growing waits for the stream first, since earlier
// launches may still read the old block.
struct Scratch {
  DeviceBlock block;
  void* get(size_t bytes, cudaStream_t stream, const char* what) {
    if (bytes > block.bytes()) {
      cuda_ok(cudaStreamSynchronize(stream), "synchronize before growing calibration scratch");
      block = DeviceBlock();
      block = DeviceBlock(align_up(bytes), what, nullptr);
    }
    return block.at<void>(0);
  }
};

}  // namespace

struct CudaStatsObserver::Impl {
  Mamba2Config config;
  bool ssd_internals = true;
  std::vector<std::array<PointSlots, kStatPointCount>> slots;
  std::vector<std::array<int64_t, kStatPointCount>> rows;
  DeviceBlock stats;       // every layer's statistics
  DeviceBlock first_bad;   // [layers, kStatPointCount] u64: first non-finite flat index, or max
  Scratch stats_workspace, x_scaled, cb_rows, internals_workspace;

  PointSlots& at(int64_t layer, StatPoint p) { return slots.at(layer)[static_cast<int>(p)]; }
  unsigned long long* bad_flag(int64_t layer, StatPoint p) const {
    return first_bad.at<unsigned long long>((layer * kStatPointCount + static_cast<int>(p)) * 8);
  }

  void fold(int64_t layer, StatPoint p, const float* data, int64_t n_rows, int64_t width, int64_t stride,
            cudaStream_t stream) {
    const PointSlots& s = at(layer, p);
    if (width != s.channels)
      fail("internal: {} of layer {} has {} channels, expected {}", stat_point_name(p), layer, width, s.channels);
    kernels::ChannelStatsArgs a;
    a.rows = n_rows;
    a.width = static_cast<int>(width);
    a.data = data;
    a.stride = stride;
    a.absmax = stats.at<float>(s.absmax_at);
    a.sums = s.sums ? stats.at<double>(s.sums_at) : nullptr;
    a.histogram = s.histogram ? stats.at<unsigned long long>(s.histogram_at) : nullptr;
    a.top = s.top ? stats.at<float>(s.top_at) : nullptr;
    a.first_bad = bad_flag(layer, p);
    a.workspace = stats_workspace.get(kernels::channel_stats_workspace_bytes(a), stream, "calibration statistics scratch");
    cuda_ok(kernels::launch_channel_stats(a, stream), "channel statistics");
    rows[layer][static_cast<int>(p)] += n_rows;
  }
};

CudaStatsObserver::CudaStatsObserver(const Mamba2Config& config, bool ssd_internals, std::optional<ActivationPoint> only)
    : impl_(std::make_unique<Impl>()), only_(only) {
  Impl& m = *impl_;
  m.config = config;
  m.ssd_internals = ssd_internals;
  m.slots.resize(config.n_layer);
  m.rows.assign(config.n_layer, {});
  Layout layout;
  for (int64_t l = 0; l < config.n_layer; ++l)
    for (int p = 0; p < kStatPointCount; ++p) {
      const StatPoint point = static_cast<StatPoint>(p);
      PointSlots& s = m.slots[l][p];
      const ClipTracking clip = stat_point_clip_tracking(point);
      s.channels = stat_point_width(config, point);
      s.sums = stat_point_tracks_mean(point);
      s.histogram = clip.histogram;
      s.top = clip.top_values;
      s.absmax_at = layout.add(s.channels * 4);
      if (s.sums) s.sums_at = layout.add(s.channels * 8);
      if (s.histogram) s.histogram_at = layout.add(ChannelStats::kHistogramBins * 8);
      if (s.top) s.top_at = layout.add(s.channels * ChannelStats::kTopValues * 4);
    }
  m.stats = DeviceBlock(layout.total(), "calibration statistics", nullptr);
  cuda_ok(cudaMemset(m.stats.at<void>(0), 0, layout.total()), "cudaMemset");
  m.first_bad = DeviceBlock(config.n_layer * kStatPointCount * 8, "calibration checks", nullptr);
  cuda_ok(cudaMemset(m.first_bad.at<void>(0), 0xff, m.first_bad.bytes()), "cudaMemset");
}

CudaStatsObserver::~CudaStatsObserver() = default;

void CudaStatsObserver::on_activation(int64_t layer, ActivationPoint point, const float* data, int64_t rows,
                                      int64_t width, int64_t stride, CUstream_st* stream) {
  impl_->fold(layer, stat_point(point), data, rows, width, stride, stream);
}

void CudaStatsObserver::on_ssd_inputs(int64_t layer, const DeviceSsdInputs& in, CUstream_st* stream) {
  Impl& m = *impl_;
  if (!m.ssd_internals) return;
  const Mamba2Config& c = m.config;
  const int64_t E = c.d_inner(), M = in.batch * in.length;
  kernels::SsdInternalsArgs a;
  a.batch = static_cast<int>(in.batch);
  a.seqlen = static_cast<int>(in.length);
  a.chunk = static_cast<int>(in.chunk);
  a.heads = static_cast<int>(c.nheads());
  a.headdim = static_cast<int>(c.headdim);
  a.groups = static_cast<int>(c.ngroups);
  a.dstate = static_cast<int>(c.d_state);
  a.x = in.x;
  a.x_stride = in.x_stride;
  a.B = in.B;
  a.C = in.C;
  a.bc_stride = in.bc_stride;
  a.dt_raw = in.dt_raw;
  a.dt_stride = in.dt_stride;
  a.dt_bias = in.dt_bias;
  a.A = in.A;
  a.dt_min = in.dt_min;
  a.dt_max = in.dt_max;
  a.initial_state = in.initial_state;
  const int64_t chunk_rows = in.batch * kernels::ssd_internals_chunks(a);
  a.x_scaled = static_cast<float*>(m.x_scaled.get(M * E * 4, stream, "calibration X_scaled rows"));
  a.cb = static_cast<float*>(m.cb_rows.get(chunk_rows * c.ngroups * 4, stream, "calibration CB rows"));
  const PointSlots& state = m.at(layer, StatPoint::kSsdState);
  a.state_absmax = m.stats.at<float>(state.absmax_at);
  a.workspace = m.internals_workspace.get(kernels::ssd_internals_workspace_bytes(a), stream, "calibration SSD scratch");
  if (!kernels::ssd_internals_supported(a))
    fail("calibration on CUDA: no SSD-internals kernel for headdim {} × d_state {} (chunk {}); use --device cpu",
         c.headdim, c.d_state, c.chunk_size);
  cuda_ok(kernels::launch_ssd_internals(a, stream), "SSD internals");
  m.rows[layer][static_cast<int>(StatPoint::kSsdState)] += 2 * chunk_rows;
  m.fold(layer, StatPoint::kSsdXScaled, a.x_scaled, M, E, E, stream);
  m.fold(layer, StatPoint::kSsdCb, a.cb, chunk_rows, c.ngroups, c.ngroups, stream);
}

void CudaStatsObserver::check_finite(CUstream_st* stream, int64_t first_layer) {
  Impl& m = *impl_;
  std::vector<unsigned long long> bad(m.config.n_layer * kStatPointCount);
  cuda_ok(cudaStreamSynchronize(stream), "calibration forward");
  cuda_ok(cudaMemcpy(bad.data(), m.first_bad.at<void>(0), bad.size() * 8, cudaMemcpyDeviceToHost), "read checks");
  for (size_t i = 0; i < bad.size(); ++i) {
    if (bad[i] == std::numeric_limits<unsigned long long>::max()) continue;
    const int64_t layer = static_cast<int64_t>(i) / kStatPointCount;
    const StatPoint p = static_cast<StatPoint>(i % kStatPointCount);
    const int64_t width = m.at(layer, p).channels;
    fail("layer {} {} has a non-finite value at row {} of a forward, channel {}", first_layer + layer,
         stat_point_name(p), static_cast<int64_t>(bad[i]) / width, static_cast<int64_t>(bad[i]) % width);
  }
}

CalibrationStats CudaStatsObserver::read(CUstream_st* stream) const {
  const Impl& m = *impl_;
  cuda_ok(cudaStreamSynchronize(stream), "calibration forward");
  std::vector<char> host(m.stats.bytes());
  cuda_ok(cudaMemcpy(host.data(), m.stats.at<void>(0), host.size(), cudaMemcpyDeviceToHost), "read statistics");
  const auto copy = [&](auto* out, size_t at, size_t count) { std::memcpy(out, host.data() + at, count * sizeof(*out)); };
  CalibrationStats result;
  result.layers.resize(m.config.n_layer);
  for (int64_t l = 0; l < m.config.n_layer; ++l)
    for (int p = 0; p < kStatPointCount; ++p) {
      const PointSlots& s = m.slots[l][p];
      std::vector<float> absmax(s.channels), top(s.top ? s.channels * ChannelStats::kTopValues : 0);
      std::vector<double> sums(s.sums ? s.channels : 0);
      std::vector<unsigned long long> counts(s.histogram ? ChannelStats::kHistogramBins : 0);
      copy(absmax.data(), s.absmax_at, absmax.size());
      copy(sums.data(), s.sums_at, sums.size());
      copy(counts.data(), s.histogram_at, counts.size());
      copy(top.data(), s.top_at, top.size());
      std::vector<int64_t> histogram(counts.begin(), counts.end());
      result.layers[l].points[p] =
          ChannelStats::from_parts(std::move(absmax), std::move(sums), m.rows[l][p], std::move(histogram), std::move(top));
    }
  return result;
}

size_t CudaStatsObserver::device_bytes() const {
  const Impl& m = *impl_;
  return m.stats.bytes() + m.first_bad.bytes() + m.stats_workspace.block.bytes() + m.x_scaled.block.bytes() +
         m.cb_rows.block.bytes() + m.internals_workspace.block.bytes();
}

}  // namespace ssdq
