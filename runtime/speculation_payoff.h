// Whether speculation pays on this backend, this model and this text, measured as generation runs
// (GenerateOptions::measured_payoff, `--draft-policy measured`): the tokens per millisecond that
// verify windows yield (drafting included) against plain steps', each a moving average. While
// windows yield less, speculation pauses for 1, 2, 4 … 64 steps (doubling while it keeps not
// paying), then one window probes again. Costs depend on the backend and batch (a window on the
// CPU, or `--verify exact`, costs a step per token; a CUDA window about one step), acceptance on
// the text, so a table fixed in advance would be wrong somewhere; the measurement is not.
#pragma once

#include <cstdint>
#include <set>

#include "runtime/doubling_pause.h"

namespace ssdq {

class SpeculationPayoff {
 public:
  // `warm_up_calls`: the first step and the first window of each width are not counted, as on a
  // GPU they include one-off work (a CUDA graph captured, buffers grown); the CPU has none.
  explicit SpeculationPayoff(bool warm_up_calls) : warm_up_calls_(warm_up_calls) {}

  // Before drafting: false while paused (the call spends one paused step).
  bool speculate();
  // A plain step that produced `tokens` tokens in `ms`.
  void record_step(double ms, int64_t tokens);
  // A verify window of `width` tokens a row that produced `tokens` tokens in `ms` (drafting
  // included).
  void record_window(int64_t width, double ms, int64_t tokens);

  double step_rate() const { return step_rate_; }      // tokens per ms, 0 until measured
  double window_rate() const { return window_rate_; }  // tokens per ms, 0 until measured
  int64_t paused_steps() const { return paused_steps_; }

 private:
  bool warm_up_calls_;
  double step_rate_ = 0, window_rate_ = 0;
  bool first_step_seen_ = false;
  std::set<int64_t> widths_seen_;
  DoublingPause pause_;
  int64_t paused_steps_ = 0;
};

}  // namespace ssdq
