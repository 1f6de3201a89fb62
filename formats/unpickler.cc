#include "formats/unpickler.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "formats/error.h"

namespace ssdq {
namespace {

using Kind = PickleValue::Kind;
using GlobalId = PickleValue::GlobalId;

constexpr size_t kMaxLineBytes = 256;
constexpr size_t kMaxDims = 64;
constexpr int kHighestProtocol = 5;

struct StorageClass {
  const char* name;
  DType dtype;
};
constexpr StorageClass kStorageClasses[] = {
    {"FloatStorage", DType::F32},  {"HalfStorage", DType::F16}, {"BFloat16Storage", DType::BF16},
    {"DoubleStorage", DType::F64}, {"LongStorage", DType::I64}, {"IntStorage", DType::I32},
    {"ShortStorage", DType::I16},  {"CharStorage", DType::I8},  {"ByteStorage", DType::U8},
    {"BoolStorage", DType::BOOL},
};

// torch.dtype objects pickle as the global torch.<name>; these are the ones ssdq can hold.
constexpr StorageClass kTorchDTypes[] = {
    {"float32", DType::F32},      {"float16", DType::F16},        {"bfloat16", DType::BF16},
    {"float64", DType::F64},      {"int64", DType::I64},          {"int32", DType::I32},
    {"int16", DType::I16},        {"int8", DType::I8},            {"uint8", DType::U8},
    {"bool", DType::BOOL},        {"uint16", DType::U16},         {"uint32", DType::U32},
    {"uint64", DType::U64},       {"float8_e4m3fn", DType::F8_E4M3}, {"float8_e5m2", DType::F8_E5M2},
};

// Names from the file go into error messages: keep them printable and short.
std::string printable(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 120)) {
    if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    }
  }
  if (text.size() > 120) out += "...";
  return out;
}

bool valid_utf8(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t extra;
    uint32_t code;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      extra = 1, code = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2, code = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3, code = c & 0x07;
    } else {
      return false;
    }
    if (text.size() - i <= extra) return false;
    for (size_t k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    // Overlong forms and values past U+10FFFF. Encoded surrogates are allowed, as Python's
    // pickle writes them with surrogatepass.
    if ((extra == 1 && code < 0x80) || (extra == 2 && code < 0x800) || (extra == 3 && (code < 0x10000 || code > 0x10ffff)))
      return false;
    i += extra + 1;
  }
  return true;
}

// Classes whose instances a Megatron-LM checkpoint holds as data: its args, TransformerEngine's
// extra state, NumPy RNG states.
bool is_data_class(const std::string& full) {
  static const char* const kNames[] = {"argparse.Namespace", "_io.BytesIO", "numpy.ndarray", "numpy.dtype"};
  for (const char* name : kNames)
    if (full == name) return true;
  return false;
}

// Megatron-LM modules that define the enums its args hold (ModelType, AttnBackend, ...).
bool is_enum_module(const std::string& module) {
  static const char* const kModules[] = {"megatron.core.enums", "megatron.model.enums", "megatron.legacy.model.enums",
                                         "megatron.core.transformer.enums", "megatron.core.rerun_state_machine"};
  for (const char* name : kModules)
    if (module == name) return true;
  return false;
}

bool is_int(const PickleValuePtr& v) { return v->kind == Kind::Int || v->kind == Kind::Bool; }
bool is_sequence(const PickleValuePtr& v) { return v->kind == Kind::Tuple || v->kind == Kind::List; }

}  // namespace

const char* pickle_kind_name(Kind kind) {
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::BigInt: return "int (over 64 bits)";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Set: return "set";
    case Kind::Dict: return "dict";
    case Kind::Global: return "global";
    case Kind::Storage: return "storage";
    case Kind::Tensor: return "tensor";
    case Kind::Object: return "object";
  }
  return "value";
}

Unpickler::Unpickler(const uint8_t* data, size_t size, std::string label)
    : data_(data), size_(size), label_(std::move(label)) {
  if (size_ > kMaxPickleBytes) fail("{}: pickle is {} bytes, more than the limit of {}", label_, size_, kMaxPickleBytes);
}

