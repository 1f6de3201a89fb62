// The hook through which calibration watches a forward at the quantization points of
// docs/QUANTIZATION.md ("Quantization points"). A backend calls it only when an observer is attached to the state it runs, so
// the forward without one does no extra work.
#pragma once

#include <cstdint>

#include "model/activation_points.h"
#include "runtime/cpu_ops.h"

namespace ssdq {

class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  // `rows` tokens of `width` values of one point of layer `layer`; row r starts at data + r * stride.
  virtual void on_activation(int64_t layer, ActivationPoint point, const float* data, int64_t rows, int64_t width,
                             int64_t stride) = 0;
  // The inputs of a chunked SSD call (prefill of `length` tokens) just before it runs, and the state
  // [H, P, N] it starts from; calibration derives the SSD internals (X_scaled, states, CB) from them.
  virtual void on_ssd_inputs(int64_t layer, const cpu::SsdDims& dims, const cpu::SsdInputs& inputs, int64_t length,
                             int64_t chunk, const float* initial_state) = 0;
};

}  // namespace ssdq
