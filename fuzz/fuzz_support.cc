#include "fuzz/fuzz_support.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>

namespace ssdq::fuzz {
namespace {

struct ScratchDir {
  std::string path;
  ScratchDir() {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/ssdq-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot create " + pattern);
    path = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

void put16(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v));
  out.push_back(static_cast<uint8_t>(v >> 8));
}
void put32(std::vector<uint8_t>& out, uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

}  // namespace

const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

std::string write_scratch_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
  return path;
}

std::vector<uint8_t> make_stored_zip(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& entries) {
  std::vector<uint8_t> zip, directory;
  for (const auto& [name, bytes] : entries) {
    const uint32_t offset = static_cast<uint32_t>(zip.size());
    put32(zip, 0x04034b50);
    put16(zip, 20), put16(zip, 0), put16(zip, 0), put16(zip, 0), put16(zip, 0);
    put32(zip, 0), put32(zip, static_cast<uint32_t>(bytes.size())), put32(zip, static_cast<uint32_t>(bytes.size()));
    put16(zip, static_cast<uint32_t>(name.size())), put16(zip, 0);
    zip.insert(zip.end(), name.begin(), name.end());
    zip.insert(zip.end(), bytes.begin(), bytes.end());

    put32(directory, 0x02014b50);
    put16(directory, 20), put16(directory, 20), put16(directory, 0), put16(directory, 0), put16(directory, 0),
        put16(directory, 0);
    put32(directory, 0), put32(directory, static_cast<uint32_t>(bytes.size())),
        put32(directory, static_cast<uint32_t>(bytes.size()));
    put16(directory, static_cast<uint32_t>(name.size())), put16(directory, 0), put16(directory, 0),
        put16(directory, 0), put16(directory, 0);
    put32(directory, 0), put32(directory, offset);
    directory.insert(directory.end(), name.begin(), name.end());
  }
  const uint32_t directory_offset = static_cast<uint32_t>(zip.size());
  zip.insert(zip.end(), directory.begin(), directory.end());
  put32(zip, 0x06054b50);
  put16(zip, 0), put16(zip, 0), put16(zip, static_cast<uint32_t>(entries.size())),
      put16(zip, static_cast<uint32_t>(entries.size()));
  put32(zip, static_cast<uint32_t>(directory.size())), put32(zip, directory_offset);
  put16(zip, 0);
  return zip;
}

}  // namespace ssdq::fuzz
