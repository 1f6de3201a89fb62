// The .ssdq artifact: round trips of quantized models of every kind (the same numbers out as in,
// bit for bit), refusal of malformed and newer-version files with a clear message, and nothing
// written (or overwritten) when writing or exporting fails.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

#include "pipeline/export_artifact.h"
#include "pipeline/quantize_model.h"
#include "formats/artifact.h"
#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/safetensors.h"
#include "model/model_loader.h"
#include "model/quantized_artifact.h"
#include "runtime/cpu_backend.h"
#include "tests/support/quantized_fixtures.h"

namespace ssdq {
namespace {

using ::testing::HasSubstr;
using namespace testing_models;

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

struct Case {
  RecipeName recipe;
  BitWidth bits;
  bool head_to_toe;
};

const ArtifactDescription kDescription{R"({"name":"test"})", R"({"file":"calib.safetensors"})",
                                       tokenizer_metadata("{\"model\": {}}", "abc")};

QuantizedModel exported(const Case& c) {
  static const ModelWeights w = random_weights(synthetic_config(2), 21);
  static const CalibrationFile calib = calibration_in_memory(w, 2, 64, 1);
  ExportOptions o;
  o.recipe.recipe = c.recipe;
  o.recipe.bits = c.bits;
  o.recipe.group_size = 64;
  o.recipe.head_clusters = 2;
  o.recipe.quantize_embedding = o.recipe.quantize_lm_head = c.head_to_toe;
  return quantize_model(w, calib, o);
}

TEST(Artifact, RoundTripsEveryKindOfModelBitForBit) {
  const Case cases[] = {{RecipeName::kRtn, BitWidth::kFp16, false},  {RecipeName::kRtn, BitWidth::kW8A8, false},
                        {RecipeName::kHad, BitWidth::kW4A16, false}, {RecipeName::kQuamba2, BitWidth::kW4A8, true},
                        {RecipeName::kSsdi8, BitWidth::kW8A8, true},  {RecipeName::kSsdi8, BitWidth::kW4A8, false}};
  const std::vector<int32_t> tokens = random_tokens(80, 256, 6);
  for (const Case& c : cases) {
    const std::string name = std::string(recipe_name(c.recipe)) + " " + bit_width_name(c.bits);
    const QuantizedModel model = exported(c);
    const std::string path = temp_path("round_trip.ssdq");
    write_quantized_artifact(path, model, kDescription);
    const LoadedArtifact loaded = read_quantized_artifact(path);
    SCOPED_TRACE(name);
    expect_same_model(*loaded.model, model);
    EXPECT_EQ(loaded.description.recipe, kDescription.recipe);
    EXPECT_EQ(loaded.description.calibration, kDescription.calibration);
    EXPECT_EQ(loaded.tokenizer_bytes, "{\"model\": {}}");
    EXPECT_EQ(mean_nll(CpuBackend(loaded.model), tokens),
              mean_nll(CpuBackend(std::make_shared<QuantizedModel>(model)), tokens));
    const ArtifactFile file = read_artifact(path);
    EXPECT_EQ(file.metadata.at("format"), "ssdq");
    EXPECT_EQ(file.metadata.at("format_version"), "1.0");
    if (c.head_to_toe) {
      EXPECT_TRUE(file.tensors.count(c.bits == BitWidth::kW4A8 ? "embedding.q4" : "embedding.q8"));
    }
    if (c.bits == BitWidth::kFp16) {
      EXPECT_EQ(file.tensors.at("layers.0.in_proj").dtype, DType::F16);
    }
  }
}

TEST(Artifact, BlockRotationsAreFormatTwoAndRoundTrip) {
  // export --tp-blocks: a 2.0 file whose layers carry hadamard_blocks; without blocks a file stays
  // 1.0, and a 1.x file that names blocks is refused (an older reader would have ignored them).
  static const ModelWeights w = random_weights(synthetic_config(2), 21);
  static const CalibrationFile calib = calibration_in_memory(w, 2, 64, 1);
  ExportOptions o;
  o.recipe.recipe = RecipeName::kSsdi8;
  o.recipe.bits = BitWidth::kW8A8;
  o.recipe.tp_blocks = 2;
  const QuantizedModel model = quantize_model(w, calib, o);
  const std::string path = temp_path("blocks.ssdq");
  write_quantized_artifact(path, model, kDescription);
  const LoadedArtifact loaded = read_quantized_artifact(path);
  expect_same_model(*loaded.model, model);
  for (const QuantizedLayer& q : loaded.model->layers) EXPECT_EQ(q.hadamard_blocks, 2);
  SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.metadata.at("format_version"), "2.0");
  file.metadata["format_version"] = "1.0";
  const std::string old = temp_path("blocks_old.ssdq");
  write_safetensors(old, file.tensors, file.metadata);
  EXPECT_THAT([&] { read_quantized_artifact(old); },
              ::testing::ThrowsMessage<Error>(HasSubstr("hadamard_blocks must be an integer, in a file of format 2.0")));
  o.recipe.tp_blocks = 3;  // 16 heads do not split into 3 blocks
  EXPECT_THAT([&] { quantize_model(w, calib, o); },
              ::testing::ThrowsMessage<Error>(HasSubstr("--tp-blocks 3: the model's 16 heads do not split")));
  o.recipe.recipe = RecipeName::kRtn;
  o.recipe.tp_blocks = 2;
  EXPECT_THAT([&] { quantize_model(w, calib, o); },
              ::testing::ThrowsMessage<Error>(HasSubstr("no online Hadamard transform")));
}

class MalformedArtifact : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    good_ = new std::string(temp_path("good.ssdq"));
    write_quantized_artifact(*good_, exported({RecipeName::kQuamba2, BitWidth::kW4A8, false}), kDescription);
  }
  static void TearDownTestSuite() { delete good_; }
  // Rewrites the good artifact with one change and expects the reader to refuse it.
  static void expect_refused(const std::function<void(TensorMap&, std::map<std::string, std::string>&)>& change,
                             const std::string& message) {
    SafetensorsFile file = read_safetensors(*good_);
    change(file.tensors, file.metadata);
    const std::string bad = temp_path("bad.ssdq");
    write_safetensors(bad, file.tensors, file.metadata);
    EXPECT_THAT([&] { read_quantized_artifact(bad); }, ::testing::ThrowsMessage<Error>(HasSubstr(message))) << message;
  }
  static std::string* good_;
};
std::string* MalformedArtifact::good_ = nullptr;

