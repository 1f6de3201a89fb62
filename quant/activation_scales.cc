#include "quant/activation_scales.h"

#include <algorithm>
#include <numeric>

#include "formats/error.h"
#include "model/quantizer.h"

namespace ssdq {
namespace {

float int8_scale(float absmax) { return scale_from_absmax(absmax, QuantBits::kInt8); }

ActQuant int8_with(std::vector<float> maxima, std::vector<int32_t> index, int64_t inner = 1) {
  ActQuant a;
  a.format = ActFormat::kInt8;
  a.inner = inner;
  a.index = std::move(index);
  a.scales.resize(maxima.size());
  for (size_t i = 0; i < maxima.size(); ++i) a.scales[i] = int8_scale(maxima[i]);
  return a;
}

}  // namespace

ActQuant int8_per_tensor(const std::vector<float>& absmax) {
  return int8_with({absmax.empty() ? 0.0f : *std::max_element(absmax.begin(), absmax.end())}, {});
}

ActQuant int8_per_segment(const std::vector<float>& absmax, const std::vector<int64_t>& widths) {
  if (std::accumulate(widths.begin(), widths.end(), int64_t{0}) != static_cast<int64_t>(absmax.size()))
    fail("internal: segments do not cover the {} channels", absmax.size());
  std::vector<float> maxima(widths.size(), 0.0f);
  std::vector<int32_t> index;
  for (size_t s = 0, c = 0; s < widths.size(); ++s)
    for (int64_t i = 0; i < widths[s]; ++i, ++c) {
      maxima[s] = std::max(maxima[s], absmax[c]);
      index.push_back(static_cast<int32_t>(s));
    }
  return int8_with(std::move(maxima), std::move(index));
}

ActQuant int8_per_group(const std::vector<float>& absmax, int64_t group_width) {
  const int64_t channels = static_cast<int64_t>(absmax.size());
  if (group_width <= 0 || channels % group_width != 0)
    fail("internal: {} channels do not split into groups of {}", channels, group_width);
  std::vector<int32_t> cluster(channels);
  for (int64_t c = 0; c < channels; ++c) cluster[c] = static_cast<int32_t>(c / group_width);
  return int8_per_cluster(absmax, cluster, channels / group_width);
}

ActQuant int8_per_channel(const std::vector<float>& absmax) {
  std::vector<int32_t> index(absmax.size());
  std::iota(index.begin(), index.end(), 0);
  return int8_with(absmax, std::move(index));
}

ActQuant int8_per_cluster(const std::vector<float>& absmax, const std::vector<int32_t>& cluster_of_channel,
                          int64_t clusters) {
  if (cluster_of_channel.size() != absmax.size()) fail("internal: cluster map and maxima differ in size");
  std::vector<float> maxima(clusters, 0.0f);
  for (size_t c = 0; c < absmax.size(); ++c) {
    if (cluster_of_channel[c] < 0 || cluster_of_channel[c] >= clusters) fail("internal: cluster index out of range");
    maxima[cluster_of_channel[c]] = std::max(maxima[cluster_of_channel[c]], absmax[c]);
  }
  return int8_with(std::move(maxima), cluster_of_channel);
}

ActQuant int8_state_per_channel(const std::vector<float>& state_absmax, int64_t channels, int64_t N) {
  if (static_cast<int64_t>(state_absmax.size()) != channels * N) fail("internal: state maxima have the wrong size");
  std::vector<float> maxima(channels, 0.0f);
  for (int64_t c = 0; c < channels; ++c)
    maxima[c] = *std::max_element(state_absmax.begin() + c * N, state_absmax.begin() + (c + 1) * N);
  return int8_per_channel(maxima);
}

ActQuant int8_state_per_cluster(const std::vector<float>& state_absmax, const std::vector<int32_t>& cluster_of_channel,
                                int64_t clusters, int64_t N) {
  const int64_t channels = static_cast<int64_t>(cluster_of_channel.size());
  if (static_cast<int64_t>(state_absmax.size()) != channels * N) fail("internal: state maxima have the wrong size");
  std::vector<float> maxima(clusters * N, 0.0f);
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t n = 0; n < N; ++n) {
      float& m = maxima[cluster_of_channel[c] * N + n];
      m = std::max(m, state_absmax[c * N + n]);
    }
  return int8_with(std::move(maxima), cluster_of_channel, N);
}

}  // namespace ssdq
