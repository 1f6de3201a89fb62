// The hub cache against a fake hub on 127.0.0.1 (tests/fake_hub_server.h): downloads into the
// huggingface_hub layout, the three weight layouts, a renamed repository's redirect, 404s, 401
// without the token, truncated and corrupted transfers, offline mode and the fallback to the
// cache when the hub cannot be reached.
#include "formats/hub_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "formats/checkpoint.h"
#include "formats/digest.h"
#include "formats/error.h"
#include "formats/file_io.h"
#include "tests/support/fake_hub_server.h"
#include "tests/support/error_of.h"

namespace ssdq {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::FakeHubServer;
using testing::FakeRepo;

constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";
constexpr const char* kTinyDir = "tests/fixtures/hub/mamba2-tiny-random";
constexpr const char* kShardedDir = "tests/fixtures/hub/mamba2-tiny-random-sharded";

using testing_support::error_of;

FakeRepo repo_from_folder(const std::string& folder, const std::vector<std::string>& names) {
  FakeRepo repo;
  repo.commit = kCommit;
  for (const std::string& name : names) repo.files[name] = read_file(folder + "/" + name);
  return repo;
}

FakeRepo tiny_repo() { return repo_from_folder(kTinyDir, {"config.json", "model.safetensors", "tokenizer_config.json"}); }

std::string sha256_of_file(const std::string& path) { return file_sha256_hex(path); }

class HubCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = std::string(std::getenv("TEST_TMPDIR")) + "/hub-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(cache_);
    settings_.cache_dir = cache_;
    settings_.endpoint = server_.endpoint();
    settings_.show_progress = false;
    settings_.connect_timeout_seconds = 5;
    settings_.stall_timeout_seconds = 5;
  }

  std::string resolve(const std::string& spec) {
    const auto parsed = parse_hub_model_spec(spec);
    EXPECT_TRUE(parsed) << spec;
    return resolve_hub_model(*parsed, settings_);
  }

  size_t count_requests(const std::string& method, int port) const {
    size_t count = 0;
    for (const auto& request : server_.requests()) count += request.method == method && request.port == port;
    return count;
  }

  std::vector<std::string> incomplete_files() const {
    std::vector<std::string> found;
    if (!fs::exists(cache_)) return found;
    for (const auto& entry : fs::recursive_directory_iterator(cache_))
      if (entry.path().extension() == ".incomplete") found.push_back(entry.path());
    return found;
  }

  FakeHubServer server_;
  HubSettings settings_;
  std::string cache_;
};

TEST_F(HubCacheTest, DownloadsIntoTheHuggingFaceLayout) {
  server_.add_repo("ssdq-test/tiny-random", tiny_repo());
  const std::string snapshot = resolve("ssdq-test/tiny-random");
  const std::string repo_dir = cache_ + "/models--ssdq-test--tiny-random";
  EXPECT_EQ(snapshot, repo_dir + "/snapshots/" + kCommit);
  EXPECT_EQ(read_file(repo_dir + "/refs/main"), kCommit);

  // Each file is a relative link to its blob, named by the ETag: SHA-256 for LFS, git SHA-1 otherwise.
  const std::string weights_sha = sha256_of_file(std::string(kTinyDir) + "/model.safetensors");
  EXPECT_EQ(fs::read_symlink(snapshot + "/model.safetensors"), "../../blobs/" + weights_sha);
  EXPECT_EQ(fs::read_symlink(snapshot + "/config.json"),
            "../../blobs/" + file_git_blob_sha1_hex(std::string(kTinyDir) + "/config.json"));
  EXPECT_EQ(fs::read_symlink(snapshot + "/tokenizer_config.json"),  // served with a weak ETag W/"..."
            "../../blobs/" + file_git_blob_sha1_hex(std::string(kTinyDir) + "/tokenizer_config.json"));
  EXPECT_EQ(read_file(snapshot + "/model.safetensors"), read_file(std::string(kTinyDir) + "/model.safetensors"));
  // The repository has no tokenizer.json: remembered the way huggingface_hub does.
  EXPECT_TRUE(fs::exists(repo_dir + "/.no_exist/" + kCommit + "/tokenizer.json"));
  EXPECT_FALSE(fs::exists(snapshot + "/tokenizer.json"));
  EXPECT_TRUE(incomplete_files().empty());

  const Checkpoint checkpoint = load_checkpoint(snapshot);
  EXPECT_EQ(checkpoint.config.d_model, 64);
  EXPECT_EQ(checkpoint.tensors.size(), 2u + 2u * 9u);

  // The weights came from the storage port, without the token and after one redirect.
  EXPECT_EQ(count_requests("GET", server_.storage_port()), 1u);

  // Again: HEADs only, nothing downloaded twice.
  server_.clear_requests();
  EXPECT_EQ(resolve("ssdq-test/tiny-random"), snapshot);
  EXPECT_EQ(count_requests("GET", server_.storage_port()) + count_requests("GET", server_.hub_port()), 0u);
  EXPECT_GT(count_requests("HEAD", server_.hub_port()), 0u);

  // Offline: from the cache alone, no request at all; by commit as well as by branch.
  server_.clear_requests();
  settings_.offline = true;
  EXPECT_EQ(resolve("ssdq-test/tiny-random"), snapshot);
  EXPECT_EQ(resolve(std::string("ssdq-test/tiny-random@") + kCommit), snapshot);
  EXPECT_TRUE(server_.requests().empty());
}

