// parse_safetensors on arbitrary bytes; what parses is written back out and must read back the same.
#include <cstring>
#include <memory>
#include <vector>

#include "formats/error.h"
#include "formats/safetensors.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/tensor_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ssdq;
  auto owned = std::make_shared<std::vector<uint8_t>>(data, data + size);
  SafetensorsFile file;
  try {
    file = parse_safetensors(owned, owned->data(), owned->size(), "fuzz.safetensors");
  } catch (const Error&) {
    return 0;
  }
  fuzz::touch_tensors(file.tensors);

  const std::string path = fuzz::scratch_dir() + "/roundtrip.safetensors";
  try {
    write_safetensors(path, file.tensors, file.metadata);
  } catch (const Error&) {
    return 0;  // names or metadata that are not UTF-8 cannot be written as JSON
  }
  const SafetensorsFile again = read_safetensors(path);
  if (again.metadata != file.metadata || again.tensors.size() != file.tensors.size()) __builtin_trap();
  for (const auto& [name, tensor] : file.tensors) {
    const Tensor& copy = again.tensors.at(name);
    if (copy.dtype != tensor.dtype || copy.shape != tensor.shape) __builtin_trap();
    if (tensor.nbytes() != 0 && std::memcmp(copy.data, tensor.data, tensor.nbytes()) != 0) __builtin_trap();
  }
  return 0;
}