using Tensors = TensorMap;
using Metadata = std::map<std::string, std::string>;

TEST_F(MalformedArtifact, NewerOrUnknownFormatVersions) {
  expect_refused([](Tensors&, Metadata& m) { m["format_version"] = "3.0"; },
                 "format_version 3.0 is newer than this ssdq reads (major 2); upgrade ssdq");
  expect_refused([](Tensors&, Metadata& m) { m["format_version"] = "1"; }, "format_version \"1\" is not MAJOR.MINOR");
  expect_refused([](Tensors&, Metadata& m) { m.erase("format"); },
                 "no \"format\" in the safetensors metadata; this is not an ssdq file");
  expect_refused([](Tensors&, Metadata& m) { m["format"] = "ssdq-calibration"; },
                 "format is \"ssdq-calibration\", expected \"ssdq\"");
  // A newer minor version of the same major is read.
  SafetensorsFile file = read_safetensors(*good_);
  file.metadata["format_version"] = "1.7";
  const std::string newer_minor = temp_path("minor.ssdq");
  write_safetensors(newer_minor, file.tensors, file.metadata);
  EXPECT_NO_THROW(read_quantized_artifact(newer_minor));
}

TEST_F(MalformedArtifact, BrokenMetadata) {
  expect_refused([](Tensors&, Metadata& m) { m["layout"] = "{not json"; }, "metadata \"layout\" is not valid JSON");
  expect_refused([](Tensors&, Metadata& m) { m["calibration"] = "[1,"; }, "metadata \"calibration\" is not valid JSON");
  expect_refused([](Tensors&, Metadata& m) { m.erase("tokenizer"); }, "metadata \"tokenizer\" is missing");
  expect_refused([](Tensors&, Metadata& m) { m["model_config"] = "{\"d_model\": 128}"; }, "missing field 'n_layer'");
  expect_refused(
      [](Tensors&, Metadata& m) {
        auto layout = nlohmann::json::parse(m["layout"]);
        layout["layers"][1]["points"]["ssd.x"] = "int3";
        m["layout"] = layout.dump();
      },
      "layout gives layers.1.act.ssd.x the format \"int3\", expected fp32, fp16 or int8");
  expect_refused(
      [](Tensors&, Metadata& m) {
        auto layout = nlohmann::json::parse(m["layout"]);
        layout["layers"].erase(1);
        m["layout"] = layout.dump();
      },
      "layout describes 1 layers, the config has 2");
}

