// A parallel loop whose reduction does not depend on the thread count: items run in waves of
// thread_count() on parallel_for, each into its own slot, and the slots are folded into the
// result in item order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/parallel.h"

namespace ssdq {

// work(i, slot) for every i in [0, count); fold(i, slot) after it, in increasing i, on the calling
// thread. make_slot() gives a fresh slot for each item.
template <typename Slot>
void ordered_parallel_fold(int64_t count, const std::function<Slot()>& make_slot,
                           const std::function<void(int64_t, Slot&)>& work,
                           const std::function<void(int64_t, Slot&)>& fold) {
  const int64_t wave = std::max<int64_t>(1, thread_count());
  for (int64_t first = 0; first < count; first += wave) {
    const int64_t items = std::min(wave, count - first);
    std::vector<Slot> slots;
    slots.reserve(items);
    for (int64_t i = 0; i < items; ++i) slots.push_back(make_slot());
    parallel_for(items, [&](int64_t i) { work(first + i, slots[i]); });
    for (int64_t i = 0; i < items; ++i) fold(first + i, slots[i]);
  }
}

}  // namespace ssdq
