#include "runtime/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace ssdq {

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit, bool enabled)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(std::max<int64_t>(total, 1)),
      enabled_(enabled),
      tty_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  if (enabled_ && tty_ && !finished_) std::fputc('\n', stderr);
}

void ProgressBar::update(int64_t done) {
  done_ = std::min(done, total_);
  draw(false);
}

void ProgressBar::finish() {
  if (finished_) return;
  done_ = total_;
  draw(true);
  finished_ = true;
}

void ProgressBar::draw(bool final) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const double fraction = static_cast<double>(done_) / total_;
  const int decile = static_cast<int>(fraction * 10);
  if (tty_) {
    if (!final && now - last_draw_ < std::chrono::milliseconds(100)) return;
  } else if (!final && decile == last_decile_) {
    return;
  }
  last_draw_ = now;
  last_decile_ = decile;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double rate = seconds > 0 ? done_ / seconds : 0;
  const double eta = rate > 0 ? (total_ - done_) / rate : 0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(fraction * kWidth);
  const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
  const std::string line = fmt::format("{} [{}] {:5.1f}% {}/{} {} · {:.0f} {}/s · {:.0f}s left", label_, bar,
                                       100 * fraction, done_, total_, unit_, rate, unit_, eta);
  if (tty_) {
    std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace ssdq
