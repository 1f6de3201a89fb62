// SHA-256 and SHA-1 (FIPS 180-4), for checking downloads against the hub's ETags: LFS files are
// named by the SHA-256 of their bytes, other files by their git blob SHA-1.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ssdq {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  std::string hex_digest();  // finishes the hash; call once

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

class Sha1 {
 public:
  Sha1();
  void update(const void* data, size_t size);
  std::string hex_digest();  // finishes the hash; call once

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 5> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// Hex digests of a file's bytes, read in chunks; fail naming the path when it cannot be read.
std::string file_sha256_hex(const std::string& path);
// git's object id of the file as a blob: SHA-1 of "blob <size>\0" followed by the bytes.
std::string file_git_blob_sha1_hex(const std::string& path);

}  // namespace ssdq