Unpickler::~Unpickler() {
  // Emptying every container first means no value owns another any more, so nothing is
  // destroyed recursively (deeply nested values would overflow the C++ stack) and cycles go.
  for (auto& container : containers_) {
    container->items.clear();
    container->entries.clear();
  }
}

void Unpickler::fail_at(const std::string& message) const {
  fail("{}: {} (opcode at byte {})", label_, message, opcode_pos_);
}

const uint8_t* Unpickler::take(size_t count) {
  if (count > size_ - pos_)
    fail_at(fmt::format("pickle is truncated: needs {} more bytes at byte {}, has {}", count, pos_, size_ - pos_));
  const uint8_t* out = data_ + pos_;
  pos_ += count;
  return out;
}

uint64_t Unpickler::read_uint(size_t count) {
  const uint8_t* bytes = take(count);
  uint64_t value = 0;
  for (size_t i = 0; i < count; ++i) value |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  return value;
}

std::string Unpickler::read_line() {
  const size_t limit = std::min(size_ - pos_, kMaxLineBytes);
  const void* newline = std::memchr(data_ + pos_, '\n', limit);
  if (!newline) fail_at(fmt::format("no newline within {} bytes after byte {}", limit, pos_));
  const size_t length = static_cast<const uint8_t*>(newline) - (data_ + pos_);
  std::string line(reinterpret_cast<const char*>(data_ + pos_), length);
  pos_ += length + 1;
  return line;
}

std::string Unpickler::read_string(uint64_t length) {
  if (length > kMaxStringBytes)
    fail_at(fmt::format("string of {} bytes is longer than the limit of {}", length, kMaxStringBytes));
  const uint8_t* bytes = take(static_cast<size_t>(length));
  return std::string(reinterpret_cast<const char*>(bytes), static_cast<size_t>(length));
}

PickleValuePtr Unpickler::make(Kind kind) {
  auto value = std::make_shared<PickleValue>();
  value->kind = kind;
  if (kind == Kind::Tuple || kind == Kind::List || kind == Kind::Set || kind == Kind::Dict || kind == Kind::Object) {
    if (containers_.size() >= kMaxContainers) fail_at(fmt::format("more than {} containers", kMaxContainers));
    containers_.push_back(value);
  }
  return value;
}

void Unpickler::count_items(size_t added) {
  container_items_ += added;
  if (container_items_ > kMaxContainerItems)
    fail_at(fmt::format("more than {} items in lists, tuples and dicts", kMaxContainerItems));
}

void Unpickler::push(PickleValuePtr value) {
  if (stack_.size() >= kMaxStackDepth) fail_at(fmt::format("stack deeper than {}", kMaxStackDepth));
  stack_.push_back(std::move(value));
}

PickleValuePtr& Unpickler::top() {
  if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail_at("stack underflow");
  return stack_.back();
}

PickleValuePtr Unpickler::pop() {
  PickleValuePtr value = std::move(top());
  stack_.pop_back();
  return value;
}

std::vector<PickleValuePtr> Unpickler::pop_to_mark() {
  if (marks_.empty()) fail_at("no MARK on the stack");
  const size_t mark = marks_.back();
  marks_.pop_back();
  std::vector<PickleValuePtr> items(std::make_move_iterator(stack_.begin() + mark),
                                    std::make_move_iterator(stack_.end()));
  stack_.resize(mark);
  return items;
}

void Unpickler::memo_put(uint64_t index) {
  PickleValuePtr value = top();
  auto it = memo_.find(index);
  if (it != memo_.end()) {
    it->second = std::move(value);
    return;
  }
  if (memo_.size() >= kMaxMemoEntries) fail_at(fmt::format("memo has more than {} entries", kMaxMemoEntries));
  memo_.emplace(index, std::move(value));
}