TEST_F(HubCacheTest, DownloadsShardedSafetensors) {
  server_.add_repo("ssdq-test/sharded",
                   repo_from_folder(kShardedDir, {"config.json", "model.safetensors.index.json",
                                                  "model-00001-of-00002.safetensors",
                                                  "model-00002-of-00002.safetensors"}));
  const std::string snapshot = resolve("ssdq-test/sharded");
  EXPECT_TRUE(fs::is_symlink(snapshot + "/model-00001-of-00002.safetensors"));
  EXPECT_TRUE(fs::is_symlink(snapshot + "/model-00002-of-00002.safetensors"));
  const Checkpoint checkpoint = load_checkpoint(snapshot);
  EXPECT_EQ(checkpoint.weights_path, snapshot + "/model.safetensors.index.json");
  EXPECT_EQ(checkpoint.tensors.size(), 2u + 2u * 9u);
}

TEST_F(HubCacheTest, DownloadsPytorchModelBinWithTokenizer) {
  server_.add_repo("ssdq-test/mamba2-tiny",
                   repo_from_folder("examples/mamba2-tiny", {"config.json", "pytorch_model.bin", "tokenizer.json"}));
  const std::string snapshot = resolve("ssdq-test/mamba2-tiny@main");
  EXPECT_EQ(read_file(snapshot + "/tokenizer.json"), read_file("examples/mamba2-tiny/tokenizer.json"));
  EXPECT_EQ(load_checkpoint(snapshot).weights_path, snapshot + "/pytorch_model.bin");
}

// Mistral's layout (mistralai/Mamba-Codestral-7B-v0.1): no config.json; params.json,
// consolidated.safetensors and tokenizer.model.v3 are fetched, and the cache lookup counts the
// snapshot complete.
TEST_F(HubCacheTest, DownloadsMistralsLayout) {
  FakeRepo repo;
  repo.commit = kCommit;
  repo.files["params.json"] = R"({"dim": 64, "n_layers": 2, "vocab_size": 64, "n_groups": 1, "model_type": "mamba"})";
  repo.files["consolidated.safetensors"] = read_file(std::string(kTinyDir) + "/model.safetensors");
  repo.files["tokenizer.model.v3"] = read_file("tests/fixtures/sentencepiece/tiny_bpe.model");
  server_.add_repo("ssdq-test/mistral-layout", repo);
  const std::string snapshot = resolve("ssdq-test/mistral-layout");
  for (const char* file : {"params.json", "consolidated.safetensors", "tokenizer.model.v3"})
    EXPECT_TRUE(fs::is_symlink(snapshot + "/" + file)) << file;
  EXPECT_EQ(resolve("ssdq-test/mistral-layout"), snapshot);  // the second time from the cache
}

