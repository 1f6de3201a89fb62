#include "pipeline/stats_observer.h"

#include <fmt/format.h>

#include "formats/error.h"
#include "pipeline/ssd_internals.h"

namespace ssdq {

StatsObserver::StatsObserver(const Mamba2Config& config, bool ssd_internals, int64_t only_layer)
    : config_(config),
      ssd_internals_(ssd_internals),
      only_layer_(only_layer),
      stats_(CalibrationStats::empty_for(config, only_layer)) {}

void StatsObserver::on_activation(int64_t layer, ActivationPoint point, const float* data, int64_t rows, int64_t width,
                                  int64_t stride) {
  if (only_layer_ >= 0 && layer != only_layer_) return;
  ChannelStats& stats = stats_.layers.at(layer).at(stat_point(point));
  if (width != stats.channels())
    fail("internal: {} of layer {} has {} channels, expected {}", activation_point_name(point), layer, width,
         stats.channels());
  stats.add_rows(data, rows, stride, fmt::format("layer {} {}", layer, activation_point_name(point)));
}

void StatsObserver::on_ssd_inputs(int64_t layer, const cpu::SsdDims& dims, const cpu::SsdInputs& inputs,
                                  int64_t length, int64_t chunk, const float* initial_state) {
  if (!ssd_internals_ || (only_layer_ >= 0 && layer != only_layer_)) return;
  LayerStats& stats = stats_.layers.at(layer);
  observe_ssd_internals(dims, inputs, length, chunk, initial_state, stats.at(StatPoint::kSsdXScaled),
                        stats.at(StatPoint::kSsdState), stats.at(StatPoint::kSsdCb));
}

}  // namespace ssdq