PickleValuePtr Unpickler::memo_get(uint64_t index) {
  auto it = memo_.find(index);
  if (it == memo_.end()) fail_at(fmt::format("memo entry {} was never stored", index));
  return it->second;
}

void Unpickler::set_item(PickleValue& dict, PickleValuePtr key, PickleValuePtr value) {
  std::pair<size_t, bool> slot{dict.entries.size(), true};  // (position, new key)
  if (key->kind == Kind::Str) {
    auto [it, inserted] = dict.str_index.emplace(key->text, dict.entries.size());
    slot = {it->second, inserted};
  } else if (is_int(key)) {
    auto [it, inserted] = dict.int_index.emplace(key->int_value, dict.entries.size());
    slot = {it->second, inserted};
  }
  if (!slot.second) {
    dict.entries[slot.first].second = std::move(value);
    return;
  }
  count_items(1);
  dict.entries.emplace_back(std::move(key), std::move(value));
}

PickleValuePtr Unpickler::resolve_global(const std::string& module, const std::string& name) {
  const std::string full = module + "." + name;
  auto value = make(Kind::Global);
  value->text = full;
  if (full == "collections.OrderedDict") {
    value->global = GlobalId::OrderedDict;
  } else if (full == "torch._utils._rebuild_tensor_v2") {
    value->global = GlobalId::RebuildTensorV2;
  } else if (full == "torch._utils._rebuild_tensor_v3") {
    value->global = GlobalId::RebuildTensorV3;
  } else if (full == "torch._utils._rebuild_parameter") {
    value->global = GlobalId::RebuildParameter;
  } else if (full == "torch.UntypedStorage" || full == "torch.storage.UntypedStorage") {
    value->global = GlobalId::StorageClass;
    value->global_dtype = DType::U8;
    value->global_untyped = true;
  } else if (is_data_class(full)) {
    value->global = GlobalId::DataClass;
  } else if (full == "numpy.core.multiarray._reconstruct" || full == "numpy._core.multiarray._reconstruct") {
    value->global = GlobalId::NumpyReconstruct;
  } else if (full == "builtins.getattr" || full == "__builtin__.getattr") {
    value->global = GlobalId::EnumMember;
  } else if (full == "_codecs.encode") {
    value->global = GlobalId::CodecsEncode;
  } else if (is_enum_module(module)) {
    value->global = GlobalId::EnumClass;
  } else if (module == "torch") {
    for (const auto& storage : kStorageClasses)
      if (name == storage.name) value->global = GlobalId::StorageClass, value->global_dtype = storage.dtype;
    for (const auto& dtype : kTorchDTypes)
      if (name == dtype.name) value->global = GlobalId::DTypeValue, value->global_dtype = dtype.dtype;
  }
  if (value->global == GlobalId::None) fail_at(fmt::format("forbidden pickle global '{}'", printable(full)));
  return value;
}

