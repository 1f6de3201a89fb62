#include "formats/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "formats/error.h"

namespace ssdq {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* addr = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail("{}: cannot map: {}", path, std::strerror(err));
    }
    file->data_ = static_cast<const uint8_t*>(addr);
  }
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

std::string read_file(const std::string& path) { return std::string(MappedFile::open(path)->view()); }

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

void write_all(int fd, const void* bytes, size_t size, const std::string& path) {
  const auto* cursor = static_cast<const uint8_t*>(bytes);
  while (size > 0) {
    ssize_t written = ::write(fd, cursor, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      fail("{}: write failed: {}", path, std::strerror(errno));
    }
    cursor += written;
    size -= static_cast<size_t>(written);
  }
}

void write_file_atomic(const std::string& path, const std::function<void(int fd)>& write) {
  std::random_device entropy;
  const std::string temp = fmt::format("{}.tmp-{}-{:08x}", path, ::getpid(), entropy());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", temp, std::strerror(errno));
  try {
    write(fd);
    if (::fsync(fd) != 0) fail("{}: fsync failed: {}", temp, std::strerror(errno));
    if (::close(fd) != 0) {
      fd = -1;
      fail("{}: close failed: {}", temp, std::strerror(errno));
    }
    fd = -1;
    if (::rename(temp.c_str(), path.c_str()) != 0) fail("{}: cannot rename into place: {}", path, std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
}

}  // namespace ssdq
