// The torch.save pickle on its own: the input is data.pkl. A first pass of the Unpickler finds the
// storages it names; the harness then packs the input and storages of exactly the claimed sizes
// (capped) into a torch.save zip, so parse_torch_bin gets past the zip checks and exercises the
// unpickler and the state-dict walk (names, views, strides, copies) on every input.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "formats/error.h"
#include "formats/torch_bin.h"
#include "formats/unpickler.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/tensor_checks.h"

namespace {

using ssdq::PickleValue;
using ssdq::PickleValuePtr;

constexpr uint64_t kMaxStorageBytes = 1 << 20;

void collect_storages(const PickleValue& root, std::map<std::string, uint64_t>& sizes) {
  std::vector<const PickleValue*> pending = {&root};
  std::set<const PickleValue*> seen;
  while (!pending.empty()) {
    const PickleValue* value = pending.back();
    pending.pop_back();
    if (!seen.insert(value).second) continue;
    if (value->tensor) sizes[value->tensor->storage->key] = value->tensor->storage->nbytes();
    if (value->storage) sizes[value->storage->key] = value->storage->nbytes();
    for (const auto& item : value->items) pending.push_back(item.get());
    for (const auto& [key, item] : value->entries) {
      pending.push_back(key.get());
      pending.push_back(item.get());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ssdq;
  std::map<std::string, uint64_t> storage_sizes;
  try {
    Unpickler unpickler(data, size, "fuzz: data.pkl");
    collect_storages(*unpickler.load(), storage_sizes);
  } catch (const Error&) {
    return 0;
  }
  std::vector<std::pair<std::string, std::vector<uint8_t>>> entries;
  entries.emplace_back("archive/data.pkl", std::vector<uint8_t>(data, data + size));
  entries.emplace_back("archive/byteorder", std::vector<uint8_t>{'l', 'i', 't', 't', 'l', 'e'});
  uint64_t total = 0;
  for (const auto& [key, bytes] : storage_sizes) {
    // Storages past the cap stay missing (the reader reports that); zip names have 16-bit lengths.
    if (bytes > kMaxStorageBytes - total || key.size() > 1024 || entries.size() > 256) continue;
    total += bytes;
    std::vector<uint8_t> storage(static_cast<size_t>(bytes));
    for (size_t i = 0; i < storage.size(); ++i) storage[i] = static_cast<uint8_t>(i * 37 + 11);
    entries.emplace_back("archive/data/" + key, std::move(storage));
  }
  auto zip = std::make_shared<std::vector<uint8_t>>(fuzz::make_stored_zip(entries));
  try {
    const TensorMap tensors = parse_torch_bin(zip, zip->data(), zip->size(), "fuzz.bin");
    fuzz::touch_tensors(tensors);
  } catch (const Error&) {
  }
  return 0;
}
