// parse_config_json on arbitrary text; an accepted config must give consistent derived widths
// (no overflow) and a tensor list that canonicalize_tensors can check.
#include <string_view>

#include "formats/checkpoint.h"
#include "formats/config.h"
#include "formats/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ssdq;
  Mamba2Config config;
  try {
    config = parse_config_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  } catch (const Error&) {
    return 0;
  }
  if (config.parameter_count() <= 0 || config.summary().empty()) __builtin_trap();
  try {
    canonicalize_tensors({}, config, "fuzz");
    __builtin_trap();  // an empty checkpoint must miss tensors
  } catch (const Error&) {
  }
  return 0;
}
