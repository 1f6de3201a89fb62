// Statistics of the SSD internals SSDi8 quantizes (X_scaled, the chunk states, CB), computed from
// the inputs of a chunked SSD call with the definitions of runtime/quantized_ssd.h.
#pragma once

#include <cstdint>

#include "calib/channel_stats.h"
#include "runtime/cpu_ops.h"

namespace ssdq {

// Adds to x_scaled ([H·P], one row per token), state ([H·P·N], one row per chunk-local state and
// one per state after StatePassing) and cb ([G], one row per chunk: the largest |C_t·B_s|, s ≤ t,
// of each group). `initial_state` [H, P, N] is the state the call starts from.
void observe_ssd_internals(const cpu::SsdDims& dims, const cpu::SsdInputs& inputs, int64_t length, int64_t chunk,
                           const float* initial_state, ChannelStats& x_scaled, ChannelStats& state, ChannelStats& cb);

}  // namespace ssdq
