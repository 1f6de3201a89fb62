// Inputs on which a fuzz target (fuzz/, docs/FUZZING.md) crashed a reader or made a sanitizer
// report, kept as unit tests after the fix. Under the plain build some of these pass even
// unfixed (undefined behaviour need not crash); CI also runs them under --config=asan and
// --config=ubsan, where they fail unfixed. The inputs stay in the targets' corpora as well.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "formats/config.h"
#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/safetensors.h"
#include "formats/tensor.h"

namespace ssdq {
namespace {

TEST(FuzzRegressions, EmptyFloat32TensorConvertsWithoutANullMemcpy) {
  // Found by the safetensors target on its first seed corpus: "empty" is F32 [0, 3], and
  // Tensor::to_f32 called memcpy(nullptr, data, 0) — UBSan: "null pointer passed as argument 1,
  // which is declared to never be null" (formats/tensor.cc).
  const SafetensorsFile file = read_safetensors("fuzz/corpus/safetensors/seed-all-dtypes.safetensors");
  const Tensor& empty = file.tensors.at("empty");
  EXPECT_EQ(empty.shape, (Shape{0, 3}));
  EXPECT_TRUE(empty.to_f32().empty());
  EXPECT_TRUE(Tensor::from_f32({0}, {}).to_f32().empty());
}

TEST(FuzzRegressions, HugeWholeFloatIsNotCastToAnInteger) {
  // Found by the config target against the unfixed reader within 7,000 executions:
  // {"d_model": 768888...8 (44 digits)} parses as the double 7.7e43, which is whole, and was cast
  // to int64 — UBSan: "outside the range of representable values" (formats/config.cc).
  const std::string path = "fuzz/corpus/config/regression-float-cast-overflow.json";
  try {
    parse_config_json(read_file(path), path);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("field 'd_model' must be an integer, got 7.688888888888889e+43"));
  }
}

}  // namespace
}  // namespace ssdq
