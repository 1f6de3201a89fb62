// How quant/'s algorithms spread independent items over the cores without starting threads: the
// pipeline passes runtime/parallel.h's parallel_for as a ParallelFor; empty runs the items in
// order on this thread. Callers make the result independent of which (items write apart).
#pragma once

#include <cstdint>
#include <functional>

namespace ssdq {

using ParallelFor = std::function<void(int64_t count, const std::function<void(int64_t)>& body)>;

// body(i) for i in [0, count), through `parallel` when it is set.
inline void run_items(const ParallelFor& parallel, int64_t count, const std::function<void(int64_t)>& body) {
  if (parallel) {
    parallel(count, body);
  } else {
    for (int64_t i = 0; i < count; ++i) body(i);
  }
}

}  // namespace ssdq