TEST_F(MalformedArtifact, BadTensors) {
  expect_refused([](Tensors& t, Metadata&) { t.erase("layers.0.in_proj.scales"); },
                 "tensor 'layers.0.in_proj.scales' is missing");
  expect_refused([](Tensors& t, Metadata&) { t.erase("layers.1.out_proj.q4"); },
                 "weight 'layers.1.out_proj' is missing");
  expect_refused([](Tensors& t, Metadata&) { t["norm_f"] = Tensor::from_f32({3}, {1, 1, 1}); },
                 "tensor 'norm_f' is F32 [3], expected F32 [128]");
  expect_refused(
      [](Tensors& t, Metadata&) {
        std::vector<float> scales = t.at("layers.0.act.ssd.x.scales").to_f32();
        scales[2] = 0;
        t["layers.0.act.ssd.x.scales"] = Tensor::from_f32({static_cast<int64_t>(scales.size())}, scales);
      },
      "layer 0 ssd.x: scale 2 is 0, expected finite > 0");
  expect_refused(
      [](Tensors& t, Metadata&) {
        const Tensor& index = t.at("layers.0.act.ssd.x.index");
        std::vector<int32_t> values(index.as<int32_t>(), index.as<int32_t>() + index.numel());
        values[5] = 999;
        t["layers.0.act.ssd.x.index"] = Tensor::from_i32(index.shape, values);
      },
      "layer 0 ssd.x: index[5] = 999 is outside 0..15");
  expect_refused([](Tensors& t, Metadata&) { t["layers.0.in_proj.group_size"] = Tensor::from_i32({1}, {0}); },
                 "tensor 'layers.0.in_proj.group_size' is 0, expected 1..128");
  expect_refused(
      [](Tensors& t, Metadata&) {
        std::vector<uint8_t> bytes(t.at("embedding").nbytes(), 0);
        bytes[1] = 0x7c;  // fp16 +inf in the first element
        t["embedding"] = Tensor::own(DType::F16, t.at("embedding").shape, bytes);
      },
      "embedding has the non-finite value inf at 0");
}

// The model's checks scan in blocks: a non-finite weight or an int8 code out of range is named at
// its index wherever it lies, in the first value, past the first blocks, or in the last value.
TEST(Artifact, ValidationNamesABadValueAnywhereInAProjection) {
  const QuantizedModel good = float_quantized_model(random_weights(synthetic_config(2), 21));
  const int64_t n = static_cast<int64_t>(good.layers[0].in_proj.dense.size());
  for (const int64_t at : {int64_t{0}, int64_t{200}, n - 1}) {
    QuantizedModel model = good;
    model.layers[0].in_proj.dense[at] = std::nanf("");
    EXPECT_THAT([&] { validate_quantized_model(model, "m"); },
                ::testing::ThrowsMessage<Error>(HasSubstr(fmt::format("layer 0 in_proj has the non-finite value nan at {}", at))));
  }
  const QuantizedModel w8 = exported({RecipeName::kHad, BitWidth::kW8A8, false});
  const int64_t codes = static_cast<int64_t>(w8.layers[0].out_proj.quantized.values.size());
  for (const int64_t at : {int64_t{130}, codes - 1}) {
    QuantizedModel model = w8;
    model.layers[0].out_proj.quantized.values[at] = -128;
    EXPECT_THAT([&] { validate_quantized_model(model, "m"); },
                ::testing::ThrowsMessage<Error>(HasSubstr(fmt::format("layer 0 out_proj: value -128 at {} is outside", at))));
  }
}

TEST(Artifact, RejectsInt8WeightsOfMinus128AndNonArtifacts) {
  QuantizedModel model = exported({RecipeName::kHad, BitWidth::kW8A8, false});
  const std::string path = temp_path("minus128.ssdq");
  write_quantized_artifact(path, model, kDescription);
  SafetensorsFile file = read_safetensors(path);
  const Tensor& q8 = file.tensors.at("layers.0.in_proj.q8");
  std::vector<uint8_t> bytes(q8.data, q8.data + q8.nbytes());
  bytes[7] = 0x80;
  file.tensors["layers.0.in_proj.q8"] = Tensor::own(DType::I8, q8.shape, bytes);
  write_safetensors(path, file.tensors, file.metadata);
  EXPECT_THAT([&] { read_quantized_artifact(path); },
              ::testing::ThrowsMessage<Error>(HasSubstr("layer 0 in_proj: value -128 at 7 is outside [-127, 127]")));
  const std::string junk = temp_path("junk.ssdq");
  std::ofstream(junk) << "not a safetensors file";
  EXPECT_THROW(read_quantized_artifact(junk), Error);
}

