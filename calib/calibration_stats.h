// What calibration records for a model: per layer, ChannelStats at every quantization point of
// docs/QUANTIZATION.md ("Quantization points"), in the model's original channel order
// (pipeline/stats_observer.h fills them from a forward).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "calib/channel_stats.h"
#include "formats/config.h"
#include "model/activation_points.h"

namespace ssdq {

// The activation points of model/activation_points.h, then three SSD internals derived from the
// SSD inputs (SSDi8 §4.2, definitions in runtime/quantized_ssd.h):
//   ssd.x_scaled  LUT_state ⊙ x inside ChunkState, channels (h, p): [H·P]
//   ssd.state     chunk-local states and the states after StatePassing, channels (h, p, n): [H·P·N]
//   ssd.cb        C·Bᵀ within a chunk (causal part s ≤ t), one channel per group: [G]
enum class StatPoint : int {
  kInProjIn, kConvIn, kSsdX, kSsdB, kSsdC, kSsdDt, kSsdY, kOutProjIn, kOutProjOut,
  kSsdXScaled, kSsdState, kSsdCb,
};
inline constexpr int kStatPointCount = 12;

inline StatPoint stat_point(ActivationPoint point) { return static_cast<StatPoint>(static_cast<int>(point)); }
const char* stat_point_name(StatPoint point);
// Channels of a point for a config.
int64_t stat_point_width(const Mamba2Config& config, StatPoint point);
// Means are tracked everywhere but at ssd.state (H·P·N wide, and no recipe needs its mean).
bool stat_point_tracks_mean(StatPoint point);
// What the clipping search (export --act-clip) keeps of a point: a histogram where a static int8
// scale is set from it, top values per channel where scales are per segment, group, cluster or
// channel. Nothing at ssd.y / out_proj.out (no scale) or ssd.state (H·P·N wide; absmax only).
ClipTracking stat_point_clip_tracking(StatPoint point);

struct LayerStats {
  std::array<ChannelStats, kStatPointCount> points;
  ChannelStats& at(StatPoint p) { return points[static_cast<int>(p)]; }
  const ChannelStats& at(StatPoint p) const { return points[static_cast<int>(p)]; }
};

struct CalibrationStats {
  std::vector<LayerStats> layers;

  // only_layer >= 0: statistics of that layer only (the others have no channels).
  static CalibrationStats empty_for(const Mamba2Config& config, int64_t only_layer = -1);
  void merge(const CalibrationStats& other);
};

}  // namespace ssdq
