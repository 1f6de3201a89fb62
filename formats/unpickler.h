// A restricted pickle VM for the data.pkl of torch.save checkpoints. It understands the
// opcodes of protocols 2..5 and emulates only the few callables a tensor state dict needs
// (collections.OrderedDict, torch._utils._rebuild_tensor_v2/_v3, torch._utils._rebuild_parameter);
// the storage classes and dtypes of torch are accepted as plain values. Megatron-LM checkpoints
// also hold objects: their `args` (argparse.Namespace), enum members from megatron.* modules
// inside it, TransformerEngine's extra state (_io.BytesIO) and NumPy RNG states. Those become
// Object values (class name, constructor arguments, attributes) built as plain data: no class is
// looked up and no constructor runs. Any other global is refused at the opcode that names it,
// so nothing from the file is ever executed or imported.
// Tensors come out as records (storage key, dtype, offset, size, stride); reading their bytes
// is the caller's job (see torch_bin.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "formats/dtype.h"
#include "formats/tensor.h"

namespace ssdq {

// A storage named by persistent_load: ('storage', storage_type, key, location, numel).
struct PickledStorage {
  std::string key;       // the zip entry is <archive>/data/<key>
  DType dtype;           // from the storage class; U8 for torch.UntypedStorage
  bool untyped = false;  // torch.UntypedStorage: numel counts bytes
  int64_t numel = 0;
  std::string location;  // "cpu", "cuda:0", ...
  int64_t nbytes() const { return numel * static_cast<int64_t>(dtype_size(dtype)); }
};

// A tensor rebuilt by _rebuild_tensor_v2/_v3: offset, size and stride count elements of dtype.
struct PickledTensor {
  std::shared_ptr<const PickledStorage> storage;
  DType dtype;
  int64_t storage_offset = 0;
  Shape size;
  Shape stride;
};

struct PickleValue;
using PickleValuePtr = std::shared_ptr<PickleValue>;

struct PickleValue {
  enum class Kind { None, Bool, Int, BigInt, Float, Str, Bytes, Tuple, List, Set, Dict, Global, Storage, Tensor, Object };
  enum class GlobalId {
    None, OrderedDict, RebuildTensorV2, RebuildTensorV3, RebuildParameter, StorageClass, DTypeValue,
    DataClass,         // instances kept as Object values (argparse.Namespace, _io.BytesIO, ...)
    EnumClass,         // a megatron.* enum: called with its one value
    NumpyReconstruct,  // numpy.core.multiarray._reconstruct: an Object "numpy.ndarray"
    CodecsEncode,      // _codecs.encode(str, "latin1"): how protocol 2 writes bytes
    EnumMember,        // getattr(EnumClass, name): how Python 3.11+ pickles an enum member
  };

  Kind kind = Kind::None;
  int64_t int_value = 0;  // Bool, Int
  double float_value = 0;
  std::string text;  // Str, Bytes, a Global's and an Object's class "module.name"
  std::vector<PickleValuePtr> items;  // Tuple, List, Set; an Object's constructor arguments and tuple state
  std::vector<std::pair<PickleValuePtr, PickleValuePtr>> entries;  // Dict (insertion order), Object attributes
  // Dict: str and int keys -> position in entries. The views point into the keys' own text (the
  // keys stay alive in entries), so a long key used in many dicts is not copied into each index.
  std::unordered_map<std::string_view, size_t> str_index;
  std::unordered_map<int64_t, size_t> int_index;
  GlobalId global = GlobalId::None;
  DType global_dtype = DType::U8;  // StorageClass, DTypeValue
  bool global_untyped = false;     // StorageClass torch.UntypedStorage
  std::shared_ptr<const PickledStorage> storage;
  std::shared_ptr<const PickledTensor> tensor;
};

// Short description of a value's kind for error messages ("dict", "tuple", ...).
const char* pickle_kind_name(PickleValue::Kind kind);

class Unpickler {
 public:
  static constexpr size_t kMaxPickleBytes = size_t{64} << 20;
  static constexpr size_t kMaxStackDepth = size_t{1} << 16;
  static constexpr size_t kMaxMarkDepth = 1024;
  static constexpr size_t kMaxMemoEntries = size_t{1} << 20;
  static constexpr size_t kMaxStringBytes = size_t{16} << 20;
  static constexpr size_t kMaxTensors = size_t{1} << 20;
  // Every value that stays alive sits on the stack, in the memo or in a container, so these
  // caps bound the memory a hostile pickle can make the VM hold.
  static constexpr size_t kMaxContainers = size_t{1} << 21;
  static constexpr size_t kMaxContainerItems = size_t{1} << 23;  // summed over all lists/dicts/tuples

  // `label` prefixes every error, e.g. "model.bin: archive/data.pkl". The bytes must outlive load().
  Unpickler(const uint8_t* data, size_t size, std::string label);
  ~Unpickler();
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  // Runs the pickle to STOP and returns the one value left. Containers in the result may refer
  // to each other in cycles; the Unpickler breaks those when it is destroyed, so keep it alive
  // while walking the result.
  PickleValuePtr load();

 private:
  [[noreturn]] void fail_at(const std::string& message) const;
  const uint8_t* take(size_t count);
  uint64_t read_uint(size_t count);
  std::string read_line();
  std::string read_string(uint64_t length);

  void push(PickleValuePtr value);
  PickleValuePtr pop();
  std::vector<PickleValuePtr> pop_to_mark();
  PickleValuePtr& top();
  PickleValuePtr make(PickleValue::Kind kind);
  void count_items(size_t added);
  void memo_put(uint64_t index);
  PickleValuePtr memo_get(uint64_t index);

  PickleValuePtr resolve_global(const std::string& module, const std::string& name);
  PickleValuePtr call(const PickleValuePtr& callable, const PickleValuePtr& args);
  PickleValuePtr make_object(const std::string& class_name, const std::vector<PickleValuePtr>& items);
  PickleValuePtr new_object(const PickleValuePtr& cls, const PickleValuePtr& args);
  void build(PickleValue& target, const PickleValuePtr& state);
  PickleValuePtr persistent_load(const PickleValuePtr& pid);
  PickleValuePtr rebuild_tensor(const std::vector<PickleValuePtr>& args, bool v3);
  void set_item(PickleValue& dict, PickleValuePtr key, PickleValuePtr value);

  const uint8_t* data_;
  size_t size_;
  std::string label_;
  size_t pos_ = 0;
  size_t opcode_pos_ = 0;
  std::vector<PickleValuePtr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PickleValuePtr> memo_;
  std::map<std::string, std::shared_ptr<const PickledStorage>> storages_;
  std::vector<PickleValuePtr> containers_;  // every container made, so cycles can be broken
  size_t container_items_ = 0;
  size_t tensor_count_ = 0;
};

}  // namespace ssdq
