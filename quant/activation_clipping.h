// Choosing the largest value a static int8 activation scale represents (the clip; scale =
// clip / 127, values beyond saturate) from what calibration kept of a point: its absmax, a
// histogram of |x| (per-tensor scales) or the largest values of each channel (scales per
// segment, group, cluster or channel). export --act-clip picks the mode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ssdq {

struct ActClip {
  enum class Mode { kAbsmax, kPercentile, kMse };
  Mode mode = Mode::kAbsmax;
  double percentile = 99.99;  // kPercentile: the clip is this percentile of |x|

  // "absmax", "percentile:P" (0 < P ≤ 100) or "mse"; fails naming the flag otherwise.
  static ActClip parse(const std::string& text);
  std::string name() const;
};

// Histogram of |x| over bins [edges[b], edges[b + 1]) (edges.size() = counts.size() + 1):
// the clip for one scale shared by every value counted.
//   absmax: absmax. percentile: the upper edge of the bin holding the P-th percentile (at most absmax).
//   mse: the candidate (bin edges in [absmax / 1024, absmax], and absmax) minimising the int8
//   quantization error Σ count_b · e(x_b, c), x_b the bin's centre: (x − c)² above the clip, x² below
//   half a step (rounded to 0), step² / 12 between.
double clip_from_histogram(const std::vector<int64_t>& counts, const std::vector<float>& edges, double absmax,
                           const ActClip& clip);

// The largest values of a set of channels (the union of each channel's top values, any order),
// `count` values in all, exact above `floor` (every value of the set larger than floor is among
// them: the largest of the channels' smallest kept values). The clip for one scale shared by the set:
//   percentile: the value at that rank when it lies above floor, else floor (clipping less than asked).
//   mse: the candidate (a kept value above floor, or absmax) minimising Σ_{v > c} (v − c)² plus
//   step² / 12 for every other value (their distribution below floor is not kept).
double clip_from_top_values(std::vector<float> values, int64_t count, double floor, double absmax,
                            const ActClip& clip);

}  // namespace ssdq