PickleValuePtr Unpickler::call(const PickleValuePtr& callable, const PickleValuePtr& args) {
  if (callable->kind != Kind::Global)
    fail_at(fmt::format("REDUCE on a {}, not a global", pickle_kind_name(callable->kind)));
  if (args->kind != Kind::Tuple)
    fail_at(fmt::format("arguments of '{}' are a {}, not a tuple", callable->text, pickle_kind_name(args->kind)));
  const auto& items = args->items;
  switch (callable->global) {
    case GlobalId::OrderedDict: {
      auto dict = make(Kind::Dict);
      if (items.empty()) return dict;
      if (items.size() != 1 || !is_sequence(items[0]))
        fail_at("collections.OrderedDict takes no arguments or one list of pairs");
      for (const auto& pair : items[0]->items) {
        if (!is_sequence(pair) || pair->items.size() != 2)
          fail_at("collections.OrderedDict: an item is not a (key, value) pair");
        set_item(*dict, pair->items[0], pair->items[1]);
      }
      return dict;
    }
    case GlobalId::RebuildTensorV2: return rebuild_tensor(items, false);
    case GlobalId::RebuildTensorV3: return rebuild_tensor(items, true);
    case GlobalId::RebuildParameter:
      // (data, requires_grad, backward_hooks): a Parameter holds the tensor it was given.
      if (items.size() != 3 || items[0]->kind != Kind::Tensor)
        fail_at("torch._utils._rebuild_parameter expects (tensor, requires_grad, backward_hooks)");
      return items[0];
    case GlobalId::DataClass: return new_object(callable, args);
    case GlobalId::EnumClass: {
      // Enum(value) looks the member up by value; kept as the class name and the value.
      if (items.size() != 1 || !(is_int(items[0]) || items[0]->kind == Kind::Str))
        fail_at(fmt::format("'{}' is called with {} argument(s); only an enum member (one int or str) is admitted",
                            callable->text, items.size()));
      return new_object(callable, args);
    }
    case GlobalId::EnumMember: {
      if (items.size() != 2 || items[0]->kind != Kind::Global || items[0]->global != GlobalId::EnumClass ||
          items[1]->kind != Kind::Str)
        fail_at(fmt::format("getattr is admitted only to name a member of a Megatron-LM enum, not on a {}",
                            items.empty() ? "missing argument"
                            : items[0]->kind == Kind::Global ? "'" + printable(items[0]->text) + "'"
                                                             : std::string(pickle_kind_name(items[0]->kind))));
      return make_object(items[0]->text, {items[1]});
    }
    case GlobalId::NumpyReconstruct: return make_object("numpy.ndarray", items);
    case GlobalId::CodecsEncode: {
      // Protocol 2 writes bytes b as _codecs.encode(b.decode("latin1"), "latin1").
      if (items.size() != 2 || items[0]->kind != Kind::Str || items[1]->kind != Kind::Str || items[1]->text != "latin1")
        fail_at("_codecs.encode is admitted only as encode(text, \"latin1\")");
      auto bytes = make(Kind::Bytes);
      const std::string& text = items[0]->text;
      for (size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x80) {
          bytes->text += static_cast<char>(c);
        } else if ((c == 0xC2 || c == 0xC3) && i + 1 < text.size()) {
          bytes->text += static_cast<char>(((c & 0x03) << 6) | (static_cast<unsigned char>(text[++i]) & 0x3F));
        } else {
          fail_at("_codecs.encode: a character beyond latin1");
        }
      }
      return bytes;
    }
    default: fail_at(fmt::format("pickle global '{}' cannot be called", callable->text));
  }
}

// An Object value: a class name and constructor arguments, built as data (nothing is called).
PickleValuePtr Unpickler::make_object(const std::string& class_name, const std::vector<PickleValuePtr>& items) {
  auto object = make(Kind::Object);
  object->text = class_name;
  count_items(items.size());
  object->items = items;
  return object;
}

PickleValuePtr Unpickler::new_object(const PickleValuePtr& cls, const PickleValuePtr& args) {
  if (cls->kind != Kind::Global || (cls->global != GlobalId::DataClass && cls->global != GlobalId::EnumClass))
    fail_at(fmt::format("object construction from '{}' is not admitted",
                        cls->kind == Kind::Global ? cls->text : pickle_kind_name(cls->kind)));
  if (args->kind != Kind::Tuple)
    fail_at(fmt::format("arguments of '{}' are a {}, not a tuple", cls->text, pickle_kind_name(args->kind)));
  return make_object(cls->text, args->items);
}

// BUILD: an object's state is its attribute dict (argparse.Namespace), a tuple (NumPy arrays,
// BytesIO) or (dict, slots); it is stored, never interpreted by a class.
void Unpickler::build(PickleValue& target, const PickleValuePtr& state) {
  if (target.kind == Kind::Dict) return;  // an OrderedDict's attributes (torch's state_dict _metadata)
  if (target.kind != Kind::Object)
    fail_at(fmt::format("BUILD (setting object state) on a {} is not supported", pickle_kind_name(target.kind)));
  if (state->kind == Kind::Dict) {
    for (const auto& [key, value] : state->entries) {
      if (key->kind != Kind::Str) fail_at(fmt::format("'{}': an attribute name is a {}", target.text, pickle_kind_name(key->kind)));
      set_item(target, key, value);
    }
  } else if (state->kind == Kind::Tuple || state->kind == Kind::None) {
    count_items(state->items.size());
    target.items.insert(target.items.end(), state->items.begin(), state->items.end());
  } else {
    fail_at(fmt::format("'{}': object state is a {}", target.text, pickle_kind_name(state->kind)));
  }
}