TEST(Artifact, WritesNothingForAnInvalidModel) {
  QuantizedModel model = exported({RecipeName::kRtn, BitWidth::kW8A8, false});
  model.layers[1].conv_in.scales[0] = std::nanf("");
  const std::string path = temp_path("invalid.ssdq");
  std::remove(path.c_str());
  EXPECT_THAT([&] { write_quantized_artifact(path, model, kDescription); },
              ::testing::ThrowsMessage<Error>(HasSubstr("layer 1 conv.in: scale 0 is nan")));
  EXPECT_FALSE(file_exists(path));
}

TEST(Artifact, ExportOfAnotherModelsStatisticsLeavesTheOutputUntouched) {
  const ModelWeights tiny = tiny_model();
  CalibrationFile calib = calibration_in_memory(tiny, 1, 32, 1);
  calib.provenance.weights_sha256 = std::string(64, '0');
  const std::string calib_path = temp_path("other.safetensors"), out = temp_path("kept.ssdq");
  write_calibration_file(calib_path, calib);
  std::ofstream(out) << "previous artifact";
  ExportRequest request{kTinyModel, calib_path, "", out};
  ExportOptions options;
  options.recipe.recipe = RecipeName::kRtn;
  EXPECT_THAT([&] { export_artifact(request, options); },
              ::testing::ThrowsMessage<Error>(HasSubstr("the statistics were computed for weights with sha256 0000")));
  EXPECT_EQ(read_file(out), "previous artifact");
}

}  // namespace
}  // namespace ssdq

namespace ssdq {
namespace {

// A layer-by-layer export interrupted after two of the bundled model's four layers leaves them in
// OUT.partial; the same export run again resumes there and writes the uninterrupted export's bytes,
// then removes the partial file. A partial file of another recipe is not resumed from.
TEST(Artifact, InterruptedExportResumesWithTheSameBytes) {
  const ModelWeights tiny = tiny_model();
  CalibrationFile calib = calibration_in_memory(tiny, 2, 64, 4);
  calib.provenance.weights_sha256 = load_model(kTinyModel).weights_sha256;
  const std::string calib_path = temp_path("resume-calib.safetensors");
  write_calibration_file(calib_path, calib);
  ExportOptions options;
  options.recipe.recipe = RecipeName::kSsdi8;  // with mean correction: the streams carry its bias
  options.recipe.bits = BitWidth::kW8A8;
  const std::string whole = temp_path("whole.ssdq"), out = temp_path("resumed.ssdq");
  std::remove(out.c_str());
  std::remove(partial_export_path(out).c_str());
  std::vector<std::string> notes;
  const auto keep = [&](const std::string& note) { notes.push_back(note); };
  ExportOptions heard = options;  // the caller hears each finished layer, the model so far
  size_t layers_heard = 0;
  heard.on_layer_done = [&](const QuantizedModel& so_far) { EXPECT_EQ(so_far.layers.size(), ++layers_heard); };
  export_artifact({kTinyModel, calib_path, "", whole}, heard, keep);
  EXPECT_EQ(layers_heard, 4u);
  EXPECT_TRUE(notes.empty());
  EXPECT_FALSE(file_exists(partial_export_path(whole)));

  ExportOptions interrupted = options;
  ExportRequest every_layer{kTinyModel, calib_path, "", out};
  every_layer.checkpoint_seconds = 0;
  interrupted.on_progress = [](const std::string& stage, int64_t, int64_t) {
    if (stage.rfind("layer 3/4", 0) == 0) throw Error("interrupted");
  };
  EXPECT_THROW(export_artifact(every_layer, interrupted), Error);
  EXPECT_FALSE(file_exists(out));
  ASSERT_TRUE(file_exists(partial_export_path(out)));
  EXPECT_EQ(read_quantized_artifact(partial_export_path(out)).model->layers.size(), 2u);

  const ExportSummary resumed = export_artifact({kTinyModel, calib_path, "", out}, options, keep);
  EXPECT_EQ(resumed.resumed_layers, 2);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("resuming from " + partial_export_path(out) + ": 2 of 4 layers done"));
  EXPECT_EQ(read_file(out), read_file(whole));
  EXPECT_FALSE(file_exists(partial_export_path(out)));

  // Interrupted as had, run again as ssdi8: starts over.
  ExportOptions had = interrupted;
  had.recipe.recipe = RecipeName::kHad;
  EXPECT_THROW(export_artifact(every_layer, had), Error);
  ASSERT_TRUE(file_exists(partial_export_path(out)));
  notes.clear();
  EXPECT_EQ(export_artifact({kTinyModel, calib_path, "", out}, options, keep).resumed_layers, 0);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("made from other inputs"));
  EXPECT_EQ(read_file(out), read_file(whole));
}

}  // namespace
}  // namespace ssdq
