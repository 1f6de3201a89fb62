// Calibration's observer on the GPU (runtime/cuda_observer.h): every layer's statistics at every
// quantization point kept on the device (kernels/channel_stats.h), SSDi8's internals derived from
// the SSD's inputs (kernels/ssd_internals.h), and the result read back as the CalibrationStats the
// CPU's StatsObserver (pipeline/stats_observer.h) fills from the same forwards.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "calib/calibration_stats.h"
#include "formats/config.h"
#include "runtime/cuda_observer.h"

namespace ssdq {

class CudaStatsObserver : public DeviceObserver {
 public:
  // Allocates the statistics of every layer on the current device. `ssd_internals` off skips
  // X_scaled / state / CB. With `only`, just that point is watched (the export's pass C:
  // out_proj's output), and the observer may then watch a quantized layer (runtime/cuda_observer.h).
  CudaStatsObserver(const Mamba2Config& config, bool ssd_internals, std::optional<ActivationPoint> only = {});
  ~CudaStatsObserver() override;

  void on_activation(int64_t layer, ActivationPoint point, const float* data, int64_t rows, int64_t width,
                     int64_t stride, CUstream_st* stream) override;
  void on_ssd_inputs(int64_t layer, const DeviceSsdInputs& inputs, CUstream_st* stream) override;
  bool watches(ActivationPoint point) const override { return !only_ || point == *only_; }
  bool watches_ssd_inputs() const override { return !only_; }

  // Waits for `stream`; fails, naming the layer, point, row and channel, if a non-finite value
  // was seen since the last check (row: of the forward that saw it). `first_layer`: the model's
  // index of this observer's layer 0 (an engine running one layer of a larger model).
  void check_finite(CUstream_st* stream, int64_t first_layer = 0);
  // The statistics so far (waits for `stream`).
  CalibrationStats read(CUstream_st* stream) const;
  // Device bytes held (statistics and scratch).
  size_t device_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::optional<ActivationPoint> only_;
};

}  // namespace ssdq