PickleValuePtr Unpickler::persistent_load(const PickleValuePtr& pid) {
  const auto& f = pid->items;
  if (pid->kind != Kind::Tuple || f.size() != 5 || f[0]->kind != Kind::Str || f[0]->text != "storage")
    fail_at("persistent id is not ('storage', storage_type, key, location, numel)");
  if (f[1]->kind != Kind::Global || f[1]->global != GlobalId::StorageClass)
    fail_at(fmt::format("persistent id names '{}', not a storage class",
                        f[1]->kind == Kind::Global ? f[1]->text : pickle_kind_name(f[1]->kind)));
  if (f[2]->kind != Kind::Str || f[3]->kind != Kind::Str || !is_int(f[4]) || f[4]->int_value < 0)
    fail_at("persistent id is not ('storage', storage_type, key: str, location: str, numel: int >= 0)");
  auto storage = std::make_shared<PickledStorage>();
  storage->key = f[2]->text;
  storage->dtype = f[1]->global_dtype;
  storage->untyped = f[1]->global_untyped;
  storage->numel = f[4]->int_value;
  storage->location = f[3]->text;
  if (storage->numel > (int64_t{1} << 62) / static_cast<int64_t>(dtype_size(storage->dtype)))
    fail_at(fmt::format("storage '{}' claims {} elements", printable(storage->key), storage->numel));

  auto [it, inserted] = storages_.emplace(storage->key, storage);
  const PickledStorage& known = *it->second;
  if (!inserted && (known.dtype != storage->dtype || known.untyped != storage->untyped || known.numel != storage->numel))
    fail_at(fmt::format("storage '{}' is named twice with different types or sizes ({} x {} vs {} x {})",
                        printable(storage->key), known.numel, dtype_name(known.dtype), storage->numel,
                        dtype_name(storage->dtype)));
  auto value = make(Kind::Storage);
  value->storage = it->second;
  return value;
}

