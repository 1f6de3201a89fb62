#include "runtime/speculation_payoff.h"

#include <algorithm>

namespace ssdq {
namespace {

// Weight of a new sample in the moving averages: a few windows decide, one outlier does not.
constexpr double kNewSampleWeight = 0.3;
constexpr int64_t kLongestPause = 64;

}  // namespace

bool SpeculationPayoff::speculate() {
  if (pause_ == 0) return true;
  --pause_;
  ++paused_steps_;
  return false;
}

void SpeculationPayoff::update(double& rate, double sample) const {
  rate = rate == 0 ? sample : (1 - kNewSampleWeight) * rate + kNewSampleWeight * sample;
}

void SpeculationPayoff::record_step(double ms, int64_t tokens) {
  if (warm_up_calls_ && !first_step_seen_) {
    first_step_seen_ = true;
    return;
  }
  if (ms > 0 && tokens > 0) update(step_rate_, tokens / ms);
}

void SpeculationPayoff::record_window(int64_t width, double ms, int64_t tokens) {
  if ((widths_seen_.insert(width).second && warm_up_calls_) || ms <= 0) return;
  update(window_rate_, tokens / ms);
  if (step_rate_ == 0) {  // no plain step measured yet: two (the first is not counted)
    pause_ = warm_up_calls_ && !first_step_seen_ ? 2 : 1;
    return;
  }
  if (window_rate_ < step_rate_) {
    pause_ = next_pause_;
    next_pause_ = std::min(2 * next_pause_, kLongestPause);
  } else {
    next_pause_ = 1;
  }
}

}  // namespace ssdq