TEST_F(HubCacheTest, FollowsARenamedRepositoryRedirect) {
  server_.add_repo("ssdq-test/tiny-random", tiny_repo());
  server_.add_rename("old-name/tiny", "ssdq-test/tiny-random");
  const std::string snapshot = resolve("old-name/tiny");
  EXPECT_EQ(snapshot, cache_ + "/models--old-name--tiny/snapshots/" + kCommit);
  EXPECT_TRUE(fs::exists(snapshot + "/model.safetensors"));
}

TEST_F(HubCacheTest, MissingFilesRevisionsAndRepositories) {
  FakeRepo no_config = tiny_repo();
  no_config.files.erase("config.json");
  server_.add_repo("ssdq-test/no-config", no_config);
  EXPECT_THAT(error_of([&] { resolve("ssdq-test/no-config"); }),
              HasSubstr("ssdq-test/no-config: the repository has no config.json (nor Mistral's params.json) at "
                        "revision main"));
  FakeRepo no_weights = tiny_repo();
  no_weights.files.erase("model.safetensors");
  server_.add_repo("ssdq-test/no-weights", no_weights);
  EXPECT_THAT(error_of([&] { resolve("ssdq-test/no-weights"); }),
              HasSubstr("ssdq-test/no-weights: the repository has no weights at revision main (none of "
                        "model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
                        "consolidated.safetensors)"));
  server_.add_repo("ssdq-test/tiny-random", tiny_repo());
  EXPECT_THAT(error_of([&] { resolve("ssdq-test/tiny-random@v9"); }),
              HasSubstr("ssdq-test/tiny-random@v9: the repository has no revision 'v9'"));
  EXPECT_THAT(error_of([&] { resolve("nobody/nothing"); }),
              HasSubstr("nobody/nothing: " + server_.endpoint() +
                        "/nobody/nothing/resolve/main/config.json answered 401 Unauthorized: the repository does not "
                        "exist or needs a token; no token was sent: set HF_TOKEN"));
}

TEST_F(HubCacheTest, PrivateRepositoryNeedsTheToken) {
  FakeRepo repo = tiny_repo();
  repo.required_token = "hf_secret";
  server_.add_repo("ssdq-test/private", repo);
  EXPECT_THAT(error_of([&] { resolve("ssdq-test/private"); }),
              HasSubstr("answered 401 Unauthorized: the repository does not exist or needs a token; no token was sent"));
  settings_.token = "hf_wrong";
  EXPECT_THAT(error_of([&] { resolve("ssdq-test/private"); }), HasSubstr("the token that was sent was not accepted"));
  EXPECT_FALSE(fs::exists(cache_ + "/models--ssdq-test--private/snapshots"));

  settings_.token = "hf_secret";
  server_.clear_requests();
  const std::string snapshot = resolve("ssdq-test/private");
  EXPECT_TRUE(fs::exists(snapshot + "/model.safetensors"));
  for (const auto& request : server_.requests()) {
    const std::string expected = request.port == server_.hub_port() ? "Bearer hf_secret" : "";  // none to storage
    EXPECT_EQ(request.authorization, expected) << request.port << " " << request.path;
  }
}

TEST_F(HubCacheTest, ResumesATruncatedTransfer) {
  server_.add_repo("ssdq-test/tiny-random", tiny_repo());
  server_.truncate_next_storage_gets(1);
  const std::string snapshot = resolve("ssdq-test/tiny-random");
  EXPECT_EQ(read_file(snapshot + "/model.safetensors"), read_file(std::string(kTinyDir) + "/model.safetensors"));
  const size_t size = fs::file_size(std::string(kTinyDir) + "/model.safetensors");
  std::vector<std::string> storage_ranges;
  for (const auto& request : server_.requests())
    if (request.port == server_.storage_port()) storage_ranges.push_back(request.range);
  EXPECT_EQ(storage_ranges, (std::vector<std::string>{"", "bytes=" + std::to_string(size / 2) + "-"}));
  EXPECT_TRUE(incomplete_files().empty());
}

