#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/error.h"
#include "formats/file_io.h"

namespace ssdq {
namespace {

using nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";
// Headers and indexes are a few levels deep; deeper nesting is refused so that error messages
// (json::dump is recursive) cannot overflow the stack.
constexpr int kMaxJsonDepth = 64;
// model.safetensors.index.json of the largest published checkpoints is a few MB.
constexpr size_t kMaxIndexBytes = size_t{64} << 20;

// nlohmann keeps the last of duplicate keys silently; a header that names a tensor twice is corrupt.
json parse_json_object_without_duplicates(std::string_view text, const std::string& label) {
  std::vector<std::set<std::string>> open_objects;
  json::parser_callback_t track_keys = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxJsonDepth) fail("{}: JSON nested more than {} levels deep", label, kMaxJsonDepth);
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) fail("{}: duplicate key \"{}\"", label, key);
    }
    return true;
  };
  json root;
  try {
    root = json::parse(text.begin(), text.end(), track_keys);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", label, e.what());
  }
  if (!root.is_object()) fail("{}: expected a JSON object, got {}", label, root.type_name());
  return root;
}

// A JSON integer >= 0 that fits in int64.
int64_t non_negative_int(const json& value, const std::string& what) {
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail("{}: {} is too large", what, v);
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer()) fail("{}: {} is negative", what, value.get<int64_t>());
  fail("{}: expected a non-negative integer, got {} {}", what, value.type_name(), value.dump());
}

const json& required_field(const json& entry, const char* field, const std::string& what) {
  auto found = entry.find(field);
  if (found == entry.end()) fail("{}: missing field \"{}\"", what, field);
  return *found;
}

struct Span {
  uint64_t begin;
  uint64_t end;
  std::string name;
};

Tensor parse_tensor_entry(const json& entry, const std::string& what, const std::shared_ptr<const void>& owner,
                          const uint8_t* section, uint64_t section_size, Span& span) {
  if (!entry.is_object()) fail("{}: expected an object with dtype, shape, data_offsets, got {}", what, entry.type_name());

  const json& dtype_field = required_field(entry, "dtype", what);
  if (!dtype_field.is_string()) fail("{}: dtype must be a string, got {}", what, dtype_field.type_name());
  const auto& dtype_text = dtype_field.get_ref<const std::string&>();
  auto dtype = dtype_from_name(dtype_text);
  if (!dtype) fail("{}: unknown dtype \"{}\"", what, dtype_text);

  const json& shape_field = required_field(entry, "shape", what);
  if (!shape_field.is_array()) fail("{}: shape must be an array, got {}", what, shape_field.type_name());
  Shape shape;
  shape.reserve(shape_field.size());
  for (const json& dim : shape_field) shape.push_back(non_negative_int(dim, what + ": shape entry"));
  const uint64_t numel = static_cast<uint64_t>(checked_numel(shape, what));
  const uint64_t element_size = dtype_size(*dtype);
  if (numel > std::numeric_limits<uint64_t>::max() / element_size) fail("{}: shape {} is too large", what, shape_str(shape));
  const uint64_t nbytes = numel * element_size;

  const json& offsets = required_field(entry, "data_offsets", what);
  if (!offsets.is_array() || offsets.size() != 2) fail("{}: data_offsets must be [begin, end], got {}", what, offsets.dump());
  const uint64_t begin = static_cast<uint64_t>(non_negative_int(offsets[0], what + ": data_offsets begin"));
  const uint64_t end = static_cast<uint64_t>(non_negative_int(offsets[1], what + ": data_offsets end"));
  if (end < begin) fail("{}: data_offsets [{}, {}] end before begin", what, begin, end);
  if (end > section_size)
    fail("{}: data_offsets [{}, {}] run past the end of the data section ({} bytes)", what, begin, end, section_size);
  if (end - begin != nbytes)
    fail("{}: data_offsets [{}, {}] span {} bytes, but {} {} needs {} bytes", what, begin, end, end - begin,
         dtype_text, shape_str(shape), nbytes);
  span.begin = begin;
  span.end = end;

  Tensor tensor;
  tensor.dtype = *dtype;
  tensor.shape = std::move(shape);
  const uint8_t* bytes = section + begin;
  if (reinterpret_cast<uintptr_t>(bytes) % element_size != 0) {
    // Readers cast data to T*; a misaligned element would be undefined behaviour.
    return Tensor::own(tensor.dtype, tensor.shape, std::vector<uint8_t>(bytes, bytes + nbytes));
  }
  tensor.data = bytes;
  tensor.keepalive = owner;
  return tensor;
}

