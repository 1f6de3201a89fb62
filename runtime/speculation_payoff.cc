#include "runtime/speculation_payoff.h"

namespace ssdq {
namespace {

// Weight of a new sample in the moving averages: a few windows decide, one outlier does not.
constexpr double kNewSampleWeight = 0.3;

void blend(double& rate, double sample) {
  rate = rate == 0 ? sample : (1 - kNewSampleWeight) * rate + kNewSampleWeight * sample;
}

}  // namespace

bool SpeculationPayoff::speculate() {
  if (!pause_.take_paused_step()) return true;
  ++paused_steps_;
  return false;
}

void SpeculationPayoff::record_step(double ms, int64_t tokens) {
  if (warm_up_calls_ && !first_step_seen_) {
    first_step_seen_ = true;
    return;
  }
  if (ms > 0 && tokens > 0) blend(step_rate_, tokens / ms);
}

void SpeculationPayoff::record_window(int64_t width, double ms, int64_t tokens) {
  if ((widths_seen_.insert(width).second && warm_up_calls_) || ms <= 0) return;
  blend(window_rate_, tokens / ms);
  if (step_rate_ == 0) {  // no plain step measured yet: two (the first is not counted)
    pause_.pause_for(warm_up_calls_ && !first_step_seen_ ? 2 : 1);
  } else if (window_rate_ < step_rate_) {
    pause_.failed();
  } else {
    pause_.succeeded();
  }
}

}  // namespace ssdq
