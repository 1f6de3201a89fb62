// Calibration statistics: per-channel statistics and their deterministic merge, the statistics
// file (round trip, refusal of bad files, nothing written on failure). The driver that fills them
// is tested in tests/pipeline/calibrate_test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "pipeline/calibrate.h"
#include "calib/calibration_file.h"
#include "calib/calibration_stats.h"
#include "calib/input_gram.h"
#include "pipeline/ssd_internals.h"
#include "formats/digest.h"
#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/safetensors.h"
#include "runtime/cpu_backend.h"
#include "runtime/parallel.h"
#include "tests/support/calibration_checks.h"
#include "tests/support/test_models.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;
using calibration_checks::expect_same_stats;
using calibration_checks::temp_path;
using namespace testing_models;


TEST(ChannelStats, MaximaSumsAndMeansOverStridedRows) {
  ChannelStats stats(3, true);
  const float rows[] = {1, -4, 2, 99, -3, 2, 0.5f, 99};  // two rows of 3 with stride 4
  stats.add_rows(rows, 2, 4, "test");
  EXPECT_EQ(stats.absmax(), (std::vector<float>{3, 4, 2}));
  EXPECT_EQ(stats.mean(), (std::vector<float>{-1, -1, 1.25f}));
  ChannelStats other(3, true);
  const float more[] = {-7, 0, 0};
  other.add_rows(more, 1, 3, "test");
  stats.merge(other);
  EXPECT_EQ(stats.absmax(), (std::vector<float>{7, 4, 2}));
  EXPECT_EQ(stats.rows(), 3);
  EXPECT_FLOAT_EQ(stats.mean()[0], -3.0f);
}

// InputGram's Hessian is 2/n · Σ x xᵀ, whole and symmetric, whether the sums were added here or
// came from elsewhere as a column-major lower triangle (the GPU's); dimensions that are not whole
// tiles of its copy.
TEST(InputGram, HessianIsTwiceTheMeanOuterProduct) {
  for (int64_t dim : {1, 70, 130}) {
    std::mt19937 rng(static_cast<unsigned>(dim));
    std::normal_distribution<float> normal;
    const int64_t rows = 37;
    std::vector<float> x(rows * dim);
    for (float& v : x) v = normal(rng);
    InputGram gram(dim);
    gram.add_rows(x.data(), rows, dim);
    std::vector<double> lower(dim * dim, -1.0);  // the upper triangle must not be read
    for (int64_t c = 0; c < dim; ++c)
      for (int64_t r = c; r < dim; ++r) {
        double sum = 0;
        for (int64_t t = 0; t < rows; ++t) sum += double(x[t * dim + r]) * x[t * dim + c];
        lower[c * dim + r] = sum;
      }
    const std::vector<double> from_sums = InputGram::from_sums(dim, rows, lower).hessian();
    const std::vector<double> added = gram.hessian();
    for (int64_t i = 0; i < dim; ++i)
      for (int64_t j = 0; j < dim; ++j) {
        const double expected = lower[std::min(i, j) * dim + std::max(i, j)] * (2.0 / rows);
        EXPECT_EQ(from_sums[i * dim + j], expected) << dim << ": " << i << ", " << j;
        EXPECT_NEAR(added[i * dim + j], expected, 1e-9 * (1 + std::fabs(expected))) << dim << ": " << i << ", " << j;
      }
  }
}

// Over the cores (a ParallelFor that runs the items in reverse order, as threads may), the Hessian,
// merge and fp32 sums added from elsewhere (the GPU's Grams) give the bits of one thread, and
// add_sums gives what merging the same sums as fp64 gives.
TEST(InputGram, PiecesOverTheCoresGiveTheBitsOfOneThread) {
  const ParallelFor reversed = [](int64_t count, const std::function<void(int64_t)>& body) {
    for (int64_t i = count - 1; i >= 0; --i) body(i);
  };
  for (int64_t dim : {1, 70, 130}) {
    std::mt19937 rng(static_cast<unsigned>(dim + 5));
    std::normal_distribution<float> normal;
    std::vector<float> x(50 * dim), fp32_sums(dim * dim);
    for (float& v : x) v = normal(rng);
    for (float& v : fp32_sums) v = normal(rng);
    InputGram one(dim), many(dim);
    one.add_rows(x.data(), 50, dim);
    many.add_rows(x.data(), 50, dim);
    InputGram other(dim);
    other.add_rows(x.data(), 20, dim);
    one.merge(other);
    many.merge(other, reversed);
    EXPECT_EQ(one.hessian(), many.hessian(reversed)) << dim;
    const std::vector<double> as_fp64(fp32_sums.begin(), fp32_sums.end());
    one.merge(InputGram::from_sums(dim, 9, as_fp64));
    many.add_sums(fp32_sums.data(), 9, reversed);
    EXPECT_EQ(one.rows(), many.rows());
    EXPECT_EQ(one.hessian(), many.hessian(reversed)) << dim;
    // Made in the Gram's own storage: the same values.
    EXPECT_EQ(std::move(many).hessian(reversed), one.hessian()) << dim;
  }
}

