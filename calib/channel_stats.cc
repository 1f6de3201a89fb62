#include "calib/channel_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "formats/error.h"

namespace ssdq {

namespace {

int64_t histogram_bin(float magnitude) {
  uint32_t bits;
  std::memcpy(&bits, &magnitude, sizeof bits);
  return (bits & 0x7fffffffu) >> 20;
}

}  // namespace

float ChannelStats::histogram_edge(int64_t bin) {
  const uint32_t bits = static_cast<uint32_t>(bin) << 20;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

ChannelStats::ChannelStats(int64_t channels, bool track_sums, ClipTracking clip)
    : absmax_(channels, 0.0f),
      sums_(track_sums ? channels : 0, 0.0),
      histogram_(clip.histogram ? kHistogramBins : 0, 0),
      top_(clip.top_values ? channels * kTopValues : 0, 0.0f) {}

void ChannelStats::offer_top(int64_t channel, float value) {
  float* heap = top_.data() + channel * kTopValues;
  if (value <= heap[0]) return;
  std::pop_heap(heap, heap + kTopValues, std::greater<float>());
  heap[kTopValues - 1] = value;
  std::push_heap(heap, heap + kTopValues, std::greater<float>());
}

std::vector<float> ChannelStats::top_values(int64_t channel) const {
  if (top_.empty()) fail("internal: these statistics do not track top values");
  std::vector<float> out(top_.begin() + channel * kTopValues, top_.begin() + (channel + 1) * kTopValues);
  std::sort(out.begin(), out.end(), std::greater<float>());
  return out;
}

std::vector<float> ChannelStats::top_values_table() const {
  std::vector<float> out;
  out.reserve(top_.size());
  for (int64_t c = 0; !top_.empty() && c < channels(); ++c) {
    const std::vector<float> row = top_values(c);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

void ChannelStats::add_rows(const float* data, int64_t rows, int64_t stride, const std::string& what) {
  const int64_t width = channels();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = data + r * stride;
    for (int64_t c = 0; c < width; ++c) {
      const float value = row[c];
      if (!std::isfinite(value))
        fail("calibration: {} has the non-finite value {} at token {}, channel {}", what, value, rows_ + r, c);
      absmax_[c] = std::max(absmax_[c], std::fabs(value));
    }
    if (!histogram_.empty())
      for (int64_t c = 0; c < width; ++c) ++histogram_[histogram_bin(std::fabs(row[c]))];
    if (!top_.empty())
      for (int64_t c = 0; c < width; ++c) offer_top(c, std::fabs(row[c]));
    if (!sums_.empty())
      for (int64_t c = 0; c < width; ++c) sums_[c] += row[c];
  }
  rows_ += rows;
}

void ChannelStats::merge(const ChannelStats& other) {
  if (other.channels() != channels() || other.sums_.size() != sums_.size() ||
      other.histogram_.size() != histogram_.size() || other.top_.size() != top_.size())
    fail("internal: merging channel statistics of different shapes ({} vs {} channels)", other.channels(), channels());
  for (int64_t c = 0; c < channels(); ++c) absmax_[c] = std::max(absmax_[c], other.absmax_[c]);
  for (size_t b = 0; b < histogram_.size(); ++b) histogram_[b] += other.histogram_[b];
  // The top values kept are the largest of both multisets whatever the order of merging.
  for (int64_t c = 0; !top_.empty() && c < channels(); ++c)
    for (int64_t k = 0; k < kTopValues; ++k) offer_top(c, other.top_[c * kTopValues + k]);
  for (size_t c = 0; c < sums_.size(); ++c) sums_[c] += other.sums_[c];
  rows_ += other.rows_;
}

std::vector<float> ChannelStats::mean() const {
  if (sums_.size() != absmax_.size()) fail("internal: these statistics do not track means");
  if (rows_ == 0) fail("internal: mean of statistics with no rows");
  std::vector<float> out(sums_.size());
  for (size_t c = 0; c < sums_.size(); ++c) out[c] = static_cast<float>(sums_[c] / static_cast<double>(rows_));
  return out;
}

ChannelStats ChannelStats::from_parts(std::vector<float> absmax, std::vector<double> sums, int64_t rows,
                                      std::vector<int64_t> histogram, std::vector<float> top_table) {
  ChannelStats stats;
  const int64_t channels = absmax.size();
  if (!histogram.empty() && static_cast<int64_t>(histogram.size()) != kHistogramBins)
    fail("internal: a histogram of {} bins, expected {}", histogram.size(), kHistogramBins);
  if (!top_table.empty() && static_cast<int64_t>(top_table.size()) != channels * kTopValues)
    fail("internal: a top-value table of {} entries for {} channels", top_table.size(), channels);
  stats.absmax_ = std::move(absmax);
  stats.sums_ = std::move(sums);
  stats.rows_ = rows;
  stats.histogram_ = std::move(histogram);
  stats.top_ = std::move(top_table);
  // Rows sorted largest first are turned back into min-heaps.
  for (int64_t c = 0; !stats.top_.empty() && c < channels; ++c) {
    float* heap = stats.top_.data() + c * kTopValues;
    std::make_heap(heap, heap + kTopValues, std::greater<float>());
  }
  return stats;
}

}  // namespace ssdq
