// The .ssdq artifact on arbitrary bytes: read_quantized_artifact, which reads the container with
// read_artifact (safetensors, format and version, metadata) and then checks every tensor against
// the stored config before it hands out a model.
#include <string>

#include "formats/error.h"
#include "fuzz/fuzz_support.h"
#include "model/quantized_artifact.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ssdq;
  const std::string path = fuzz::write_scratch_file("fuzz.ssdq", data, size);
  try {
    const LoadedArtifact artifact = read_quantized_artifact(path);
    if (!artifact.model) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
