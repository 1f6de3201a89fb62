// The calibrate pipeline: SSDi8's internals derived from the SSD's inputs, the statistics of a
// forward independent of the thread count and covering every point, and a run on the bundled
// model with its provenance.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "calib/calibration_stats.h"
#include "formats/digest.h"
#include "formats/file_io.h"
#include "pipeline/calibrate.h"
#include "pipeline/ssd_internals.h"
#include "runtime/cpu_backend.h"
#include "runtime/parallel.h"
#include "tests/support/calibration_checks.h"
#include "tests/support/test_models.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;
using calibration_checks::expect_same_stats;
using namespace testing_models;

TEST(SsdInternals, SingleChunkStatesEqualTheFpFinalState) {
  const Mamba2Config c = synthetic_config(2);
  const ModelWeights w = random_weights(c, 3);
  const int64_t H = c.nheads(), P = c.headdim, N = c.d_state, G = c.ngroups, T = 20;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> x(T * H * P), bc(T * 2 * G * N), dt(T * H);
  for (float& v : x) v = normal(rng);
  for (float& v : bc) v = normal(rng);
  for (float& v : dt) v = 0.05f + 0.05f * std::abs(normal(rng));
  const cpu::SsdInputs in{x.data(), H * P, bc.data(), bc.data() + G * N, 2 * G * N, dt.data(), w.layers[0].A.data(),
                          w.layers[0].D.data()};
  std::vector<float> state(H * P * N, 0.0f), zero(H * P * N, 0.0f), y(T * H * P);
  ChannelStats x_scaled(H * P, true), states(H * P * N, false), cb(G, false);
  observe_ssd_internals({H, P, G, N}, in, T, c.chunk_size, zero.data(), x_scaled, states, cb);
  cpu::ssd_chunked({H, P, G, N}, in, T, c.chunk_size, state.data(), y.data());
  EXPECT_EQ(states.rows(), 2);
  EXPECT_EQ(x_scaled.rows(), T);
  EXPECT_EQ(cb.rows(), 1);
  for (int64_t i = 0; i < H * P * N; ++i)
    ASSERT_NEAR(states.absmax()[i], std::abs(state[i]), 1e-5 * (1 + std::abs(state[i]))) << i;
  // CB's maximum is at least the largest diagonal |C_t·B_t| of each group.
  for (int64_t g = 0; g < G; ++g) {
    float diagonal = 0;
    for (int64_t t = 0; t < T; ++t) {
      float dot = 0;
      for (int64_t n = 0; n < N; ++n) dot += bc[t * 2 * G * N + G * N + g * N + n] * bc[t * 2 * G * N + g * N + n];
      diagonal = std::max(diagonal, std::abs(dot));
    }
    EXPECT_GE(cb.absmax()[g], diagonal * (1 - 1e-6f));
  }
}

TEST(CollectStatistics, IsTheSameForAnyThreadCountAndCoversEveryPoint) {
  const Mamba2Config c = synthetic_config(2);
  const ModelWeights w = random_weights(c, 11);
  const int64_t samples = 5, seqlen = 70;  // chunks of 32: two full and a partial one
  const std::vector<int32_t> tokens = random_tokens(samples * seqlen, c.vocab_size, 2);
  set_thread_count(1);
  const CalibrationStats one = collect_statistics(w, tokens, samples, seqlen);
  set_thread_count(2);
  int64_t reported = 0;
  CollectOptions options;
  options.on_progress = [&](int64_t done, int64_t total) {
    EXPECT_EQ(total, samples);
    reported = done;
  };
  const CalibrationStats two = collect_statistics(w, tokens, samples, seqlen, options);
  EXPECT_EQ(reported, samples);
  expect_same_stats(one, two);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerStats& s = one.layers[l];
    EXPECT_EQ(s.at(StatPoint::kInProjIn).rows(), samples * seqlen);
    EXPECT_EQ(s.at(StatPoint::kSsdXScaled).rows(), samples * seqlen);
    EXPECT_EQ(s.at(StatPoint::kSsdState).rows(), samples * 3 * 2);  // 3 chunks, local + passed
    EXPECT_EQ(s.at(StatPoint::kSsdCb).rows(), samples * 3);
    for (int p = 0; p < kStatPointCount; ++p) {
      const auto& maxima = s.points[p].absmax();
      EXPECT_GT(*std::max_element(maxima.begin(), maxima.end()), 0.0f) << stat_point_name(static_cast<StatPoint>(p));
    }
  }
  // The observed in_proj input of layer 0 is rmsnorm(embedding)·γ of the tokens.
  float expected = 0;
  std::vector<float> normed(c.d_model);
  for (int32_t t : tokens) {
    cpu::rmsnorm(&w.embedding[t * c.d_model], w.layers[0].norm.data(), normed.data(), 1, c.d_model, 1e-5f);
    expected = std::max(expected, std::abs(normed[0]));
  }
  EXPECT_FLOAT_EQ(one.layers[0].at(StatPoint::kInProjIn).absmax()[0], expected);
}

TEST(RunCalibration, BundledModelIsDeterministicAndRecordsProvenance) {
  CalibrationRequest request;
  request.model_dir = kTinyModel;
  request.data_files = {"examples/wikitext-2-raw/wiki.test.raw"};
  request.samples = 2;
  request.seqlen = 64;
  request.seed = 5;
  request.ssdq_version = "test";
  const CalibrationFile a = run_calibration(request, {});
  const CalibrationFile b = run_calibration(request, {});
  EXPECT_EQ(a.tokens, b.tokens);
  expect_same_stats(a.stats, b.stats);
  request.seed = 6;
  EXPECT_NE(run_calibration(request, {}).tokens, a.tokens);
  const CalibrationProvenance& p = a.provenance;
  EXPECT_EQ(p.weights_sha256, file_sha256_hex("examples/mamba2-tiny/pytorch_model.bin"));
  EXPECT_EQ(p.data_files.at(0).sha256, file_sha256_hex("examples/wikitext-2-raw/wiki.test.raw"));
  EXPECT_EQ(p.data_files.at(0).bytes, static_cast<int64_t>(read_file("examples/wikitext-2-raw/wiki.test.raw").size()));
  EXPECT_EQ(p.separator, 0);  // <|endoftext|> of the GPT-NeoX tokenizer
  EXPECT_EQ(a.tokens.size(), 128u);
}

}  // namespace
}  // namespace ssdq
