// read_safetensors_index on an arbitrary model.safetensors.index.json next to two real shards:
// a.safetensors holds "x" (F32 [2]) and "y" (I64 [1]), b.safetensors holds "z" (BF16 [3]).
#include <string>

#include "formats/error.h"
#include "formats/safetensors.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/tensor_checks.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace ssdq;
  const std::string& dir = fuzz::scratch_dir();
  write_safetensors(dir + "/a.safetensors",
                    {{"x", Tensor::from_f32({2}, {1.0f, 2.0f})},
                     {"y", Tensor::own(DType::I64, {1}, std::vector<uint8_t>(8, 7))}},
                    {{"format", "pt"}});
  write_safetensors(dir + "/b.safetensors", {{"z", Tensor::own(DType::BF16, {3}, std::vector<uint8_t>(6, 0x3f))}});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ssdq;
  const std::string path = fuzz::write_scratch_file("model.safetensors.index.json", data, size);
  try {
    const SafetensorsFile file = read_safetensors_index(path);
    fuzz::touch_tensors(file.tensors);
  } catch (const Error&) {
  }
  return 0;
}
