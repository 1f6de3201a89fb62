// Per-channel statistics of one activation point over calibration tokens: the largest |value| and
// the sum (for the mean) of every channel. Every granularity a recipe uses (per tensor, head,
// (head, headdim), group, (group, state), cluster) is a maximum over a subset of these channels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ssdq {

class ChannelStats {
 public:
  ChannelStats() = default;
  // `track_sums`: also keep per-channel sums (means); off for very wide points like the SSM state.
  ChannelStats(int64_t channels, bool track_sums);

  int64_t channels() const { return static_cast<int64_t>(absmax_.size()); }
  bool tracks_sums() const { return sums_.size() == absmax_.size(); }
  int64_t rows() const { return rows_; }

  // `rows` rows of channels() values, row r at data + r * stride. Fails on a NaN or infinity,
  // naming `what` (the point), the row and the channel.
  void add_rows(const float* data, int64_t rows, int64_t stride, const std::string& what);
  // Folds `other` (same shape) in: max of maxima, sum of sums. Merging per-sample statistics in
  // sample order gives the same bits whatever the thread count.
  void merge(const ChannelStats& other);

  const std::vector<float>& absmax() const { return absmax_; }
  // Per-channel mean over all rows; fails when sums are not tracked or no row was added.
  std::vector<float> mean() const;
  const std::vector<double>& sums() const { return sums_; }

  // For the statistics file reader.
  static ChannelStats from_parts(std::vector<float> absmax, std::vector<double> sums, int64_t rows);

 private:
  std::vector<float> absmax_;
  std::vector<double> sums_;
  int64_t rows_ = 0;
};

}  // namespace ssdq
