// A minimal ZIP reader over a memory buffer, enough for torch.save checkpoints: it reads the
// end-of-central-directory record (ZIP64 too), the central directory and each entry's local
// header, and hands out the bytes of STORED entries without copying. Every count, size and
// offset is checked against the buffer; compressed or encrypted entries are listed but refused
// when their bytes are asked for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace ssdq {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;  // 0 = stored, 8 = deflate, ...
  uint16_t flags = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t data_offset = 0;  // of the entry's first data byte in the buffer
};

struct ByteSpan {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

class ZipReader {
 public:
  static constexpr size_t kMaxEntries = size_t{1} << 20;

  // Parses the directory; throws ssdq::Error naming `label` on anything malformed. The buffer
  // must outlive the reader and every span it returns.
  ZipReader(const uint8_t* data, size_t size, std::string label);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;
  // The bytes of a stored entry; fails for compressed or encrypted entries.
  ByteSpan stored_bytes(const ZipEntry& entry) const;
  const std::string& label() const { return label_; }

 private:
  struct DirectoryLocation {
    uint64_t entry_count;
    uint64_t offset;
    uint64_t size;
  };
  DirectoryLocation locate_directory() const;
  void read_directory(const DirectoryLocation& where);
  uint64_t local_data_offset(const ZipEntry& entry, uint64_t header_offset, uint64_t directory_offset) const;

  const uint8_t* data_;
  size_t size_;
  std::string label_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> by_name_;
};

}  // namespace ssdq
