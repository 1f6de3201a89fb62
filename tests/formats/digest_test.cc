#include "formats/digest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "formats/error.h"

namespace ssdq {
namespace {

std::string sha256(const std::string& text) {
  Sha256 hash;
  hash.update(text.data(), text.size());
  return hash.hex_digest();
}

std::string sha1(const std::string& text) {
  Sha1 hash;
  hash.update(text.data(), text.size());
  return hash.hex_digest();
}

TEST(Digest, Sha256KnownAnswers) {  // FIPS 180-4 examples
  EXPECT_EQ(sha256(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Digest, Sha1KnownAnswers) {
  EXPECT_EQ(sha1(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  EXPECT_EQ(sha1("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
  EXPECT_EQ(sha1("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
}

TEST(Digest, UpdatesInPiecesMatchOneUpdate) {
  const std::string text(1000, 'x');
  for (size_t split : {1, 55, 56, 63, 64, 65, 999}) {
    Sha256 hash;
    hash.update(text.data(), split);
    hash.update(text.data() + split, text.size() - split);
    EXPECT_EQ(hash.hex_digest(), sha256(text)) << split;
  }
}

TEST(Digest, FilesAndGitBlobIds) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/hello.txt";
  FILE* out = std::fopen(path.c_str(), "w");
  std::fputs("hello world\n", out);
  std::fclose(out);
  EXPECT_EQ(file_sha256_hex(path), "a948904f2f0f479b8f8197694b30184b0d2ed1c1cd2a1ec0fb85d299a192a447");
  // `echo 'hello world' | git hash-object --stdin`
  EXPECT_EQ(file_git_blob_sha1_hex(path), "3b18e512dba79e4c8300dd08aeb37f8e728b8dad");
  EXPECT_THROW(file_sha256_hex(path + ".missing"), Error);
}

}  // namespace
}  // namespace ssdq
