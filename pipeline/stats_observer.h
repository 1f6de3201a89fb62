// The observer calibration attaches to a forward (runtime/forward_observer.h): it fills a
// CalibrationStats (calib/calibration_stats.h) with every activation point's values and, from the
// SSD's inputs, SSDi8's internals (pipeline/ssd_internals.h).
#pragma once

#include <cstdint>

#include "calib/calibration_stats.h"
#include "formats/config.h"
#include "runtime/forward_observer.h"

namespace ssdq {

// Fills a CalibrationStats from the forwards it watches (one sequence at a time: not thread-safe).
// `ssd_internals` off skips X_scaled / state / CB, which cost a second pass over the SSD;
// only_layer >= 0 records that layer only.
class StatsObserver : public ForwardObserver {
 public:
  explicit StatsObserver(const Mamba2Config& config, bool ssd_internals = true, int64_t only_layer = -1);
  void on_activation(int64_t layer, ActivationPoint point, const float* data, int64_t rows, int64_t width,
                     int64_t stride) override;
  void on_ssd_inputs(int64_t layer, const cpu::SsdDims& dims, const cpu::SsdInputs& inputs, int64_t length,
                     int64_t chunk, const float* initial_state) override;

  CalibrationStats& stats() { return stats_; }

 private:
  Mamba2Config config_;
  bool ssd_internals_;
  int64_t only_layer_;
  CalibrationStats stats_;
};

}  // namespace ssdq