PickleValuePtr Unpickler::rebuild_tensor(const std::vector<PickleValuePtr>& args, bool v3) {
  // v2: (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
  // v3: the same with dtype after backward_hooks (torch 2.x, for dtypes without a typed storage class)
  const char* function = v3 ? "torch._utils._rebuild_tensor_v3" : "torch._utils._rebuild_tensor_v2";
  const size_t required = v3 ? 7 : 6;
  if (args.size() != required && args.size() != required + 1)
    fail_at(fmt::format("{} takes {} or {} arguments, got {}", function, required, required + 1, args.size()));
  if (args[0]->kind != Kind::Storage) fail_at(fmt::format("{}: first argument is not a storage", function));
  if (!is_int(args[1]) || args[1]->int_value < 0) fail_at(fmt::format("{}: storage_offset is not an int >= 0", function));
  if (!is_sequence(args[2]) || !is_sequence(args[3]) || args[2]->items.size() != args[3]->items.size())
    fail_at(fmt::format("{}: size and stride are not sequences of the same length", function));
  if (args[2]->items.size() > kMaxDims) fail_at(fmt::format("{}: more than {} dimensions", function, kMaxDims));
  if (!is_int(args[4])) fail_at(fmt::format("{}: requires_grad is not a bool", function));
  if (args[5]->kind != Kind::Dict && args[5]->kind != Kind::None)
    fail_at(fmt::format("{}: backward_hooks is not a dict", function));
  if (args.size() == required + 1) {
    const auto& metadata = args.back();
    if (metadata->kind != Kind::None && metadata->kind != Kind::Dict)
      fail_at(fmt::format("{}: metadata is a {}, not a dict", function, pickle_kind_name(metadata->kind)));
    // Metadata carries flags such as a lazy negation or conjugation; values would be wrong without them.
    if (metadata->kind == Kind::Dict && !metadata->entries.empty()) {
      const auto& key = metadata->entries.front().first;
      fail_at(fmt::format("{}: tensor metadata ('{}', ...) is not supported", function,
                          key->kind == Kind::Str ? printable(key->text) : pickle_kind_name(key->kind)));
    }
  }
  if (++tensor_count_ > kMaxTensors) fail_at(fmt::format("more than {} tensors", kMaxTensors));

  auto tensor = std::make_shared<PickledTensor>();
  tensor->storage = args[0]->storage;
  tensor->dtype = tensor->storage->dtype;
  if (v3) {
    if (args[6]->kind != Kind::Global || args[6]->global != GlobalId::DTypeValue)
      fail_at(fmt::format("{}: dtype argument is not a torch dtype", function));
    tensor->dtype = args[6]->global_dtype;
    if (!tensor->storage->untyped && tensor->storage->dtype != tensor->dtype)
      fail_at(fmt::format("{}: dtype {} does not match the {} storage '{}'", function, dtype_name(tensor->dtype),
                          dtype_name(tensor->storage->dtype), printable(tensor->storage->key)));
  }
  tensor->storage_offset = args[1]->int_value;
  for (size_t d = 0; d < args[2]->items.size(); ++d) {
    const auto& dim = args[2]->items[d];
    const auto& step = args[3]->items[d];
    if (!is_int(dim) || dim->int_value < 0 || !is_int(step) || step->int_value < 0)
      fail_at(fmt::format("{}: size and stride must hold ints >= 0", function));
    tensor->size.push_back(dim->int_value);
    tensor->stride.push_back(step->int_value);
  }
  auto value = make(Kind::Tensor);
  value->tensor = std::move(tensor);
  return value;
}

