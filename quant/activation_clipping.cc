#include "quant/activation_clipping.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "formats/error.h"

namespace ssdq {
namespace {

constexpr double kLevels = 127;  // int8 activations are symmetric: ±127 steps

// Quantization error of one value x with clip c (step s = c / 127).
double value_error(double x, double c) {
  if (x > c) return (x - c) * (x - c);
  const double step = c / kLevels;
  if (x < step / 2) return x * x;
  return step * step / 12;
}

}  // namespace

ActClip ActClip::parse(const std::string& text) {
  ActClip clip;
  if (text == "absmax") return clip;
  if (text == "mse") {
    clip.mode = Mode::kMse;
    return clip;
  }
  const std::string prefix = "percentile:";
  if (text.rfind(prefix, 0) == 0) {
    const std::string number = text.substr(prefix.size());
    char* end = nullptr;
    const double p = std::strtod(number.c_str(), &end);
    if (!number.empty() && end == number.c_str() + number.size() && p > 0 && p <= 100) {
      clip.mode = Mode::kPercentile;
      clip.percentile = p;
      return clip;
    }
  }
  fail("--act-clip must be absmax, percentile:P with 0 < P <= 100, or mse; got \"{}\"", text);
}

std::string ActClip::name() const {
  switch (mode) {
    case Mode::kAbsmax: return "absmax";
    case Mode::kPercentile: return fmt::format("percentile:{}", percentile);
    case Mode::kMse: return "mse";
  }
  return "?";
}

double clip_from_histogram(const std::vector<int64_t>& counts, const std::vector<float>& edges, double absmax,
                           const ActClip& clip) {
  if (edges.size() != counts.size() + 1) fail("internal: {} histogram edges for {} bins", edges.size(), counts.size());
  if (clip.mode == ActClip::Mode::kAbsmax || absmax <= 0) return absmax;
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  if (total == 0) return absmax;
  if (clip.mode == ActClip::Mode::kPercentile) {
    const double from_top = (1 - clip.percentile / 100) * static_cast<double>(total);
    int64_t seen = 0;
    for (int64_t b = static_cast<int64_t>(counts.size()) - 1; b >= 0; --b) {
      seen += counts[b];
      if (seen > from_top) return std::min<double>(edges[b + 1], absmax);
    }
    return absmax;
  }
  std::vector<double> candidates = {absmax};
  for (float e : edges)
    if (e >= absmax / 1024 && e < absmax) candidates.push_back(e);
  double best = absmax, best_error = std::numeric_limits<double>::infinity();
  for (double c : candidates) {
    double error = 0;
    for (size_t b = 0; b < counts.size(); ++b) {
      if (counts[b] == 0) continue;
      const double centre = std::min(std::sqrt(double(edges[b]) * edges[b + 1]), absmax);
      error += counts[b] * value_error(centre, c);
    }
    if (error < best_error) best_error = error, best = c;
  }
  return best;
}

double clip_from_top_values(std::vector<float> values, int64_t count, double floor, double absmax,
                            const ActClip& clip) {
  if (clip.mode == ActClip::Mode::kAbsmax || absmax <= 0 || count <= 0) return absmax;
  std::sort(values.begin(), values.end(), std::greater<float>());
  int64_t exact = 0;  // values[0, exact) are the set's largest, in order
  while (exact < static_cast<int64_t>(values.size()) && values[exact] > floor) ++exact;
  if (clip.mode == ActClip::Mode::kPercentile) {
    const double from_top = (1 - clip.percentile / 100) * static_cast<double>(count);
    const int64_t rank = static_cast<int64_t>(std::floor(from_top));  // 0-based rank from the top
    return rank < exact ? std::min<double>(values[rank], absmax) : std::min(floor, absmax);
  }
  // Candidates from the largest down: absmax, then each kept value above floor. Clipping at
  // values[j] saturates values[0, j); the rest cost the bulk's step² / 12.
  double best = absmax, best_error = std::numeric_limits<double>::infinity();
  double above_sum = 0, above_sq = 0;  // Σ v and Σ v² over values[0, j)
  const auto consider = [&](double c, int64_t n_above) {
    const double step = c / kLevels;
    const double error =
        above_sq - 2 * c * above_sum + n_above * c * c + static_cast<double>(count - n_above) * step * step / 12;
    if (error < best_error) best_error = error, best = c;
  };
  consider(absmax, 0);
  for (int64_t j = 0; j < exact; ++j) {
    consider(std::min<double>(values[j], absmax), j);
    above_sum += values[j];
    above_sq += double(values[j]) * values[j];
  }
  return best;
}

}  // namespace ssdq
