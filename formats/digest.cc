#include "formats/digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <vector>

#include "formats/error.h"

namespace ssdq {
namespace {

constexpr uint32_t kSha256RoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }
uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The Merkle–Damgård framing both hashes share: 64-byte blocks, then 0x80, zeros and the bit
// length as a big-endian 64-bit number.
template <typename Compress>
void absorb(const void* data, size_t size, std::array<uint8_t, 64>& buffer, size_t& buffered, uint64_t& total,
            Compress compress) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  total += size;
  while (size > 0) {
    const size_t take = std::min(size, 64 - buffered);
    std::memcpy(buffer.data() + buffered, bytes, take);
    buffered += take;
    bytes += take;
    size -= take;
    if (buffered == 64) {
      compress(buffer.data());
      buffered = 0;
    }
  }
}

template <typename Compress>
void pad(std::array<uint8_t, 64>& buffer, size_t& buffered, uint64_t total, Compress compress) {
  const uint64_t bits = total * 8;
  buffer[buffered++] = 0x80;
  if (buffered > 56) {
    std::memset(buffer.data() + buffered, 0, 64 - buffered);
    compress(buffer.data());
    buffered = 0;
  }
  std::memset(buffer.data() + buffered, 0, 56 - buffered);
  for (int i = 0; i < 8; ++i) buffer[56 + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  compress(buffer.data());
  buffered = 0;
}

template <size_t N>
std::string hex_words(const std::array<uint32_t, N>& words) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint32_t word : words)
    for (int shift = 28; shift >= 0; shift -= 4) out += kDigits[(word >> shift) & 0xf];
  return out;
}

void read_chunks(const std::string& path, const std::function<void(const uint8_t*, size_t)>& consume) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::vector<uint8_t> chunk(size_t{1} << 20);
  while (true) {
    const ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      fail("{}: read failed: {}", path, std::strerror(err));
    }
    if (got == 0) break;
    consume(chunk.data(), static_cast<size_t>(got));
  }
  ::close(fd);
}

}  // namespace

Sha256::Sha256()
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::compress(const uint8_t* block) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) w[i] = load_be32(block + 4 * i);
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kSha256RoundConstants[i] + w[i];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  state_[0] += a, state_[1] += b, state_[2] += c, state_[3] += d;
  state_[4] += e, state_[5] += f, state_[6] += g, state_[7] += h;
}

void Sha256::update(const void* data, size_t size) {
  absorb(data, size, buffer_, buffered_, total_bytes_, [this](const uint8_t* block) { compress(block); });
}

std::string Sha256::hex_digest() {
  pad(buffer_, buffered_, total_bytes_, [this](const uint8_t* block) { compress(block); });
  return hex_words(state_);
}

Sha1::Sha1() : state_{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0} {}

void Sha1::compress(const uint8_t* block) {
  uint32_t w[80];
  for (int i = 0; i < 16; ++i) w[i] = load_be32(block + 4 * i);
  for (int i = 16; i < 80; ++i) w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3], e = state_[4];
  for (int i = 0; i < 80; ++i) {
    uint32_t f, k;
    if (i < 20) {
      f = (b & c) | (~b & d), k = 0x5a827999;
    } else if (i < 40) {
      f = b ^ c ^ d, k = 0x6ed9eba1;
    } else if (i < 60) {
      f = (b & c) | (b & d) | (c & d), k = 0x8f1bbcdc;
    } else {
      f = b ^ c ^ d, k = 0xca62c1d6;
    }
    const uint32_t t = rotl(a, 5) + f + e + k + w[i];
    e = d, d = c, c = rotl(b, 30), b = a, a = t;
  }
  state_[0] += a, state_[1] += b, state_[2] += c, state_[3] += d, state_[4] += e;
}

void Sha1::update(const void* data, size_t size) {
  absorb(data, size, buffer_, buffered_, total_bytes_, [this](const uint8_t* block) { compress(block); });
}

std::string Sha1::hex_digest() {
  pad(buffer_, buffered_, total_bytes_, [this](const uint8_t* block) { compress(block); });
  return hex_words(state_);
}

std::string file_sha256_hex(const std::string& path) {
  Sha256 hash;
  read_chunks(path, [&](const uint8_t* data, size_t size) { hash.update(data, size); });
  return hash.hex_digest();
}

std::string file_git_blob_sha1_hex(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  Sha1 hash;
  const std::string header = "blob " + std::to_string(size);
  hash.update(header.c_str(), header.size() + 1);  // with its terminating NUL
  read_chunks(path, [&](const uint8_t* data, size_t got) { hash.update(data, got); });
  return hash.hex_digest();
}

}  // namespace ssdq
