// A back-off for speculation: after a failure, pause for 1, 2, 4 … 64 steps (doubling while the
// failures go on), short again after a success. Used per sequence by the adaptive draft length
// (a window that accepted nothing) and per batch by the measured payoff (windows that yield less
// than plain steps).
#pragma once

#include <algorithm>
#include <cstdint>

namespace ssdq {

class DoublingPause {
 public:
  static constexpr int64_t kLongest = 64;
  // Whether this step is paused; a paused step is spent.
  bool take_paused_step() {
    if (left_ == 0) return false;
    --left_;
    return true;
  }
  void failed() {
    left_ = next_;
    next_ = std::min(2 * next_, kLongest);
  }
  void succeeded() { next_ = 1; }
  // Pauses for `steps` steps without changing the next failure's pause.
  void pause_for(int64_t steps) { left_ = steps; }

 private:
  int64_t left_ = 0, next_ = 1;
};

}  // namespace ssdq
