// A minimal fork-join loop over the machine's cores.
#pragma once

#include <cstdint>
#include <functional>

namespace ssdq {

// Threads used by parallel_for: SSDQ_THREADS if set, else the hardware concurrency.
int thread_count();
void set_thread_count(int threads);

// Runs body(i) for i in [0, count) on up to thread_count() threads; rethrows the first
// exception a body threw after all threads have joined.
void parallel_for(int64_t count, const std::function<void(int64_t)>& body);

}  // namespace ssdq
