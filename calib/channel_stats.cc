#include "calib/channel_stats.h"

#include <algorithm>
#include <cmath>

#include "formats/error.h"

namespace ssdq {

ChannelStats::ChannelStats(int64_t channels, bool track_sums)
    : absmax_(channels, 0.0f), sums_(track_sums ? channels : 0, 0.0) {}

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
    if (!sums_.empty())
      for (int64_t c = 0; c < width; ++c) sums_[c] += row[c];
  }
  rows_ += rows;
}

void ChannelStats::merge(const ChannelStats& other) {
  if (other.channels() != channels() || other.sums_.size() != sums_.size())
    fail("internal: merging channel statistics of different shapes ({} vs {} channels)", other.channels(), channels());
  for (int64_t c = 0; c < channels(); ++c) absmax_[c] = std::max(absmax_[c], other.absmax_[c]);
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

ChannelStats ChannelStats::from_parts(std::vector<float> absmax, std::vector<double> sums, int64_t rows) {
  ChannelStats stats;
  stats.absmax_ = std::move(absmax);
  stats.sums_ = std::move(sums);
  stats.rows_ = rows;
  return stats;
}

}  // namespace ssdq
