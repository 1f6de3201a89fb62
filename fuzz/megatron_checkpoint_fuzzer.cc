// A Megatron-LM rank file on arbitrary bytes: parse_torch_checkpoint (zip, restricted unpickler
// with argparse.Namespace, enums, BytesIO, NumPy states) and then the model's assembly from the
// args (hyper-parameters, hybrid refusal, name mapping, shape checks) as one shard.
#include <memory>
#include <vector>

#include "formats/error.h"
#include "formats/megatron_checkpoint.h"
#include "fuzz/tensor_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ssdq;
  auto owned = std::make_shared<std::vector<uint8_t>>(data, data + size);
  try {
    std::vector<TorchCheckpoint> shards;
    shards.push_back(parse_torch_checkpoint(owned, owned->data(), owned->size(), "fuzz.pt"));
    const Checkpoint checkpoint = assemble_megatron_checkpoint(shards, {"fuzz.pt"}, "release");
    fuzz::touch_tensors(checkpoint.tensors);
  } catch (const Error&) {
  }
  return 0;
}
