// The hook through which calibration on the GPU watches a CUDA forward at the quantization points
// (the device-side counterpart of runtime/forward_observer.h). The engine calls it with device
// pointers in stream order: whatever the observer enqueues on `stream` reads the values before the
// forward's later steps overwrite them. Only an engine that computes in fp32 between its steps
// (CudaBackendOptions::fp32_float_math) takes an observer. An observer of every point watches an
// FP32 model only; one that watches no more than out_proj's input and output (the export's
// Hessian and mean-correction passes, pipeline/cuda_layer_passes.h) also watches quantized layers,
// whose out_proj input it sees as out_proj multiplies it (after its format) and whose output
// it sees before the residual add.
#pragma once

#include <cstdint>

#include "model/activation_points.h"

struct CUstream_st;  // cudaStream_t's type

namespace ssdq {

// The inputs of a layer's SSD over a prefill (fp32 device pointers; token t of sequence b is row
// b · length + t): what calibration derives SSDi8's internals from (kernels/ssd_internals.h).
struct DeviceSsdInputs {
  int64_t batch = 0, length = 0, chunk = 0;
  const float* x = nullptr;  // [row, H·P] at x + row · x_stride
  int64_t x_stride = 0;
  const float* B = nullptr;  // [row, G·N] at B + row · bc_stride
  const float* C = nullptr;
  int64_t bc_stride = 0;
  const float* dt_raw = nullptr;  // [row, H] at dt_raw + row · dt_stride, before dt_bias and softplus
  int64_t dt_stride = 0;
  const float* dt_bias = nullptr;
  const float* A = nullptr;
  float dt_min = 0.f, dt_max = 0.f;
  const float* initial_state = nullptr;  // [batch, H, P, N] fp32: the state the SSD starts from
};

class DeviceObserver {
 public:
  virtual ~DeviceObserver() = default;
  // `rows` rows of `width` fp32 values of one point of layer `layer`, row r at data + r · stride.
  virtual void on_activation(int64_t layer, ActivationPoint point, const float* data, int64_t rows, int64_t width,
                             int64_t stride, CUstream_st* stream) = 0;
  // Before the SSD of a prefill (more than one token a sequence) runs.
  virtual void on_ssd_inputs(int64_t layer, const DeviceSsdInputs& inputs, CUstream_st* stream) = 0;
  // What the engine calls this observer for; the rest it skips.
  virtual bool watches(ActivationPoint) const { return true; }
  virtual bool watches_ssd_inputs() const { return true; }
  // Whether it watches out_proj's input or output only (then quantized layers may be watched).
  bool watches_out_proj_only() const {
    for (int p = 0; p < kActivationPointCount; ++p) {
      const auto point = static_cast<ActivationPoint>(p);
      if (watches(point) && point != ActivationPoint::kOutProjIn && point != ActivationPoint::kOutProjOut) return false;
    }
    return !watches_ssd_inputs();
  }
};

}  // namespace ssdq