TEST_F(HubCacheTest, KeepsThePartialFileWhenEveryAttemptIsCutShort) {
  server_.add_repo("ssdq-test/tiny-random", tiny_repo());
  settings_.attempts = 2;
  server_.truncate_next_storage_gets(2);
  const size_t size = fs::file_size(std::string(kTinyDir) + "/model.safetensors");
  const size_t first_cut = size / 2, second_cut = first_cut + (size - first_cut) / 2;
  const std::string error = error_of([&] { resolve("ssdq-test/tiny-random"); });
  EXPECT_THAT(error, HasSubstr(fmt::format("ssdq-test/tiny-random: the download of model.safetensors stopped at {} of {} "
                                           "bytes (",
                                           second_cut, size)));
  EXPECT_THAT(error, HasSubstr(".incomplete is kept and the next run resumes it"));
  ASSERT_EQ(incomplete_files().size(), 1u);
  EXPECT_EQ(fs::file_size(incomplete_files()[0]), second_cut);
  const std::string snapshot = cache_ + "/models--ssdq-test--tiny-random/snapshots/" + kCommit;
  EXPECT_FALSE(fs::exists(snapshot + "/model.safetensors"));

  // Offline, the cache says what is missing.
  settings_.offline = true;
  EXPECT_THAT(error_of([&] { resolve("ssdq-test/tiny-random"); }),
              HasSubstr("the snapshot " + snapshot + " has no weights (model.safetensors, "));

  // The next run picks up where the last one stopped.
  settings_.offline = false;
  server_.clear_requests();
  resolve("ssdq-test/tiny-random");
  std::vector<std::string> storage_ranges;
  for (const auto& request : server_.requests())
    if (request.port == server_.storage_port()) storage_ranges.push_back(request.range);
  EXPECT_EQ(storage_ranges, (std::vector<std::string>{"bytes=" + std::to_string(second_cut) + "-"}));
  EXPECT_EQ(read_file(snapshot + "/model.safetensors"), read_file(std::string(kTinyDir) + "/model.safetensors"));
}

TEST_F(HubCacheTest, RefusesBytesThatDoNotMatchTheEtag) {
  server_.add_repo("ssdq-test/tiny-random", tiny_repo());
  server_.corrupt_storage(true);
  const std::string weights_sha = sha256_of_file(std::string(kTinyDir) + "/model.safetensors");
  EXPECT_THAT(error_of([&] { resolve("ssdq-test/tiny-random"); }),
              HasSubstr("ssdq-test/tiny-random: the downloaded model.safetensors has SHA-256 "));
  EXPECT_THAT(error_of([&] { resolve("ssdq-test/tiny-random"); }),
              HasSubstr("but the hub's ETag says " + weights_sha + "; the download was deleted, run again to retry"));
  EXPECT_TRUE(incomplete_files().empty());
  EXPECT_FALSE(fs::exists(cache_ + "/models--ssdq-test--tiny-random/blobs/" + weights_sha));
}

TEST_F(HubCacheTest, OfflineWithAnEmptyCacheSaysWhatIsMissing) {
  settings_.offline = true;
  EXPECT_THAT(error_of([&] { resolve("state-spaces/mamba2-130m"); }),
              HasSubstr("state-spaces/mamba2-130m: not in the Hugging Face cache at " + cache_ + ": " + cache_ +
                        "/models--state-spaces--mamba2-130m does not exist; HF_HUB_OFFLINE=1 forbids downloading it"));
  fs::create_directories(cache_ + "/models--state-spaces--mamba2-130m/refs");
  EXPECT_THAT(error_of([&] { resolve("state-spaces/mamba2-130m@v1"); }),
              HasSubstr("models--state-spaces--mamba2-130m/refs/v1 does not exist (the revision was never downloaded)"));
  EXPECT_TRUE(server_.requests().empty());
}

int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);  // nothing listens there now
  return ntohs(address.sin_port);
}

TEST_F(HubCacheTest, FallsBackToTheCacheWhenTheHubIsUnreachable) {
  server_.add_repo("ssdq-test/tiny-random", tiny_repo());
  const std::string snapshot = resolve("ssdq-test/tiny-random");
  settings_.endpoint = fmt::format("http://127.0.0.1:{}", unused_port());
  EXPECT_EQ(resolve("ssdq-test/tiny-random"), snapshot);
  EXPECT_THAT(error_of([&] { resolve("ssdq-test/other"); }),
              HasSubstr("ssdq-test/other: cannot reach the hub (" + settings_.endpoint +
                        "/ssdq-test/other/resolve/main/config.json: "));
}