TEST(ChannelStats, RejectsNonFiniteValuesNamingThePoint) {
  ChannelStats stats(2, false);
  const float bad[] = {1, NAN};
  EXPECT_THAT([&] { stats.add_rows(bad, 1, 2, "layer 3 ssd.x"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("layer 3 ssd.x has the non-finite value nan at token 0, channel 1")));
  EXPECT_THAT([&] { stats.mean(); }, ::testing::ThrowsMessage<Error>(HasSubstr("do not track means")));
}

// With one chunk and a zero initial state, the chunk-local state is the final state and the
// state after StatePassing is the same: both maxima equal |final state| of the FP SSD.
CalibrationFile small_file() {
  const Mamba2Config c = synthetic_config(2);
  const ModelWeights w = random_weights(c, 4);
  CalibrationFile file;
  file.config = c;
  file.provenance.samples = 2;
  file.provenance.seqlen = 40;
  file.provenance.seed = 9;
  file.provenance.separator = 0;
  file.provenance.data_files = {{"data.jsonl", std::string(64, 'a'), 123}};
  file.provenance.model_dir = "model";
  file.provenance.weights_file = "model/pytorch_model.bin";
  file.provenance.weights_sha256 = std::string(64, 'b');
  file.provenance.tokenizer_file = "tokenizer.json";
  file.provenance.tokenizer_sha256 = std::string(64, 'c');
  file.provenance.ssdq_version = "test";
  file.tokens = random_tokens(80, c.vocab_size, 1);
  file.stats = collect_statistics(w, file.tokens, 2, 40);
  return file;
}

TEST(CalibrationFile, RoundTrips) {
  const CalibrationFile file = small_file();
  const std::string path = temp_path("round_trip.safetensors");
  write_calibration_file(path, file);
  const CalibrationFile back = read_calibration_file(path);
  EXPECT_EQ(back.tokens, file.tokens);
  EXPECT_EQ(back.config.d_model, file.config.d_model);
  EXPECT_EQ(back.config.ngroups, file.config.ngroups);
  EXPECT_EQ(back.config.chunk_size, file.config.chunk_size);
  EXPECT_EQ(back.provenance.seed, 9u);
  EXPECT_EQ(back.provenance.data_files[0].bytes, 123);
  EXPECT_EQ(back.provenance.weights_sha256, file.provenance.weights_sha256);
  EXPECT_EQ(back.provenance.forward, "cpu fp32");
  expect_same_stats(back.stats, file.stats);
}

TEST(CalibrationFile, RecordsWhereTheForwardsRan) {
  CalibrationFile file = small_file();
  file.provenance.forward = "cuda:1 fp32, TF32 GEMMs";
  const std::string path = temp_path("forward.safetensors"), older = temp_path("older.safetensors");
  write_calibration_file(path, file);
  EXPECT_EQ(read_calibration_file(path).provenance.forward, "cuda:1 fp32, TF32 GEMMs");
  // A file written before the key existed reads as the CPU's.
  SafetensorsFile raw = read_safetensors(path);
  std::string& provenance = raw.metadata.at("provenance");
  const size_t at = provenance.find(",\"forward\"");
  ASSERT_NE(at, std::string::npos) << provenance;
  provenance.erase(at, provenance.find('"', provenance.find(':', at) + 2) + 1 - at);
  write_safetensors(older, raw.tensors, raw.metadata);
  EXPECT_EQ(read_calibration_file(older).provenance.forward, "cpu fp32");
}

// Rewrites the file with one change to its tensors or metadata.
void rewrite(const std::string& from, const std::string& to,
             const std::function<void(TensorMap&, std::map<std::string, std::string>&)>& change) {
  SafetensorsFile file = read_safetensors(from);
  change(file.tensors, file.metadata);
  write_safetensors(to, file.tensors, file.metadata);
}

TEST(CalibrationFile, RefusesBadFilesWithAClearMessage) {
  const std::string good = temp_path("good.safetensors"), bad = temp_path("bad.safetensors");
  write_calibration_file(good, small_file());
  auto expect_refused = [&](const std::function<void(TensorMap&, std::map<std::string, std::string>&)>& change,
                            const std::string& message) {
    rewrite(good, bad, change);
    EXPECT_THAT([&] { read_calibration_file(bad); }, ::testing::ThrowsMessage<Error>(HasSubstr(message))) << message;
  };
  expect_refused([](TensorMap&, auto& m) { m["format_version"] = "2.0"; },
                 "format_version 2.0 is newer than this ssdq reads (major 1); upgrade ssdq");
  expect_refused([](TensorMap&, auto& m) { m["format"] = "ssdq"; }, "format is \"ssdq\", expected \"ssdq-calibration\"");
  expect_refused([](TensorMap&, auto& m) { m.erase("provenance"); }, "metadata \"provenance\" is missing");
  expect_refused([](TensorMap& t, auto&) { t.erase("layers.1.ssd.state.absmax"); },
                 "tensor 'layers.1.ssd.state.absmax' is missing");
  expect_refused([](TensorMap& t, auto&) { t["tokens"] = Tensor::from_i32({2, 40}, std::vector<int32_t>(80, 256)); },
                 "tokens[0] = 256 is outside the vocabulary (0..255)");
  expect_refused([](TensorMap& t, auto&) { t["layers.0.ssd.x.absmax"] = Tensor::from_f32({3}, {1, 2, 3}); },
                 "tensor 'layers.0.ssd.x.absmax' is F32 [3], expected F32 [256]");
  expect_refused(
      [](TensorMap& t, auto&) {
        std::vector<float> maxima(16, 1.0f);
        maxima[3] = -1;
        t["layers.0.ssd.dt.absmax"] = Tensor::from_f32({16}, maxima);
      },
      "tensor 'layers.0.ssd.dt.absmax' has -1 at channel 3, expected a finite value >= 0");
  expect_refused([](TensorMap&, auto& m) { m["provenance"] = "{\"seed\": 1}"; }, "provenance lacks");
  expect_refused(
      [](TensorMap& t, auto&) {
        std::vector<int64_t> counts(ChannelStats::kHistogramBins, 0);
        counts[5] = 1;
        t["layers.0.ssd.x.histogram"] = Tensor::from_i64({ChannelStats::kHistogramBins}, counts);
      },
      "tensor 'layers.0.ssd.x.histogram' counts 1 values, but the point saw 80 rows of 256 channels");
  expect_refused(
      [](TensorMap& t, auto&) {
        const Tensor& top = t.at("layers.1.ssd.B.top");
        std::vector<float> values(top.as<float>(), top.as<float>() + top.numel());
        std::swap(values[0], values[1]);  // no longer largest first
        t["layers.1.ssd.B.top"] = Tensor::from_f32(top.shape, values);
      },
      "tensor 'layers.1.ssd.B.top' channel 0 entry 1");
}

TEST(ChannelStats, TopValuesAndHistogramAreExactAndIndependentOfMergeOrder) {
  const int64_t channels = 3, rows = 500;
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  std::vector<float> data(rows * channels);
  for (float& v : data) v = normal(rng);
  data[7 * channels + 1] = -40.0f;  // a planted outlier in channel 1
  const ClipTracking both{true, true};
  ChannelStats whole(channels, false, both), first(channels, false, both), second(channels, false, both);
  whole.add_rows(data.data(), rows, channels, "x");
  first.add_rows(data.data(), 200, channels, "x");
  second.add_rows(data.data() + 200 * channels, rows - 200, channels, "x");
  ChannelStats forward = first, backward = second;
  forward.merge(second);
  backward.merge(first);
  EXPECT_EQ(forward.top_values_table(), whole.top_values_table());
  EXPECT_EQ(backward.top_values_table(), whole.top_values_table());
  EXPECT_EQ(forward.histogram(), whole.histogram());
  for (int64_t c = 0; c < channels; ++c) {
    std::vector<float> column;
    for (int64_t r = 0; r < rows; ++r) column.push_back(std::abs(data[r * channels + c]));
    std::sort(column.begin(), column.end(), std::greater<float>());
    column.resize(ChannelStats::kTopValues);
    EXPECT_EQ(whole.top_values(c), column) << "channel " << c;
  }
  EXPECT_EQ(whole.top_values(1)[0], 40.0f);
  int64_t total = 0, at_least_one = 0;
  for (int64_t b = 0; b < ChannelStats::kHistogramBins; ++b) {
    total += whole.histogram()[b];
    if (ChannelStats::histogram_edge(b) >= 1.0f) at_least_one += whole.histogram()[b];
  }
  EXPECT_EQ(total, rows * channels);
  int64_t expected_at_least_one = 0;
  for (float v : data) expected_at_least_one += std::abs(v) >= 1.0f;
  EXPECT_EQ(at_least_one, expected_at_least_one);  // 1.0 is a bin edge
}

TEST(CalibrationFile, WritesNothingWhenTheContentsAreInconsistent) {
  CalibrationFile file = small_file();
  file.tokens.pop_back();
  const std::string path = temp_path("never.safetensors");
  std::remove(path.c_str());
  EXPECT_THAT([&] { write_calibration_file(path, file); }, ::testing::ThrowsMessage<Error>(HasSubstr("79 tokens")));
  EXPECT_FALSE(file_exists(path));
}

}  // namespace
}  // namespace ssdq
