#include "calib/calibration_stats.h"

#include <fmt/format.h>

#include "formats/error.h"

namespace ssdq {

const char* stat_point_name(StatPoint point) {
  switch (point) {
    case StatPoint::kSsdXScaled: return "ssd.x_scaled";
    case StatPoint::kSsdState: return "ssd.state";
    case StatPoint::kSsdCb: return "ssd.cb";
    default: return activation_point_name(static_cast<ActivationPoint>(static_cast<int>(point)));
  }
}

int64_t stat_point_width(const Mamba2Config& c, StatPoint point) {
  const int64_t E = c.d_inner(), GN = c.ngroups * c.d_state;
  switch (point) {
    case StatPoint::kInProjIn: return c.d_model;
    case StatPoint::kConvIn: return c.conv_dim();
    case StatPoint::kSsdX: return E;
    case StatPoint::kSsdB: return GN;
    case StatPoint::kSsdC: return GN;
    case StatPoint::kSsdDt: return c.nheads();
    case StatPoint::kSsdY: return E;
    case StatPoint::kOutProjIn: return E;
    case StatPoint::kOutProjOut: return c.d_model;
    case StatPoint::kSsdXScaled: return E;
    case StatPoint::kSsdState: return E * c.d_state;
    case StatPoint::kSsdCb: return c.ngroups;
  }
  return 0;
}

bool stat_point_tracks_mean(StatPoint point) { return point != StatPoint::kSsdState && point != StatPoint::kSsdCb; }

ClipTracking stat_point_clip_tracking(StatPoint point) {
  switch (point) {
    case StatPoint::kSsdY:
    case StatPoint::kOutProjOut:
    case StatPoint::kSsdState: return {false, false};
    case StatPoint::kInProjIn:
    case StatPoint::kSsdDt:
    case StatPoint::kOutProjIn: return {true, false};
    default: return {true, true};
  }
}

CalibrationStats CalibrationStats::empty_for(const Mamba2Config& config, int64_t only_layer) {
  CalibrationStats stats;
  stats.layers.resize(config.n_layer);
  for (int64_t l = 0; l < config.n_layer; ++l)
    for (int p = 0; p < kStatPointCount; ++p) {
      if (only_layer >= 0 && l != only_layer) continue;
      LayerStats& layer = stats.layers[l];
      const auto point = static_cast<StatPoint>(p);
      layer.points[p] =
          ChannelStats(stat_point_width(config, point), stat_point_tracks_mean(point), stat_point_clip_tracking(point));
    }
  return stats;
}

void CalibrationStats::merge(const CalibrationStats& other) {
  if (other.layers.size() != layers.size()) fail("internal: merging statistics of models with different depths");
  for (size_t l = 0; l < layers.size(); ++l)
    for (int p = 0; p < kStatPointCount; ++p) layers[l].points[p].merge(other.layers[l].points[p]);
}

}  // namespace ssdq