std::map<std::string, std::string> parse_metadata(const json& value, const std::string& label) {
  if (!value.is_object()) fail("{}: __metadata__ must be an object, got {}", label, value.type_name());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) fail("{}: __metadata__ \"{}\": expected a string value, got {}", label, key, item.type_name());
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

void check_no_overlap(std::vector<Span>& spans, const std::string& label) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  const Span* furthest = nullptr;
  for (const Span& span : spans) {
    if (span.begin == span.end) continue;
    if (furthest && span.begin < furthest->end)
      fail("{}: tensors \"{}\" [{}, {}) and \"{}\" [{}, {}) overlap", label, furthest->name, furthest->begin,
           furthest->end, span.name, span.begin, span.end);
    if (!furthest || span.end > furthest->end) furthest = &span;
  }
}

uint64_t read_u64_le(const uint8_t* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

std::string parent_folder(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

}  // namespace

SafetensorsFile parse_safetensors(std::shared_ptr<const void> owner, const uint8_t* data, size_t size,
                                  const std::string& label) {
  if (size < 8) fail("{}: {} bytes is too short for the 8-byte header length", label, size);
  const uint64_t header_size = read_u64_le(data);
  if (header_size > kSafetensorsMaxHeaderBytes)
    fail("{}: header length {} exceeds the limit of {} bytes", label, header_size, kSafetensorsMaxHeaderBytes);
  if (header_size > size - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes after the length field)", label, header_size,
         size - 8);
  const std::string_view header(reinterpret_cast<const char*>(data + 8), header_size);
  const json root = parse_json_object_without_duplicates(header, label + ": header");
  const uint8_t* section = data + 8 + header_size;
  const uint64_t section_size = size - 8 - header_size;

  SafetensorsFile file;
  std::vector<Span> spans;
  spans.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == kMetadataKey) {
      file.metadata = parse_metadata(entry, label);
      continue;
    }
    Span span{0, 0, name};
    Tensor tensor = parse_tensor_entry(entry, fmt::format("{}: tensor \"{}\"", label, name), owner, section,
                                       section_size, span);
    file.tensors.emplace(name, std::move(tensor));
    spans.push_back(std::move(span));
  }
  check_no_overlap(spans, label);
  return file;
}

SafetensorsFile read_safetensors(const std::string& path) {
  auto mapped = MappedFile::open(path);
  return parse_safetensors(mapped, mapped->data(), mapped->size(), path);
}

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorMap::value_type*> data_order;
  for (const auto& item : tensors) {
    const auto& [name, tensor] = item;
    const std::string what = fmt::format("{}: tensor \"{}\"", path, name);
    if (name == kMetadataKey) fail("{}: the name is reserved for metadata", what);
    checked_numel(tensor.shape, what);
    if (tensor.data == nullptr && tensor.nbytes() != 0) fail("{}: shape {} but no data", what, shape_str(tensor.shape));
    data_order.push_back(&item);
  }
  std::stable_sort(data_order.begin(), data_order.end(), [](const auto* a, const auto* b) {
    return dtype_size(a->second.dtype) > dtype_size(b->second.dtype);
  });

  json header = json::object();
  uint64_t offset = 0;
  for (const auto* item : data_order) {
    const Tensor& tensor = item->second;
    const uint64_t end = offset + tensor.nbytes();
    header[item->first] = {{"dtype", std::string(dtype_name(tensor.dtype))},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, end}}};
    offset = end;
  }
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;

  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const json::exception& e) {
    fail("{}: cannot encode the header (names and metadata must be UTF-8): {}", path, e.what());
  }
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  uint8_t length_field[8];
  for (int i = 0; i < 8; ++i) length_field[i] = static_cast<uint8_t>(uint64_t{header_text.size()} >> (8 * i));

  write_file_atomic(path, [&](int fd) {
    write_all(fd, length_field, sizeof length_field, path);
    write_all(fd, header_text.data(), header_text.size(), path);
    for (const auto* item : data_order) write_all(fd, item->second.data, item->second.nbytes(), path);
  });
}

