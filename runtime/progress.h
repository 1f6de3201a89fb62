// A progress bar on stderr for long work. On a terminal it redraws one line; otherwise
// (logs, CI) it prints a line at every 10 %.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ssdq {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, std::string unit, bool enabled = true);
  ~ProgressBar();
  void update(int64_t done);
  void finish();

 private:
  void draw(bool final);
  std::string label_, unit_;
  int64_t total_, done_ = 0;
  int last_decile_ = -1;
  bool enabled_, tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace ssdq
