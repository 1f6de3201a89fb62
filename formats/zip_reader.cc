#include "formats/zip_reader.h"

#include <cstring>
#include <utility>

#include "formats/error.h"

namespace ssdq {
namespace {

constexpr uint32_t kEndOfDirectorySignature = 0x06054b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint32_t kZip64EndOfDirectorySignature = 0x06064b50;
constexpr uint32_t kDirectoryEntrySignature = 0x02014b50;
constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr size_t kEndOfDirectorySize = 22;
constexpr size_t kZip64LocatorSize = 20;
constexpr size_t kZip64EndOfDirectorySize = 56;
constexpr size_t kDirectoryEntrySize = 46;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kMaxCommentSize = 0xffff;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kEncryptedFlag = 0x0001;

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32(const uint8_t* p) { return static_cast<uint32_t>(u16(p)) | (static_cast<uint32_t>(u16(p + 2)) << 16); }
uint64_t u64(const uint8_t* p) { return static_cast<uint64_t>(u32(p)) | (static_cast<uint64_t>(u32(p + 4)) << 32); }

std::string method_name(uint16_t method) {
  switch (method) {
    case 8: return "deflate";
    case 9: return "deflate64";
    case 12: return "bzip2";
    case 14: return "lzma";
    case 93: return "zstd";
    default: return "method " + std::to_string(method);
  }
}

}  // namespace

ZipReader::ZipReader(const uint8_t* data, size_t size, std::string label)
    : data_(data), size_(size), label_(std::move(label)) {
  read_directory(locate_directory());
}

ZipReader::DirectoryLocation ZipReader::locate_directory() const {
  if (size_ < kEndOfDirectorySize)
    fail("{}: not a zip file ({} bytes, too short for an end-of-central-directory record)", label_, size_);
  // The record sits at the end, followed only by its comment (at most 64 KiB).
  const size_t lowest = size_ - kEndOfDirectorySize > kMaxCommentSize ? size_ - kEndOfDirectorySize - kMaxCommentSize : 0;
  size_t pos = size_ - kEndOfDirectorySize;
  for (;; --pos) {
    if (u32(data_ + pos) == kEndOfDirectorySignature &&
        pos + kEndOfDirectorySize + u16(data_ + pos + 20) <= size_)
      break;
    if (pos == lowest)
      fail("{}: not a zip file (no end-of-central-directory record in the last {} bytes; truncated?)", label_,
           size_ - lowest);
  }
  const uint8_t* end = data_ + pos;
  if (u16(end + 4) != 0 || u16(end + 6) != 0 || u16(end + 8) != u16(end + 10))
    fail("{}: multi-disk zip archives are not supported (end-of-central-directory at byte {})", label_, pos);
  DirectoryLocation where{u16(end + 10), u32(end + 16), u32(end + 12)};
  uint64_t directory_limit = pos;

  if (pos >= kZip64LocatorSize && u32(data_ + pos - kZip64LocatorSize) == kZip64LocatorSignature) {
    const uint8_t* locator = data_ + pos - kZip64LocatorSize;
    const uint64_t record = u64(locator + 8);
    const uint64_t locator_pos = pos - kZip64LocatorSize;
    if (u32(locator + 4) != 0 || u32(locator + 16) > 1)
      fail("{}: multi-disk zip64 archives are not supported", label_);
    if (record > locator_pos || locator_pos - record < kZip64EndOfDirectorySize)
      fail("{}: zip64 end-of-central-directory offset {} is outside the file (locator at byte {})", label_, record,
           locator_pos);
    const uint8_t* end64 = data_ + record;
    if (u32(end64) != kZip64EndOfDirectorySignature)
      fail("{}: bad zip64 end-of-central-directory signature at byte {}", label_, record);
    if (u32(end64 + 16) != 0 || u32(end64 + 20) != 0 || u64(end64 + 24) != u64(end64 + 32))
      fail("{}: multi-disk zip64 archives are not supported", label_);
    where = {u64(end64 + 32), u64(end64 + 48), u64(end64 + 40)};
    directory_limit = record;
  }

  if (where.offset > directory_limit || where.size > directory_limit - where.offset)
    fail("{}: central directory (offset {}, {} bytes) runs past its end record at byte {} (file is {} bytes)", label_,
         where.offset, where.size, directory_limit, size_);
  if (where.entry_count > kMaxEntries)
    fail("{}: zip lists {} entries, more than the limit of {}", label_, where.entry_count, kMaxEntries);
  if (where.entry_count * kDirectoryEntrySize > where.size)
    fail("{}: zip lists {} entries but its central directory has only {} bytes", label_, where.entry_count,
         where.size);
  return where;
}

void ZipReader::read_directory(const DirectoryLocation& where) {
  const uint64_t directory_end = where.offset + where.size;
  uint64_t cursor = where.offset;
  entries_.reserve(static_cast<size_t>(where.entry_count));
  for (uint64_t index = 0; index < where.entry_count; ++index) {
    if (directory_end - cursor < kDirectoryEntrySize)
      fail("{}: central directory entry {} at byte {} runs past the directory end", label_, index, cursor);
    const uint8_t* header = data_ + cursor;
    if (u32(header) != kDirectoryEntrySignature)
      fail("{}: bad central directory entry signature at byte {} (entry {})", label_, cursor, index);
    const size_t name_size = u16(header + 28);
    const size_t extra_size = u16(header + 30);
    const size_t comment_size = u16(header + 32);
    if (directory_end - cursor - kDirectoryEntrySize < name_size + extra_size + comment_size)
      fail("{}: central directory entry {} at byte {} runs past the directory end", label_, index, cursor);

    ZipEntry entry;
    entry.name.assign(reinterpret_cast<const char*>(header + kDirectoryEntrySize), name_size);
    entry.flags = u16(header + 8);
    entry.method = u16(header + 10);
    entry.compressed_size = u32(header + 20);
    entry.size = u32(header + 24);
    uint64_t header_offset = u32(header + 42);
    const uint16_t start_disk = u16(header + 34);

    // ZIP64 extra field: 64-bit values for exactly those fields that hold 0xffffffff, in order.
    const uint8_t* extra = header + kDirectoryEntrySize + name_size;
    for (size_t at = 0; at + 4 <= extra_size;) {
      const uint16_t id = u16(extra + at);
      const size_t field_size = u16(extra + at + 2);
      if (field_size > extra_size - at - 4)
        fail("{}: entry '{}': extra field at byte {} runs past its header", label_, entry.name, cursor);
      if (id == kZip64ExtraId) {
        const uint8_t* field = extra + at + 4;
        size_t used = 0;
        auto take = [&](uint64_t& value) {
          if (value != 0xffffffffu) return;
          if (field_size - used < 8) fail("{}: entry '{}': zip64 extra field is too short", label_, entry.name);
          value = u64(field + used);
          used += 8;
        };
        take(entry.size);
        take(entry.compressed_size);
        take(header_offset);
      }
      at += 4 + field_size;
    }
    if (start_disk != 0 && start_disk != 0xffff)
      fail("{}: entry '{}' starts on disk {}; multi-disk zip archives are not supported", label_, entry.name,
           start_disk);

    entry.data_offset = local_data_offset(entry, header_offset, where.offset);
    if (!by_name_.emplace(entry.name, entries_.size()).second)
      fail("{}: zip has two entries named '{}'", label_, entry.name);
    entries_.push_back(std::move(entry));
    cursor += kDirectoryEntrySize + name_size + extra_size + comment_size;
  }
}

uint64_t ZipReader::local_data_offset(const ZipEntry& entry, uint64_t header_offset, uint64_t directory_offset) const {
  // Local headers and entry data all lie before the central directory.
  if (header_offset > directory_offset || directory_offset - header_offset < kLocalHeaderSize)
    fail("{}: entry '{}': local header offset {} is outside the file's data area (central directory at byte {})",
         label_, entry.name, header_offset, directory_offset);
  const uint8_t* header = data_ + header_offset;
  if (u32(header) != kLocalHeaderSignature)
    fail("{}: entry '{}': bad local header signature at byte {}", label_, entry.name, header_offset);
  const uint64_t name_size = u16(header + 26);
  const uint64_t extra_size = u16(header + 28);
  const uint64_t data_offset = header_offset + kLocalHeaderSize + name_size + extra_size;
  if (data_offset > directory_offset)
    fail("{}: entry '{}': local header at byte {} runs into the central directory", label_, entry.name,
         header_offset);
  if (name_size != entry.name.size() ||
      std::memcmp(header + kLocalHeaderSize, entry.name.data(), entry.name.size()) != 0)
    fail("{}: entry '{}': local header at byte {} names a different entry", label_, entry.name, header_offset);
  if (entry.compressed_size > directory_offset - data_offset)
    fail("{}: entry '{}': {} bytes of data at byte {} run past the end of the data area (byte {})", label_,
         entry.name, entry.compressed_size, data_offset, directory_offset);
  return data_offset;
}

const ZipEntry* ZipReader::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

ByteSpan ZipReader::stored_bytes(const ZipEntry& entry) const {
  if (entry.flags & kEncryptedFlag) fail("{}: zip entry '{}' is encrypted", label_, entry.name);
  if (entry.method != 0)
    fail("{}: zip entry '{}' is compressed ({}); only stored (uncompressed) entries are supported, as torch.save "
         "writes them",
         label_, entry.name, method_name(entry.method));
  if (entry.compressed_size != entry.size)
    fail("{}: stored zip entry '{}' has compressed size {} but size {}", label_, entry.name, entry.compressed_size,
         entry.size);
  return {data_ + entry.data_offset, static_cast<size_t>(entry.size)};
}

}  // namespace ssdq
