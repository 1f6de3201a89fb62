// The clip search of export --act-clip on synthetic distributions with planted outliers: MSE finds
// (within the histogram's resolution) the clip a brute-force search over the samples finds, the
// percentile lands on the sample percentile, and the top-value search agrees with both where its
// data reaches; the flag's parser refuses malformed modes.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "calib/channel_stats.h"
#include "formats/error.h"
#include "quant/activation_clipping.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;

// Σ (q(x) − x)² of symmetric int8 round-to-nearest with clip c over the samples.
double int8_error(const std::vector<float>& values, double c) {
  const double step = c / 127;
  double error = 0;
  for (float v : values) {
    const double q = std::clamp(std::nearbyint(std::abs(v) / step), 0.0, 127.0) * step;
    error += (q - std::abs(v)) * (q - std::abs(v));
  }
  return error;
}

// `count` standard normal values with the given outliers planted among them.
std::vector<float> gaussian_with_outliers(int64_t count, const std::vector<float>& outliers) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  for (size_t i = 0; i < outliers.size(); ++i) values[(i + 1) * (count / (outliers.size() + 1))] = outliers[i];
  return values;
}

// Two outliers among a million values: saturating them costs far less than the resolution they take.
std::vector<float> rare_outliers() { return gaussian_with_outliers(1000000, {100.f, -90.f}); }
// Twenty among 200,000: saturating them costs about what it saves, so the best clip stays near them.
std::vector<float> many_outliers() {
  std::vector<float> outliers;
  for (int i = 0; i < 20; ++i) outliers.push_back((i % 2 ? -1.f : 1.f) * (60.f + i));
  return gaussian_with_outliers(200000, outliers);
}

// The clip minimising int8_error over a grid 1 % apart (and absmax).
double brute_force_clip(const std::vector<float>& values, double absmax) {
  double best = absmax, best_error = int8_error(values, absmax);
  for (double c = 0.5; c < absmax; c *= 1.01)
    if (const double e = int8_error(values, c); e < best_error) best_error = e, best = c;
  return best;
}

std::vector<float> edges() {
  std::vector<float> out;
  for (int64_t b = 0; b <= ChannelStats::kHistogramBins; ++b)
    out.push_back(b < ChannelStats::kHistogramBins ? ChannelStats::histogram_edge(b) : 3.4e38f);
  return out;
}

ChannelStats one_channel(const std::vector<float>& values) {
  ChannelStats stats(1, false, ClipTracking{true, true});
  stats.add_rows(values.data(), values.size(), 1, "test");
  return stats;
}

TEST(ActClip, ParsesTheThreeModesAndRefusesOthers) {
  EXPECT_EQ(ActClip::parse("absmax").mode, ActClip::Mode::kAbsmax);
  EXPECT_EQ(ActClip::parse("mse").mode, ActClip::Mode::kMse);
  const ActClip p = ActClip::parse("percentile:99.9");
  EXPECT_EQ(p.mode, ActClip::Mode::kPercentile);
  EXPECT_DOUBLE_EQ(p.percentile, 99.9);
  EXPECT_EQ(p.name(), "percentile:99.9");
  for (const char* bad : {"percentile:", "percentile:0", "percentile:101", "percentile:9x", "MSE", ""})
    EXPECT_THAT([&] { ActClip::parse(bad); }, ::testing::ThrowsMessage<Error>(HasSubstr("--act-clip must be")))
        << bad;
}

TEST(ClipFromHistogram, MseMatchesABruteForceSearchOverTheSamples) {
  for (const std::vector<float>& values : {rare_outliers(), many_outliers()}) {
    const ChannelStats stats = one_channel(values);
    const double absmax = stats.absmax()[0];
    const double chosen = clip_from_histogram(stats.histogram(), edges(), absmax, ActClip::parse("mse"));
    const double best = brute_force_clip(values, absmax);
    std::printf("%zu values, absmax %.1f: brute-force clip %.3f (error %.1f), histogram MSE clip %.3f (error %.1f), "
                "absmax error %.1f\n",
                values.size(), absmax, best, int8_error(values, best), chosen, int8_error(values, chosen),
                int8_error(values, absmax));
    EXPECT_LT(int8_error(values, chosen), 1.05 * int8_error(values, best));
    EXPECT_LT(chosen, absmax);
    EXPECT_EQ(clip_from_histogram(stats.histogram(), edges(), absmax, ActClip{}), absmax);
  }
  // Rare outliers are saturated: the clip lands in the bulk, a fraction of the error of absmax.
  const std::vector<float> rare = rare_outliers();
  const ChannelStats stats = one_channel(rare);
  const double chosen = clip_from_histogram(stats.histogram(), edges(), 100, ActClip::parse("mse"));
  EXPECT_LT(chosen, 30);  // the brute-force optimum is 26.8
  EXPECT_LT(int8_error(rare, chosen), 0.5 * int8_error(rare, 100));
}

TEST(ClipFromHistogram, PercentileIsTheSamplePercentileToOneBin) {
  const std::vector<float> values = many_outliers();
  const ChannelStats stats = one_channel(values);
  std::vector<float> sorted;
  for (float v : values) sorted.push_back(std::abs(v));
  std::sort(sorted.begin(), sorted.end());
  for (double p : {99.0, 99.9, 99.99}) {
    const double sample = sorted[static_cast<size_t>(std::ceil(p / 100 * sorted.size())) - 1];
    const double chosen = clip_from_histogram(stats.histogram(), edges(), stats.absmax()[0], ActClip::parse(
                                                                                               fmt::format("percentile:{}", p)));
    EXPECT_GE(chosen, sample) << p;              // the upper edge of the bin holding it
    EXPECT_LE(chosen, sample * 1.0906) << p;     // bins are 2^(1/8) wide
  }
}

TEST(ClipFromTopValues, AgreesWithTheBruteForceSearchAboveTheFloor) {
  // One channel with 20 outliers among 200,000 values: the top 32 hold every outlier and the 12
  // largest normal values, so both searches stay inside the exact region.
  const std::vector<float> values = many_outliers();
  const ChannelStats stats = one_channel(values);
  const std::vector<float> top = stats.top_values(0);
  const double absmax = stats.absmax()[0], floor = top.back();
  const double mse = clip_from_top_values(top, values.size(), floor, absmax, ActClip::parse("mse"));
  EXPECT_LT(int8_error(values, mse), 1.02 * int8_error(values, brute_force_clip(values, absmax)));
  EXPECT_LT(mse, absmax);
  // 99.99 %: rank floor(0.0001 · 200,000) = 20 from the top (0-based), the largest normal value.
  const double p = clip_from_top_values(top, values.size(), floor, absmax, ActClip::parse("percentile:99.99"));
  EXPECT_EQ(p, top[20]);
  EXPECT_LT(p, 60);
  // Deeper than the values kept: the floor (clipping less than asked, never more).
  EXPECT_EQ(clip_from_top_values(top, values.size(), floor, absmax, ActClip::parse("percentile:99")), floor);
  EXPECT_EQ(clip_from_top_values(top, values.size(), floor, absmax, ActClip{}), absmax);
}

}  // namespace
}  // namespace ssdq
