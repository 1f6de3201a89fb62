// Safetensors checkpoints (https://github.com/huggingface/safetensors): reader over a memory map,
// atomic writer, and sharded checkpoints described by model.safetensors.index.json.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "formats/tensor.h"

namespace ssdq {

struct SafetensorsFile {
  TensorMap tensors;                                // point into the mapped file (keepalive = the map)
  std::map<std::string, std::string> metadata;      // "__metadata__" (string values only, as the format requires)
};

// Largest JSON header accepted (the reference implementation's limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// Maps the file and parses it; tensors keep the map alive.
SafetensorsFile read_safetensors(const std::string& path);

// Parses `size` bytes at `data`; every tensor keeps `owner` alive and points into `data`, except a
// tensor whose bytes are not aligned to its element size, which gets an aligned copy. `label` names
// the input in error messages. Checks: header length inside the input and <= 100 MB, a JSON object
// without duplicate keys, each tensor's dtype/shape/data_offsets (span matches the shape, lies inside
// the data section, overlaps no other tensor), "__metadata__" mapping strings to strings. Gaps
// between tensors and trailing bytes are accepted.
SafetensorsFile parse_safetensors(std::shared_ptr<const void> owner, const uint8_t* data, size_t size,
                                  const std::string& label);

// Writes atomically: header JSON (keys sorted, "__metadata__" only when not empty) padded with
// spaces to a multiple of 8, then the tensor bytes packed without gaps, ordered by element size
// (largest first) then name, so every tensor starts aligned to its element size. Fails, leaving no
// file, when a tensor's data is null or its shape is invalid, or a name is "__metadata__".
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Sharded checkpoint: the index's "weight_map" maps tensor name -> shard file name (a plain name in
// the index's folder). Opens each shard once and fails when a named tensor is missing from its
// shard, a shard holds a tensor the index does not assign to it, or a name appears twice.
// metadata = the shards' "__metadata__" (first shard in file-name order wins on a clash), then the
// index's "metadata" object on top (non-string values as their JSON text, e.g. total_size).
SafetensorsFile read_safetensors_index(const std::string& index_path);

}  // namespace ssdq
