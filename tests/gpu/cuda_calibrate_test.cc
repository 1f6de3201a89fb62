// Calibration on the GPU (pipeline/cuda_calibrate.h) against the CPU's (pipeline/calibrate.h) on
// the same samples: the bundled model and a synthetic model with B/C groups (ngroups 2). The
// forwards differ in fp32 summation order only (GEMMs, the SSD's recurrence against its chunked
// form), so maxima, means and top values agree to ~1e-5 of a point's scale and histograms move only
// the few values that sit at a bin edge.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "calib/calibration_stats.h"
#include "model/model_weights.h"
#include "pipeline/calibrate.h"
#include "pipeline/cuda_calibrate.h"
#include "tests/support/test_models.h"

namespace ssdq {
namespace {

double largest(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::abs(x)));
  return m;
}

void expect_close(const CalibrationStats& gpu, const CalibrationStats& cpu, double tolerance) {
  ASSERT_EQ(gpu.layers.size(), cpu.layers.size());
  for (size_t l = 0; l < cpu.layers.size(); ++l)
    for (int p = 0; p < kStatPointCount; ++p) {
      const ChannelStats& g = gpu.layers[l].points[p];
      const ChannelStats& c = cpu.layers[l].points[p];
      const std::string where = "layer " + std::to_string(l) + " " + stat_point_name(static_cast<StatPoint>(p));
      ASSERT_EQ(g.channels(), c.channels()) << where;
      EXPECT_EQ(g.rows(), c.rows()) << where;
      const double scale = std::max(largest(c.absmax()), 1e-30);
      double worst = 0;
      for (int64_t ch = 0; ch < c.channels(); ++ch) worst = std::max(worst, std::abs(double(g.absmax()[ch]) - c.absmax()[ch]));
      EXPECT_LE(worst / scale, tolerance) << where << ": maxima";
      ASSERT_EQ(g.tracks_sums(), c.tracks_sums()) << where;
      if (c.tracks_sums() && c.rows() > 0) {
        const std::vector<float> gm = g.mean(), cm = c.mean();
        double mean_worst = 0;
        for (int64_t ch = 0; ch < c.channels(); ++ch) mean_worst = std::max(mean_worst, std::abs(double(gm[ch]) - cm[ch]));
        EXPECT_LE(mean_worst / scale, tolerance) << where << ": means";
      }
      ASSERT_EQ(g.tracks_top_values(), c.tracks_top_values()) << where;
      if (c.tracks_top_values()) {
        const std::vector<float> gt = g.top_values_table(), ct = c.top_values_table();
        double top_worst = 0;
        for (size_t i = 0; i < ct.size(); ++i) top_worst = std::max(top_worst, std::abs(double(gt[i]) - ct[i]));
        EXPECT_LE(top_worst / scale, tolerance) << where << ": top values";
      }
      ASSERT_EQ(g.tracks_histogram(), c.tracks_histogram()) << where;
      if (c.tracks_histogram()) {
        int64_t moved = 0, total_g = 0, total_c = 0;
        for (int64_t b = 0; b < ChannelStats::kHistogramBins; ++b) {
          moved += std::abs(g.histogram()[b] - c.histogram()[b]);
          total_g += g.histogram()[b];
          total_c += c.histogram()[b];
        }
        EXPECT_EQ(total_g, total_c) << where;
        EXPECT_LE(double(moved), 5 * tolerance * double(total_c) + 4) << where << ": histogram";
      }
    }
}

void expect_gpu_matches_cpu(const ModelWeights& weights, int64_t samples, int64_t seqlen) {
  const std::vector<int32_t> tokens =
      testing_models::random_tokens(samples * seqlen, weights.config.vocab_size, 5);
  const CalibrationStats cpu = collect_statistics(weights, tokens, samples, seqlen);
  const CalibrationStats gpu = collect_statistics_cuda(weights, tokens, samples, seqlen, CollectOptions{}, CudaCalibration{});
  expect_close(gpu, cpu, 2e-4);
}

TEST(CudaCalibrate, BundledModelMatchesTheCpu) {
  // 600 tokens: two whole chunks of 256 and a short one.
  expect_gpu_matches_cpu(testing_models::tiny_model(), 3, 600);
}

TEST(CudaCalibrate, GroupedSyntheticModelMatchesTheCpu) {
  expect_gpu_matches_cpu(random_weights(testing_models::synthetic_config(2), 3), 4, 100);
}

TEST(CudaCalibrate, BatchesDoNotChangeTheStatistics) {
  // More rows than one batch holds: the batches' statistics fold into the same result.
  const ModelWeights weights = random_weights(testing_models::synthetic_config(4), 9);
  const int64_t seqlen = kCudaCalibrationRows / 2 + 7, samples = 3;
  const std::vector<int32_t> tokens = testing_models::random_tokens(samples * seqlen, weights.config.vocab_size, 1);
  const CalibrationStats gpu = collect_statistics_cuda(weights, tokens, samples, seqlen, CollectOptions{}, CudaCalibration{});
  const CalibrationStats cpu = collect_statistics(weights, tokens, samples, seqlen);
  expect_close(gpu, cpu, 2e-4);
}

TEST(CudaCalibrate, Tf32GemmsStayClose) {
  // TF32 rounds the projections' inputs to 10 mantissa bits: the statistics move by ~1e-3.
  const ModelWeights weights = testing_models::tiny_model();
  const std::vector<int32_t> tokens = testing_models::random_tokens(2 * 300, weights.config.vocab_size, 8);
  const CalibrationStats cpu = collect_statistics(weights, tokens, 2, 300);
  const CalibrationStats tf32 = collect_statistics_cuda(weights, tokens, 2, 300, CollectOptions{}, CudaCalibration{0, true});
  expect_close(tf32, cpu, 2e-2);
}

TEST(CudaCalibrate, RefusesAMissingDevice) {
  const ModelWeights weights = random_weights(testing_models::synthetic_config(1), 1);
  const std::vector<int32_t> tokens = testing_models::random_tokens(64, weights.config.vocab_size, 1);
  EXPECT_THROW(collect_statistics_cuda(weights, tokens, 2, 32, CollectOptions{}, CudaCalibration{64, false}), std::exception);
}

}  // namespace
}  // namespace ssdq
