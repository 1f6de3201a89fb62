// Reads torch.save checkpoints in the zip format (PyTorch >= 1.6, e.g. pytorch_model.bin)
// without Python and without running anything from the file: data.pkl goes through the
// restricted Unpickler, storages are the zip's data/<key> entries.
//
// Names: the top-level object must be a dict. Nested dicts, lists and tuples are flattened to
// dotted names: {"model": {"w": t}} gives "model.w", {"layers": [t0, t1]} gives "layers.0" and
// "layers.1", int keys are written in decimal. A wrapped state dict ({"model": ...},
// {"state_dict": ...}) therefore keeps its prefix; strip it where the loader knows the layout.
// Values that are not tensors (ints, floats, strings, None, ...) are skipped.
//
// Tensors: contiguous ones point into the buffer (keepalive = the owner); non-contiguous views
// (transposes, slices with strides, expands) are copied out contiguously. Names that refer to
// the same pickled tensor (tied weights) share one Tensor. Every size, stride and offset is
// checked against its storage first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "formats/tensor.h"

namespace ssdq {

// A plain attribute of an argparse.Namespace beside the tensors (Megatron-LM's "args"). Other
// objects (enum members, lists) are kOther, with a short description in `text`.
struct PickledScalar {
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kOther } kind = Kind::kNone;
  int64_t int_value = 0;  // kBool, kInt
  double float_value = 0;
  std::string text;  // kStr; kOther's description
};
using PickledScalars = std::map<std::string, PickledScalar>;

struct TorchCheckpoint {
  TensorMap tensors;
  std::map<std::string, PickledScalars> namespaces;  // root key -> its argparse.Namespace attributes
};

// Memory-maps the file; contiguous tensors point into the map and keep it alive.
TensorMap read_torch_bin(const std::string& path);
TorchCheckpoint read_torch_checkpoint(const std::string& path);

// The same over a buffer that `owner` keeps alive; `label` names the source in errors.
TensorMap parse_torch_bin(std::shared_ptr<const void> owner, const uint8_t* data, size_t size,
                          const std::string& label);
TorchCheckpoint parse_torch_checkpoint(std::shared_ptr<const void> owner, const uint8_t* data, size_t size,
                                       const std::string& label);

}  // namespace ssdq
