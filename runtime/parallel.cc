#include "runtime/parallel.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace ssdq {
namespace {

int default_threads() {
  if (const char* env = std::getenv("SSDQ_THREADS")) {
    const int value = std::atoi(env);
    if (value > 0) return value;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::atomic<int> g_threads{0};

}  // namespace

int thread_count() {
  int threads = g_threads.load();
  return threads > 0 ? threads : default_threads();
}

void set_thread_count(int threads) { g_threads = std::max(1, threads); }

void parallel_for(int64_t count, const std::function<void(int64_t)>& body) {
  const int64_t workers = std::min<int64_t>(thread_count(), count);
  if (workers <= 1) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (int64_t i = next++; i < count; i = next++) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next = count;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int64_t t = 1; t < workers; ++t) threads.emplace_back(work);
  work();
  for (auto& thread : threads) thread.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace ssdq
