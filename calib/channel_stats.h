// Per-channel statistics of one activation point over calibration tokens: the largest |value| and
// the sum (for the mean) of every channel. Every granularity a recipe uses (per tensor, head,
// (head, headdim), group, (group, state), cluster) is a maximum over a subset of these channels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ssdq {

// What an activation-clipping search needs (export --act-clip): a histogram of |x| over every
// channel, and each channel's largest values. Bounded in size whatever the token count.
struct ClipTracking {
  bool histogram = false;   // kHistogramBins counts of |x| (all channels pooled)
  bool top_values = false;  // the kTopValues largest |x| of every channel
};

class ChannelStats {
 public:
  // |x| binned by its float bits: 8 bins per octave over the whole float range (bin b holds
  // |x| in [edge(b), edge(b + 1)), edge(b) the float with bits b << 20).
  static constexpr int64_t kHistogramBins = 2048;
  static constexpr int64_t kTopValues = 32;
  static float histogram_edge(int64_t bin);

  ChannelStats() = default;
  // `track_sums`: also keep per-channel sums (means); off for very wide points like the SSM state.
  ChannelStats(int64_t channels, bool track_sums, ClipTracking clip = {});

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

  bool tracks_histogram() const { return !histogram_.empty(); }
  bool tracks_top_values() const { return !top_.empty(); }
  // Counts of |x| per bin (empty when not tracked).
  const std::vector<int64_t>& histogram() const { return histogram_; }
  // Channel c's kTopValues largest |x|, largest first (zeros where fewer values were seen).
  std::vector<float> top_values(int64_t channel) const;
  // Every channel's top values, [channels, kTopValues], each row largest first (the file layout).
  std::vector<float> top_values_table() const;

  // For the statistics file reader (histogram and top table may be empty: not tracked).
  static ChannelStats from_parts(std::vector<float> absmax, std::vector<double> sums, int64_t rows,
                                 std::vector<int64_t> histogram = {}, std::vector<float> top_table = {});

 private:
  void offer_top(int64_t channel, float value);

  std::vector<float> absmax_;
  std::vector<double> sums_;
  int64_t rows_ = 0;
  std::vector<int64_t> histogram_;
  std::vector<float> top_;  // per channel a min-heap of kTopValues values (smallest at the front)
};

}  // namespace ssdq
