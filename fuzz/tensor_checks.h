// Reads every byte of every tensor a reader returned and converts it to fp32, so a tensor that
// points outside its buffer shows up as an AddressSanitizer report.
#pragma once

#include <cstdint>

#include "formats/tensor.h"

namespace ssdq::fuzz {

inline void touch_tensors(const TensorMap& tensors) {
  volatile uint8_t sink = 0;
  for (const auto& [name, tensor] : tensors) {
    (void)name;
    const size_t bytes = tensor.nbytes();
    if (bytes != 0 && tensor.data == nullptr) __builtin_trap();
    uint8_t sum = 0;
    for (size_t i = 0; i < bytes; ++i) sum = static_cast<uint8_t>(sum + tensor.data[i]);
    sink = static_cast<uint8_t>(sink + sum);
    const auto values = tensor.to_f32();
    if (static_cast<int64_t>(values.size()) != tensor.numel()) __builtin_trap();
  }
  (void)sink;
}

}  // namespace ssdq::fuzz
