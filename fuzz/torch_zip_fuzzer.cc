// parse_torch_bin (zip directory, byte order, restricted unpickler, tensor views) on arbitrary bytes.
#include <memory>
#include <vector>

#include "formats/error.h"
#include "formats/torch_bin.h"
#include "fuzz/tensor_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ssdq;
  auto owned = std::make_shared<std::vector<uint8_t>>(data, data + size);
  try {
    const TensorMap tensors = parse_torch_bin(owned, owned->data(), owned->size(), "fuzz.bin");
    fuzz::touch_tensors(tensors);
  } catch (const Error&) {
  }
  return 0;
}