TEST(HubModelSpec, ParsesNamesAndRevisions) {
  const auto plain = parse_hub_model_spec("state-spaces/mamba2-130m");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->repo_id, "state-spaces/mamba2-130m");
  EXPECT_EQ(plain->revision, "main");
  const auto pinned = parse_hub_model_spec("org/name.v2@refs/pr/1");
  ASSERT_TRUE(pinned);
  EXPECT_EQ(pinned->revision, "refs/pr/1");
  for (const char* bad : {"", "name", "/name", "org/", "a/b/c", "org/na me", "org/..", "org/a--b", "-org/name",
                          "org/name@", "org/name@../x", "org/name@a//b", "../../etc/passwd", "org/name@/x"})
    EXPECT_FALSE(parse_hub_model_spec(bad)) << bad;
}

class EnvironmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kNames) {
      if (const char* value = std::getenv(name)) saved_[name] = value;
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  static constexpr const char* kNames[] = {"HOME", "HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME", "HF_ENDPOINT",
                                           "HF_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS"};
  std::map<std::string, std::string> saved_;
};

TEST_F(EnvironmentTest, SettingsFollowHuggingFaceHub) {
  ::setenv("HOME", "/home/u", 1);
  HubSettings settings = HubSettings::from_environment();
  EXPECT_EQ(settings.cache_dir, "/home/u/.cache/huggingface/hub");
  EXPECT_EQ(settings.endpoint, "https://huggingface.co");
  EXPECT_FALSE(settings.offline);
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(HubSettings::from_environment().cache_dir, "/xdg/huggingface/hub");
  const std::string hf_home = std::string(std::getenv("TEST_TMPDIR")) + "/hf-home";
  fs::create_directories(hf_home);
  ::setenv("HF_HOME", hf_home.c_str(), 1);
  EXPECT_EQ(HubSettings::from_environment().cache_dir, hf_home + "/hub");
  ::setenv("HF_HUB_CACHE", "/cache", 1);
  ::setenv("HF_ENDPOINT", "http://mirror.example", 1);
  ::setenv("HF_HUB_OFFLINE", "1", 1);
  settings = HubSettings::from_environment();
  EXPECT_EQ(settings.cache_dir, "/cache");
  EXPECT_EQ(settings.endpoint, "http://mirror.example");
  EXPECT_TRUE(settings.offline);
  ::setenv("HF_HUB_OFFLINE", "0", 1);
  EXPECT_FALSE(HubSettings::from_environment().offline);

  // The token: HF_TOKEN, else the file huggingface-cli login writes.
  EXPECT_EQ(HubSettings::from_environment().token, "");
  write_file_atomic(hf_home + "/token", [&](int fd) { write_all(fd, "hf_from_file\n", 13, "token"); });
  EXPECT_EQ(HubSettings::from_environment().token, "hf_from_file");
  ::setenv("HF_TOKEN", "hf_from_env", 1);
  EXPECT_EQ(HubSettings::from_environment().token, "hf_from_env");
}

TEST_F(EnvironmentTest, ResolveModelDirTakesFoldersAndHubNames) {
  EXPECT_EQ(resolve_model_dir(kTinyDir), kTinyDir);
  EXPECT_THAT(error_of([] { resolve_model_dir(std::string(kTinyDir) + "/config.json"); }),
              HasSubstr("config.json: is a file; give the model's folder"));
  EXPECT_THAT(error_of([] { resolve_model_dir("no/such/folder"); }),
              HasSubstr("--model no/such/folder: no such folder, and not a Hugging Face model name (org/name or "
                        "org/name@revision)"));
  const std::string cache = std::string(std::getenv("TEST_TMPDIR")) + "/env-cache";
  ::setenv("HF_HUB_CACHE", cache.c_str(), 1);
  ::setenv("HF_HUB_OFFLINE", "1", 1);
  EXPECT_THAT(error_of([] { resolve_model_dir("state-spaces/mamba2-130m"); }),
              HasSubstr("state-spaces/mamba2-130m: not in the Hugging Face cache at " + cache));
}

}  // namespace
}  // namespace ssdq