PickleValuePtr Unpickler::load() {
  while (pos_ < size_) {
    opcode_pos_ = pos_;
    const uint8_t opcode = *take(1);
    switch (opcode) {
      case 0x80: {  // PROTO
        const uint64_t version = read_uint(1);
        if (version > kHighestProtocol) fail_at(fmt::format("unsupported pickle protocol {}", version));
        break;
      }
      case 0x95: {  // FRAME: a length hint; the bytes follow inline
        const uint64_t length = read_uint(8);
        if (length > size_ - pos_) fail_at(fmt::format("frame of {} bytes runs past the end of the pickle", length));
        break;
      }
      case '.': {  // STOP
        if (!marks_.empty() || stack_.size() != 1)
          fail_at(fmt::format("STOP with {} values and {} marks on the stack, expected one value", stack_.size(),
                              marks_.size()));
        PickleValuePtr result = std::move(stack_.back());
        stack_.clear();
        memo_.clear();
        return result;
      }
      case '(':  // MARK
        if (marks_.size() >= kMaxMarkDepth) fail_at(fmt::format("more than {} nested MARKs", kMaxMarkDepth));
        marks_.push_back(stack_.size());
        break;
      case '0':  // POP
        if (stack_.size() > (marks_.empty() ? 0 : marks_.back())) {
          stack_.pop_back();
        } else {
          pop_to_mark();
        }
        break;
      case '1': pop_to_mark(); break;  // POP_MARK
      case '2': push(top()); break;    // DUP
      case 'N': push(make(Kind::None)); break;
      case 0x88:    // NEWTRUE
      case 0x89: {  // NEWFALSE
        auto value = make(Kind::Bool);
        value->int_value = opcode == 0x88;
        push(std::move(value));
        break;
      }
      case 'J':  // BININT: signed 32-bit
      case 'K':  // BININT1: unsigned 8-bit
      case 'M': {  // BININT2: unsigned 16-bit
        auto value = make(Kind::Int);
        if (opcode == 'J') value->int_value = static_cast<int32_t>(read_uint(4));
        if (opcode == 'K') value->int_value = static_cast<int64_t>(read_uint(1));
        if (opcode == 'M') value->int_value = static_cast<int64_t>(read_uint(2));
        push(std::move(value));
        break;
      }
      case 0x8a:    // LONG1
      case 0x8b: {  // LONG4: little-endian two's complement of the given length
        const uint64_t length = opcode == 0x8a ? read_uint(1) : read_uint(4);
        if (opcode == 0x8b && length > 0x7fffffffu) fail_at("LONG4 with a negative length");
        const std::string bytes = read_string(length);
        auto value = make(length > 8 ? Kind::BigInt : Kind::Int);
        if (length > 0 && length <= 8) {
          uint64_t raw = 0;
          for (size_t i = 0; i < length; ++i) raw |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
          if (length < 8 && (raw >> (8 * length - 1)) & 1) raw |= ~uint64_t{0} << (8 * length);  // sign-extend
          value->int_value = static_cast<int64_t>(raw);
        }
        push(std::move(value));
        break;
      }
      case 'G': {  // BINFLOAT: big-endian double
        const uint8_t* bytes = take(8);
        uint64_t raw = 0;
        for (int i = 0; i < 8; ++i) raw = (raw << 8) | bytes[i];
        auto value = make(Kind::Float);
        std::memcpy(&value->float_value, &raw, sizeof raw);
        push(std::move(value));
        break;
      }
      case 'X':     // BINUNICODE
      case 0x8c:    // SHORT_BINUNICODE
      case 0x8d: {  // BINUNICODE8
        const uint64_t length = read_uint(opcode == 0x8c ? 1 : opcode == 'X' ? 4 : 8);
        auto value = make(Kind::Str);
        value->text = read_string(length);
        if (!valid_utf8(value->text)) fail_at("string is not valid UTF-8");
        push(std::move(value));
        break;
      }
      case 'B':     // BINBYTES
      case 'C':     // SHORT_BINBYTES
      case 0x8e:    // BINBYTES8
      case 0x96: {  // BYTEARRAY8
        const uint64_t length = read_uint(opcode == 'C' ? 1 : opcode == 'B' ? 4 : 8);
        auto value = make(Kind::Bytes);
        value->text = read_string(length);
        push(std::move(value));
        break;
      }
      case ')': push(make(Kind::Tuple)); break;  // EMPTY_TUPLE
      case ']': push(make(Kind::List)); break;   // EMPTY_LIST
      case '}': push(make(Kind::Dict)); break;   // EMPTY_DICT
      case 0x8f: push(make(Kind::Set)); break;   // EMPTY_SET
      case 0x85:    // TUPLE1
      case 0x86:    // TUPLE2
      case 0x87: {  // TUPLE3
        const size_t count = opcode - 0x84;
        auto tuple = make(Kind::Tuple);
        tuple->items.resize(count);
        for (size_t i = count; i-- > 0;) tuple->items[i] = pop();
        count_items(count);
        push(std::move(tuple));
        break;
      }
      case 't':     // TUPLE
      case 'l':     // LIST
      case 0x91: {  // FROZENSET
        auto value = make(opcode == 't' ? Kind::Tuple : opcode == 'l' ? Kind::List : Kind::Set);
        value->items = pop_to_mark();
        count_items(value->items.size());
        push(std::move(value));
        break;
      }
      case 'd': {  // DICT
        auto items = pop_to_mark();
        if (items.size() % 2) fail_at("DICT with an odd number of items");
        auto dict = make(Kind::Dict);
        for (size_t i = 0; i < items.size(); i += 2) set_item(*dict, items[i], items[i + 1]);
        push(std::move(dict));
        break;
      }
      case 'a': {  // APPEND
        auto value = pop();
        auto& list = top();
        if (list->kind != Kind::List) fail_at(fmt::format("APPEND to a {}", pickle_kind_name(list->kind)));
        count_items(1);
        list->items.push_back(std::move(value));
        break;
      }
      case 'e':     // APPENDS
      case 0x90: {  // ADDITEMS
        auto items = pop_to_mark();
        auto& target = top();
        const Kind expected = opcode == 'e' ? Kind::List : Kind::Set;
        if (target->kind != expected)
          fail_at(fmt::format("{} to a {}", opcode == 'e' ? "APPENDS" : "ADDITEMS", pickle_kind_name(target->kind)));
        count_items(items.size());
        for (auto& item : items) target->items.push_back(std::move(item));
        break;
      }
      case 's': {  // SETITEM
        auto value = pop();
        auto key = pop();
        auto& dict = top();
        if (dict->kind != Kind::Dict) fail_at(fmt::format("SETITEM on a {}", pickle_kind_name(dict->kind)));
        set_item(*dict, std::move(key), std::move(value));
        break;
      }
      case 'u': {  // SETITEMS
        auto items = pop_to_mark();
        if (items.size() % 2) fail_at("SETITEMS with an odd number of items");
        auto& dict = top();
        if (dict->kind != Kind::Dict) fail_at(fmt::format("SETITEMS on a {}", pickle_kind_name(dict->kind)));
        for (size_t i = 0; i < items.size(); i += 2) set_item(*dict, items[i], items[i + 1]);
        break;
      }
      case 'b': {  // BUILD
        auto state = pop();
        build(*top(), state);
        break;
      }
      case 'h': push(memo_get(read_uint(1))); break;  // BINGET
      case 'j': push(memo_get(read_uint(4))); break;  // LONG_BINGET
      case 'q': memo_put(read_uint(1)); break;        // BINPUT
      case 'r': memo_put(read_uint(4)); break;        // LONG_BINPUT
      case 0x94: memo_put(memo_.size()); break;       // MEMOIZE
      case 'c': {  // GLOBAL
        std::string module = read_line();
        std::string name = read_line();
        push(resolve_global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        auto name = pop();
        auto module = pop();
        if (module->kind != Kind::Str || name->kind != Kind::Str) fail_at("STACK_GLOBAL needs two strings");
        push(resolve_global(module->text, name->text));
        break;
      }
      case 'i': {  // INST: constructs a class named inline
        std::string module = read_line();
        std::string name = read_line();
        fail_at(fmt::format("forbidden pickle global '{}' (INST)", printable(module + "." + name)));
      }
      case 'R': {  // REDUCE
        auto args = pop();
        auto callable = pop();
        push(call(callable, args));
        break;
      }
      case 'Q': {  // BINPERSID
        auto pid = pop();
        push(persistent_load(pid));
        break;
      }
      case 0x81: {  // NEWOBJ: cls.__new__(cls, *args)
        auto args = pop();
        auto cls = pop();
        push(new_object(cls, args));
        break;
      }
      case 0x92: {  // NEWOBJ_EX: cls.__new__(cls, *args, **kwargs)
        auto kwargs = pop();
        auto args = pop();
        auto cls = pop();
        if (kwargs->kind != Kind::Dict || !kwargs->entries.empty()) fail_at("NEWOBJ_EX with keyword arguments is not supported");
        push(new_object(cls, args));
        break;
      }
      case 'o':  // OBJ
        fail_at("pickle opcode OBJ (object construction) is not supported");
      case 0x82:
      case 0x83:
      case 0x84: fail_at("pickle extension registry codes (EXT1/EXT2/EXT4) are not supported");
      case 0x97:
      case 0x98: fail_at("out-of-band pickle buffers are not supported");
      default:
        fail_at(fmt::format("unsupported pickle opcode 0x{:02x}{}", opcode,
                            opcode >= 0x20 && opcode < 0x7f ? fmt::format(" ('{}')", static_cast<char>(opcode)) : ""));
    }
  }
  opcode_pos_ = pos_;
  fail_at("pickle ends without STOP");
}

}  // namespace ssdq
