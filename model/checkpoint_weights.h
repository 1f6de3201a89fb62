// FP32 weights from a loaded checkpoint (any stored float dtype is upcast).
#pragma once

#include "formats/checkpoint.h"
#include "model/model_weights.h"

namespace ssdq {

ModelWeights load_fp32_weights(const Checkpoint& checkpoint);

}  // namespace ssdq
