// File access shared by every reader and writer: read-only memory maps and atomic writes
// (temp file in the same folder + fsync + rename, so a failure never leaves a partial file).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ssdq {

class MappedFile {
 public:
  // Fails with an Error naming the path when the file is missing or unreadable.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

std::string read_file(const std::string& path);
bool file_exists(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

// Calls write(fd) on a temp file next to `path`, then fsyncs and renames it over `path`.
// If write throws (or anything fails), the temp file is removed and `path` is untouched.
void write_file_atomic(const std::string& path, const std::function<void(int fd)>& write);
// Writes all of `bytes` to fd or fails naming `path`.
void write_all(int fd, const void* bytes, size_t size, const std::string& path);

}  // namespace ssdq