SafetensorsFile read_safetensors_index(const std::string& index_path) {
  const auto index_file = MappedFile::open(index_path);
  if (index_file->size() > kMaxIndexBytes)
    fail("{}: {} bytes is larger than the limit of {} bytes for a safetensors index", index_path, index_file->size(),
         kMaxIndexBytes);
  const json index = parse_json_object_without_duplicates(index_file->view(), index_path);
  auto weight_map_field = index.find("weight_map");
  if (weight_map_field == index.end()) fail("{}: missing field \"weight_map\"", index_path);
  if (!weight_map_field->is_object()) fail("{}: weight_map must be an object, got {}", index_path, weight_map_field->type_name());

  std::map<std::string, std::string> shard_of;                  // tensor -> shard file name
  std::map<std::string, std::vector<std::string>> names_in;     // shard file name -> tensors
  for (const auto& [name, shard] : weight_map_field->items()) {
    if (!shard.is_string()) fail("{}: weight_map \"{}\": expected a shard file name, got {}", index_path, name, shard.type_name());
    const auto& shard_name = shard.get_ref<const std::string&>();
    if (shard_name.empty() || shard_name == "." || shard_name == ".." || shard_name.find('/') != std::string::npos ||
        shard_name.find('\0') != std::string::npos)
      fail("{}: weight_map \"{}\": shard \"{}\" is not a file name in the index's folder", index_path, name, shard_name);
    shard_of.emplace(name, shard_name);
    names_in[shard_name].push_back(name);
  }

  const std::string folder = parent_folder(index_path);
  SafetensorsFile result;
  for (const auto& [shard_name, names] : names_in) {
    const std::string shard_path = join_path(folder, shard_name);
    if (!file_exists(shard_path))
      fail("{}: shard file {} (holding tensor \"{}\") does not exist", index_path, shard_path, names.front());
    SafetensorsFile shard = read_safetensors(shard_path);
    for (const std::string& name : names)
      if (shard.tensors.count(name) == 0)
        fail("{}: tensor \"{}\" is missing from shard {} named by {}", shard_path, name, shard_name, index_path);
    for (auto& [name, tensor] : shard.tensors) {
      auto assigned = shard_of.find(name);
      if (assigned == shard_of.end())
        fail("{}: tensor \"{}\" is not named in {}", shard_path, name, index_path);
      if (assigned->second != shard_name)
        fail("{}: tensor \"{}\" is in this shard, but {} puts it in shard {}", shard_path, name, index_path,
             assigned->second);
      result.tensors.emplace(name, std::move(tensor));
    }
    for (auto& entry : shard.metadata) result.metadata.insert(std::move(entry));
  }

  auto index_metadata = index.find("metadata");
  if (index_metadata != index.end() && !index_metadata->is_null()) {
    if (!index_metadata->is_object()) fail("{}: metadata must be an object, got {}", index_path, index_metadata->type_name());
    for (const auto& [key, value] : index_metadata->items())
      result.metadata[key] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  return result;
}

}  // namespace ssdq
