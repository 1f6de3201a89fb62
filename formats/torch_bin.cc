#include "formats/torch_bin.h"

#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/unpickler.h"
#include "formats/zip_reader.h"

namespace ssdq {
namespace {

using Kind = PickleValue::Kind;

constexpr int kMaxNesting = 64;
constexpr size_t kMaxVisits = size_t{1} << 22;  // shared sub-objects are walked once per path
// A shared sub-object is named once per path to it, so a few hundred pickle bytes could ask for
// millions of names (or 64 levels of a 16 MB key); real state dicts have far fewer and shorter.
constexpr size_t kMaxTensorNames = size_t{1} << 20;
constexpr size_t kMaxNameBytes = 4096;
// Copies of non-contiguous tensors may total at most this many times the checkpoint size, so a
// tiny storage expanded by zero strides cannot ask for unbounded memory.
constexpr uint64_t kMaterializeFactor = 2;
constexpr uint64_t kMaterializeSlack = uint64_t{1} << 20;

struct Archive {
  std::string prefix;  // the top folder, e.g. "archive" or the file stem
  const ZipEntry* pickle = nullptr;
};

Archive find_archive(const ZipReader& zip) {
  Archive archive;
  for (const ZipEntry& entry : zip.entries()) {
    const std::string& name = entry.name;
    const size_t slash = name.find('/');
    if (slash == std::string::npos || name.compare(slash, std::string::npos, "/data.pkl") != 0) continue;
    if (archive.pickle)
      fail("{}: zip holds two checkpoints ('{}' and '{}')", zip.label(), archive.pickle->name, name);
    archive.prefix = name.substr(0, slash);
    archive.pickle = &entry;
  }
  if (!archive.pickle)
    fail("{}: no <folder>/data.pkl entry in the zip; not a torch.save checkpoint (TorchScript and other zips are "
         "not supported)",
         zip.label());
  return archive;
}

void check_byte_order(const ZipReader& zip, const Archive& archive) {
  const ZipEntry* entry = zip.find(archive.prefix + "/byteorder");
  if (!entry) return;  // written since PyTorch 2.1; older files are little-endian
  const ByteSpan bytes = zip.stored_bytes(*entry);
  const std::string order(reinterpret_cast<const char*>(bytes.data), bytes.size);
  if (order == "little") return;
  if (order == "big") fail("{}: checkpoint was saved big-endian (byteorder 'big'); only little-endian is supported", zip.label());
  fail("{}: entry '{}' holds an unknown byte order (expected 'little')", zip.label(), entry->name);
}

bool is_scalar(Kind kind) {
  return kind == Kind::None || kind == Kind::Bool || kind == Kind::Int || kind == Kind::BigInt || kind == Kind::Float ||
         kind == Kind::Str || kind == Kind::Bytes;
}

std::string join_name(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// Copies the elements of a strided view into row-major order.
void gather(const uint8_t* base, const Shape& size, const Shape& stride, size_t element, uint8_t* out) {
  const size_t dims = size.size();
  if (dims == 0) {
    std::memcpy(out, base, element);
    return;
  }
  const int64_t inner = size[dims - 1];
  const int64_t inner_stride = stride[dims - 1];
  std::vector<int64_t> index(dims, 0);
  while (true) {
    int64_t offset = 0;
    for (size_t d = 0; d + 1 < dims; ++d) offset += index[d] * stride[d];
    const uint8_t* row = base + offset * static_cast<int64_t>(element);
    if (inner_stride == 1) {
      std::memcpy(out, row, static_cast<size_t>(inner) * element);
      out += inner * element;
    } else {
      for (int64_t i = 0; i < inner; ++i, out += element) std::memcpy(out, row + i * inner_stride * element, element);
    }
    size_t d = dims - 1;
    while (d > 0) {
      if (++index[d - 1] < size[d - 1]) break;
      index[d - 1] = 0;
      --d;
    }
    if (d == 0) return;
  }
}

class StateDictBuilder {
 public:
  StateDictBuilder(const ZipReader& zip, std::string prefix, std::shared_ptr<const void> owner, size_t file_size)
      : zip_(zip),
        prefix_(std::move(prefix)),
        owner_(std::move(owner)),
        materialize_budget_(kMaterializeFactor * file_size + kMaterializeSlack) {}

  TensorMap build(const PickleValuePtr& root) {
    if (root->kind != Kind::Dict)
      fail("{}: checkpoint holds a {}, not a dict of tensors", zip_.label(), pickle_kind_name(root->kind));
    walk(*root, "", 0);
    return std::move(out_);
  }

 private:
  void walk(const PickleValue& value, const std::string& name, int depth) {
    if (++visits_ > kMaxVisits) fail("{}: more than {} values to walk in the state dict", zip_.label(), kMaxVisits);
    if (depth > kMaxNesting)
      fail("{}: '{}' is nested more than {} levels deep (or refers to itself)", zip_.label(), name, kMaxNesting);
    switch (value.kind) {
      case Kind::Tensor: add(name, *value.tensor); break;
      case Kind::Dict:
        for (const auto& [key, child] : value.entries) {
          std::string key_text;
          if (key->kind == Kind::Str) {
            if (name.size() + 1 + key->text.size() > kMaxNameBytes)
              fail("{}: a name under '{}' is longer than {} bytes", zip_.label(), name.substr(0, 200), kMaxNameBytes);
            key_text = key->text;
          } else if (key->kind == Kind::Int) {
            key_text = std::to_string(key->int_value);
          } else if (is_scalar(child->kind)) {
            continue;
          } else {
            fail("{}: '{}' has a {} key; only str and int keys can name tensors", zip_.label(), name,
                 pickle_kind_name(key->kind));
          }
          walk(*child, join_name(name, key_text), depth + 1);
        }
        break;
      case Kind::List:
      case Kind::Tuple:
        for (size_t i = 0; i < value.items.size(); ++i)
          walk(*value.items[i], join_name(name, std::to_string(i)), depth + 1);
        break;
      case Kind::Set:
        for (const auto& item : value.items)
          if (item->kind == Kind::Tensor) fail("{}: '{}' is a set holding tensors; they have no names", zip_.label(), name);
        break;
      default: break;  // ints, strings and other plain values are not tensors
    }
  }

  void add(const std::string& name, const PickledTensor& pickled) {
    if (name.empty()) fail("{}: a tensor has an empty name", zip_.label());
    if (out_.size() >= kMaxTensorNames)
      fail("{}: more than {} tensor names (shared sub-objects are named once per path)", zip_.label(),
           kMaxTensorNames);
    auto done = done_.find(&pickled);
    Tensor tensor = done != done_.end() ? done->second : make_tensor(name, pickled);
    done_.emplace(&pickled, tensor);
    if (!out_.emplace(name, std::move(tensor)).second)
      fail("{}: two tensors are named '{}' after flattening nested names", zip_.label(), name);
  }

  ByteSpan storage_bytes(const std::string& name, const PickledStorage& storage) {
    const std::string entry_name = prefix_ + "/data/" + storage.key;
    const ZipEntry* entry = zip_.find(entry_name);
    if (!entry) fail("{}: tensor '{}': storage '{}' has no zip entry '{}'", zip_.label(), name, storage.key, entry_name);
    const ByteSpan bytes = zip_.stored_bytes(*entry);
    if (static_cast<uint64_t>(storage.nbytes()) != bytes.size)
      fail("{}: tensor '{}': zip entry '{}' has {} bytes, but the pickle says {} elements of {} ({} bytes)",
           zip_.label(), name, entry_name, bytes.size, storage.numel, dtype_name(storage.dtype), storage.nbytes());
    return bytes;
  }

  Tensor make_tensor(const std::string& name, const PickledTensor& pickled) {
    const PickledStorage& storage = *pickled.storage;
    const ByteSpan bytes = storage_bytes(name, storage);
    const int64_t element = static_cast<int64_t>(dtype_size(pickled.dtype));
    if (bytes.size % element != 0)
      fail("{}: tensor '{}': storage '{}' has {} bytes, not a whole number of {} elements", zip_.label(), name,
           storage.key, bytes.size, dtype_name(pickled.dtype));
    const int64_t storage_elements = static_cast<int64_t>(bytes.size) / element;
    const std::string what = fmt::format("{}: tensor '{}'", zip_.label(), name);
    const int64_t numel = checked_numel(pickled.size, what);

    // Highest element the view touches: offset + sum((size - 1) * stride), overflow-checked.
    int64_t last = pickled.storage_offset;
    bool overflow = false;
    for (size_t d = 0; d < pickled.size.size() && numel > 0; ++d) {
      int64_t span;
      overflow |= __builtin_mul_overflow(pickled.size[d] - 1, pickled.stride[d], &span);
      overflow |= __builtin_add_overflow(last, span, &last);
    }
    const bool inside = numel > 0 ? !overflow && last < storage_elements : pickled.storage_offset <= storage_elements;
    if (!inside)
      fail("{}: size {} with stride {} at offset {} reaches past storage '{}' ({} elements of {})", what,
           shape_str(pickled.size), shape_str(pickled.stride), pickled.storage_offset, storage.key, storage_elements,
           dtype_name(pickled.dtype));

    const uint8_t* base = bytes.data + pickled.storage_offset * element;
    bool contiguous = true;
    int64_t expected_stride = 1;
    for (size_t d = pickled.size.size(); d-- > 0;) {
      if (pickled.size[d] != 1 && pickled.stride[d] != expected_stride) contiguous = false;
      expected_stride *= pickled.size[d];
    }
    const bool aligned = reinterpret_cast<uintptr_t>(base) % element == 0;
    if (numel == 0 || (contiguous && aligned)) {
      Tensor tensor;
      tensor.dtype = pickled.dtype;
      tensor.shape = pickled.size;
      tensor.data = base;
      tensor.keepalive = owner_;
      return tensor;
    }

    const uint64_t copy_bytes = static_cast<uint64_t>(numel) * static_cast<uint64_t>(element);
    if (copy_bytes > materialize_budget_ - materialized_)
      fail("{}: copying this non-contiguous view ({} bytes) would make the copies exceed {} bytes, {}x the file size",
           what, copy_bytes, materialize_budget_, kMaterializeFactor);
    materialized_ += copy_bytes;
    std::vector<uint8_t> copy(static_cast<size_t>(copy_bytes));
    gather(base, pickled.size, pickled.stride, static_cast<size_t>(element), copy.data());
    return Tensor::own(pickled.dtype, pickled.size, std::move(copy));
  }

  const ZipReader& zip_;
  std::string prefix_;
  std::shared_ptr<const void> owner_;
  uint64_t materialize_budget_;
  uint64_t materialized_ = 0;
  size_t visits_ = 0;
  std::map<const PickledTensor*, Tensor> done_;
  TensorMap out_;
};

PickledScalar scalar_of(const PickleValue& v) {
  PickledScalar s;
  switch (v.kind) {
    case Kind::None: break;
    case Kind::Bool: s.kind = PickledScalar::Kind::kBool, s.int_value = v.int_value; break;
    case Kind::Int: s.kind = PickledScalar::Kind::kInt, s.int_value = v.int_value; break;
    case Kind::Float: s.kind = PickledScalar::Kind::kFloat, s.float_value = v.float_value; break;
    case Kind::Str: s.kind = PickledScalar::Kind::kStr, s.text = v.text; break;
    case Kind::Object:
      s.kind = PickledScalar::Kind::kOther;
      s.text = v.text;
      if (v.items.size() == 1 && (v.items[0]->kind == Kind::Int || v.items[0]->kind == Kind::Str))
        s.text += "(" + (v.items[0]->kind == Kind::Int ? std::to_string(v.items[0]->int_value) : v.items[0]->text) + ")";
      break;
    default: s.kind = PickledScalar::Kind::kOther, s.text = pickle_kind_name(v.kind); break;
  }
  return s;
}

// The attributes of the root dict's argparse.Namespace values.
void collect_namespaces(const PickleValue& root, TorchCheckpoint& out) {
  if (root.kind != Kind::Dict) return;
  for (const auto& [key, value] : root.entries) {
    if (key->kind != Kind::Str || value->kind != Kind::Object || value->text != "argparse.Namespace") continue;
    PickledScalars& attributes = out.namespaces[key->text];
    for (const auto& [name, attribute] : value->entries) attributes[name->text] = scalar_of(*attribute);
  }
}

}  // namespace

TorchCheckpoint parse_torch_checkpoint(std::shared_ptr<const void> owner, const uint8_t* data, size_t size,
                                       const std::string& label) {
  // The legacy format (PyTorch < 1.6 or _use_new_zipfile_serialization=False) is a bare pickle stream.
  if (size >= 2 && data[0] == 0x80 && data[1] <= 5)
    fail("{}: legacy (non-zip) torch.save format is not supported; re-save it with torch.save from PyTorch >= 1.6",
         label);
  ZipReader zip(data, size, label);
  const Archive archive = find_archive(zip);
  check_byte_order(zip, archive);
  const ByteSpan pickle = zip.stored_bytes(*archive.pickle);
  Unpickler unpickler(pickle.data, pickle.size, label + ": " + archive.pickle->name);
  const PickleValuePtr root = unpickler.load();
  TorchCheckpoint checkpoint;
  checkpoint.tensors = StateDictBuilder(zip, archive.prefix, std::move(owner), size).build(root);
  collect_namespaces(*root, checkpoint);
  return checkpoint;
}

TensorMap parse_torch_bin(std::shared_ptr<const void> owner, const uint8_t* data, size_t size,
                          const std::string& label) {
  return parse_torch_checkpoint(std::move(owner), data, size, label).tensors;
}

TorchCheckpoint read_torch_checkpoint(const std::string& path) {
  auto file = MappedFile::open(path);
  return parse_torch_checkpoint(file, file->data(), file->size(), path);
}

TensorMap read_torch_bin(const std::string& path) { return read_torch_checkpoint(path).tensors; }

}  // namespace ssdq
