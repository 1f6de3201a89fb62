#include "formats/hub_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>

#include "formats/digest.h"
#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/http_client.h"
#include "runtime/progress.h"

namespace ssdq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kSafetensorsFile = "model.safetensors";
constexpr const char* kSafetensorsIndexFile = "model.safetensors.index.json";
constexpr const char* kTorchBinFile = "pytorch_model.bin";
// Mistral's layout (Mamba-Codestral-7B-v0.1): params.json and consolidated.safetensors.
constexpr const char* kMistralParamsFile = "params.json";
constexpr const char* kConsolidatedFile = "consolidated.safetensors";
constexpr const char* kWeightsInWords =
    "model.safetensors, model.safetensors.index.json, pytorch_model.bin or consolidated.safetensors";
constexpr size_t kMaxIndexBytes = size_t{64} << 20;
constexpr int kMaxJsonDepth = 64;
constexpr int kMaxRepoRedirects = 5;

// The endpoint could not be reached at all; the cache may still serve the model.
class Unreachable : public Error {
 public:
  using Error::Error;
};

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

bool environment_true(const char* name) {
  std::string value = environment(name);
  for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return value == "1" || value == "true" || value == "yes" || value == "on";
}

std::string trim(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r\n") + 1 - begin);
}

bool is_hub_name(const std::string& part) {
  if (part.empty() || part.size() > 96) return false;
  for (char c : part)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  return part.find("--") == std::string::npos && part.find("..") == std::string::npos && part.front() != '-' &&
         part.front() != '.' && part.back() != '-' && part.back() != '.';
}

bool is_revision(const std::string& revision) {
  if (revision.empty() || revision.size() > 256 || revision.front() == '/' || revision.back() == '/') return false;
  for (char c : revision)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' && c != '/') return false;
  return revision.find("..") == std::string::npos && revision.find("//") == std::string::npos;
}

bool is_commit_hash(const std::string& text) {
  if (text.size() != 40) return false;
  for (char c : text)
    if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) return false;
  return true;
}

bool is_hex_of_length(const std::string& text, size_t length) {
  if (text.size() != length) return false;
  for (char c : text)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// A file name inside a repository as ssdq fetches it: plain names, no folders.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find('\0') == std::string::npos && name.size() <= 255;
}

std::string percent_encode(const std::string& text, bool keep_slashes) {
  static const char kDigits[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slashes && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kDigits[c >> 4];
      out += kDigits[c & 15];
    }
  }
  return out;
}

// The hub quotes ETags and marks some weak ("W/"); the cache names blobs by the bare value.
std::string normalize_etag(std::string etag) {
  etag = trim(etag);
  if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return etag;
}

bool is_safe_blob_name(const std::string& etag) {
  if (etag.empty() || etag.size() > 128) return false;
  for (char c : etag)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  return etag.find("..") == std::string::npos && etag.front() != '.';
}

bool is_file(const fs::path& path) {
  std::error_code ignored;
  return fs::is_regular_file(path, ignored);  // follows symlinks: a link to a missing blob is no file
}

std::string repo_folder(const HubSettings& settings, const HubModelSpec& spec) {
  std::string name = spec.repo_id;
  name.replace(name.find('/'), 1, "--");
  return join_path(settings.cache_dir, "models--" + name);
}

// The commit `revision` names in the cache: itself when it is a commit hash, else refs/<revision>.
std::optional<std::string> cached_commit(const std::string& repo_dir, const std::string& revision) {
  if (is_commit_hash(revision)) return revision;
  const std::string ref = repo_dir + "/refs/" + revision;
  if (!is_file(ref)) return std::nullopt;
  const std::string commit = trim(read_file(ref));
  if (!is_commit_hash(commit)) fail("{}: holds '{}', not a 40-hex commit hash", ref, commit.substr(0, 80));
  return commit;
}

// The shard file names a model.safetensors.index.json lists, each once.
std::vector<std::string> index_shards(const std::string& index_path) {
  const auto file = MappedFile::open(index_path);
  if (file->size() > kMaxIndexBytes)
    fail("{}: {} bytes is larger than the limit of {} bytes for a safetensors index", index_path, file->size(),
         kMaxIndexBytes);
  const json::parser_callback_t limit_depth = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) fail("{}: JSON nested more than {} levels deep", index_path, kMaxJsonDepth);
    return true;
  };
  const json index = json::parse(file->view().begin(), file->view().end(), limit_depth, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) fail("{}: not a JSON object", index_path);
  const auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object())
    fail("{}: missing object \"weight_map\" (tensor name -> shard file)", index_path);
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>()))
      fail("{}: weight_map \"{}\": expected a shard file name in the index's folder", index_path, tensor.substr(0, 200));
    shards.insert(shard.get<std::string>());
  }
  if (shards.empty()) fail("{}: weight_map names no shard files", index_path);
  return {shards.begin(), shards.end()};
}

// What a snapshot folder lacks of config.json and complete weights, in words; empty when nothing.
std::string missing_in_snapshot(const std::string& snapshot) {
  std::vector<std::string> missing;
  if (!is_file(join_path(snapshot, kConfigFile)) && !is_file(join_path(snapshot, kMistralParamsFile)))
    missing.push_back(kConfigFile);
  if (is_file(join_path(snapshot, kSafetensorsFile)) || is_file(join_path(snapshot, kTorchBinFile)) ||
      is_file(join_path(snapshot, kConsolidatedFile))) {
    // complete weights
  } else if (is_file(join_path(snapshot, kSafetensorsIndexFile))) {
    for (const std::string& shard : index_shards(join_path(snapshot, kSafetensorsIndexFile)))
      if (!is_file(join_path(snapshot, shard))) missing.push_back(shard + " (a shard the index names)");
  } else {
    missing.push_back(std::string("weights (") + kWeightsInWords + ")");
  }
  std::string text;
  for (const std::string& item : missing) text += (text.empty() ? "" : ", ") + item;
  return text;
}

// The complete cached snapshot of the revision, or a description of what is missing.
struct CacheLookup {
  std::string snapshot;  // set when complete
  std::string missing;   // set otherwise
};

CacheLookup look_up_cache(const HubModelSpec& spec, const HubSettings& settings) {
  const std::string repo_dir = repo_folder(settings, spec);
  const std::optional<std::string> commit = cached_commit(repo_dir, spec.revision);
  if (!commit) {
    if (!fs::is_directory(repo_dir)) return {"", fmt::format("{} does not exist", repo_dir)};
    return {"", fmt::format("{}/refs/{} does not exist (the revision was never downloaded)", repo_dir, spec.revision)};
  }
  const std::string snapshot = repo_dir + "/snapshots/" + *commit;
  if (!fs::is_directory(snapshot))
    return {"", fmt::format("the snapshot folder {} of commit {} does not exist", snapshot, *commit)};
  std::string missing = missing_in_snapshot(snapshot);
  if (!missing.empty()) return {"", fmt::format("the snapshot {} has no {}", snapshot, missing)};
  return {snapshot, ""};
}

// Holds an exclusive lock on a file for as long as it lives (two ssdq runs fetching one blob).
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0) fail("{}: cannot create the lock file: {}", path, std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) fail("{}: cannot lock: {}", path, std::strerror(errno));
    }
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

void create_folders(const std::string& path) {
  std::error_code error;
  fs::create_directories(path, error);
  if (error) fail("{}: cannot create the folder: {}", path, error.message());
}

int64_t file_size_or_zero(const std::string& path) {
  std::error_code error;
  const auto size = fs::file_size(path, error);
  return error ? 0 : static_cast<int64_t>(size);
}

class Downloader {
 public:
  Downloader(const HubModelSpec& spec, const HubSettings& settings)
      : spec_(spec),
        settings_(settings),
        repo_dir_(repo_folder(settings, spec)),
        endpoint_(settings.endpoint.substr(0, settings.endpoint.find_last_not_of('/') + 1)),
        url_revision_(spec.revision),
        client_({settings.connect_timeout_seconds, settings.stall_timeout_seconds, "ssdq/0.1; hf_hub-compatible"}) {}

  std::string run() {
    if (!fetch(kConfigFile, false) && !fetch(kMistralParamsFile, false))
      fail("{}: the repository has no config.json (nor Mistral's params.json) at revision {}; a Megatron-LM "
           "checkpoint is read from a local folder (download it, e.g. with huggingface-cli download)",
           spec_.text(), spec_.revision);
    for (const std::string& file : kHubTokenizerFiles) fetch(file, false);
    if (!fetch(kSafetensorsFile, false)) {
      if (fetch(kSafetensorsIndexFile, false)) {
        for (const std::string& shard : index_shards(snapshot_dir() + "/" + kSafetensorsIndexFile)) fetch(shard, true);
      } else if (!fetch(kTorchBinFile, false) && !fetch(kConsolidatedFile, false)) {
        fail("{}: the repository has no weights at revision {} (none of {})", spec_.text(), spec_.revision,
             kWeightsInWords);
      }
    }
    return snapshot_dir();
  }

 private:
  std::string snapshot_dir() const { return repo_dir_ + "/snapshots/" + commit_; }

  std::vector<std::string> request_headers(const std::string& url) const {
    std::vector<std::string> headers = {"Accept-Encoding: identity"};
    // The token goes to the hub only, never to the storage a file redirects to.
    if (!settings_.token.empty() && url_origin(url) == url_origin(endpoint_))
      headers.push_back("Authorization: Bearer " + settings_.token);
    return headers;
  }

  [[noreturn]] void fail_status(const HttpResponse& response, const std::string& url, const std::string& file) const {
    const std::string code = response.header("x-error-code");
    const std::string message = response.header("x-error-message");
    const std::string detail = message.empty() ? "" : fmt::format(" (the hub says: {})", message.substr(0, 300));
    const std::string token_hint =
        settings_.token.empty()
            ? "no token was sent: set HF_TOKEN (or run huggingface-cli login) if the model is private or gated"
            : "the token that was sent was not accepted";
    switch (response.status) {
      case 401:
        fail("{}: {} answered 401 Unauthorized: the repository does not exist or needs a token; {}{}", spec_.text(),
             url, token_hint, detail);
      case 403:
        fail("{}: {} answered 403 Forbidden: the token has no access to this repository (for a gated model, "
             "request access on its page){}",
             spec_.text(), url, detail);
      case 404:
        if (code == "RepoNotFound") fail("{}: no such repository on {}{}", spec_.text(), endpoint_, detail);
        if (code == "RevisionNotFound")
          fail("{}: the repository has no revision '{}'{}", spec_.text(), spec_.revision, detail);
        fail("{}: the repository has no {} at revision {} ({} answered 404){}", spec_.text(), file, spec_.revision, url,
             detail);
      default:
        fail("{}: {} answered HTTP {} for {}{}{}", spec_.text(), url, response.status, file, detail,
             response.body.empty() ? "" : ": " + trim(response.body).substr(0, 200));
    }
  }

  // HEADs the file, downloads it into blobs/ unless the cache has it, links it into the snapshot.
  // Returns false when the repository has no such file (and `required` is false).
  bool fetch(const std::string& file, bool required) {
    std::string url = endpoint_ + "/" + spec_.repo_id + "/resolve/" + percent_encode(url_revision_, false) + "/" +
                      percent_encode(file, true);
    HttpResponse head;
    for (int hop = 0;; ++hop) {
      head = client_.head(url, request_headers(url));
      if (!head.transport_error.empty()) {
        const std::string message = fmt::format("{}: {}", url, head.transport_error);
        if (head.unreachable) throw Unreachable(message);
        fail("{}: asking the hub for {} failed: {}", spec_.text(), file, message);
      }
      // Like huggingface_hub, follow redirects within the hub (a renamed repository, the hub's own
      // caches: relative Locations); a redirect to another host (LFS storage) carries the file's
      // metadata and is where the bytes come from.
      const std::string location = head.header("location");
      const bool relative_redirect = head.status >= 300 && head.status < 400 && !location.empty() &&
                                     location.find("://") == std::string::npos && location.rfind("//", 0) != 0;
      if (!relative_redirect) break;
      if (hop == kMaxRepoRedirects) fail("{}: more than {} redirects for {}", spec_.text(), kMaxRepoRedirects, url);
      url = resolve_location(url, head.header("location"));
    }
    if (head.status == 404 && !required && head.header("x-error-code") != "RepoNotFound" &&
        head.header("x-error-code") != "RevisionNotFound") {
      remember_absent(file, head.header("x-repo-commit"));
      return false;
    }
    if (head.status != 200 && !(head.status >= 300 && head.status < 400)) fail_status(head, url, file);

    const std::string commit = head.header("x-repo-commit");
    if (!is_commit_hash(commit))
      fail("{}: {} answered without a valid X-Repo-Commit header ('{}'); is {} a Hugging Face hub endpoint?",
           spec_.text(), url, commit.substr(0, 80), endpoint_);
    if (commit_.empty()) {
      commit_ = commit;
      url_revision_ = commit;  // later files come from the same commit even if the branch moves
      if (spec_.revision != commit_) {
        const std::string ref = repo_dir_ + "/refs/" + spec_.revision;
        create_folders(fs::path(ref).parent_path());
        write_file_atomic(ref, [&](int fd) { write_all(fd, commit_.data(), commit_.size(), ref); });
      }
    } else if (commit != commit_) {
      fail("{}: {} comes from commit {}, but the files before it from {}", spec_.text(), file, commit, commit_);
    }
    const std::string etag = normalize_etag(!head.header("x-linked-etag").empty() ? head.header("x-linked-etag")
                                                                                   : head.header("etag"));
    if (!is_safe_blob_name(etag))
      fail("{}: {} answered without a usable ETag ('{}'), which names the file in the cache", spec_.text(), url,
           etag.substr(0, 80));
    const std::string size_text =
        !head.header("x-linked-size").empty() ? head.header("x-linked-size") : head.header("content-length");
    int64_t size = -1;
    if (!size_text.empty()) {
      if (size_text.size() > 18 || size_text.find_first_not_of("0123456789") != std::string::npos)
        fail("{}: {} announced the size '{}' for {}, not a byte count", spec_.text(), url, size_text.substr(0, 40),
             file);
      size = std::stoll(size_text);
    }
    const std::string blob = repo_dir_ + "/blobs/" + etag;
    if (!is_file(blob) || (size >= 0 && file_size_or_zero(blob) != size)) {
      const bool redirected = head.status >= 300 && !head.header("location").empty();
      download(redirected ? resolve_location(url, head.header("location")) : url, file, blob, etag, size);
    }
    link_into_snapshot(file, etag);
    return true;
  }

  void download(const std::string& url, const std::string& file, const std::string& blob, const std::string& etag,
                int64_t size) {
    create_folders(repo_dir_ + "/blobs");
    FileLock lock(blob + ".lock");
    if (is_file(blob) && (size < 0 || file_size_or_zero(blob) == size)) return;  // another run just finished it
    const std::string partial = blob + ".incomplete";
    ProgressBar progress("download " + file, size, "B", settings_.show_progress && size > 0);
    bool complete = false;
    std::string last_error;
    for (int attempt = 1; attempt <= std::max(1, settings_.attempts) && !complete; ++attempt) {
      int64_t have = file_size_or_zero(partial);
      if (size >= 0 && have > size) {
        std::error_code ignored;
        fs::remove(partial, ignored);  // longer than the file: not a prefix of it
        have = 0;
      }
      if (size >= 0 && have == size) {
        complete = true;  // an earlier run got every byte but stopped before the move
        break;
      }
      const HttpResponse response = client_.get_to_file(url, request_headers(url), partial, have,
                                                        [&](int64_t bytes) { progress.update(bytes); });
      if (response.status == 416) {  // the range no longer fits the file: start over
        std::error_code ignored;
        fs::remove(partial, ignored);
        last_error = "the server refused the resume range (HTTP 416)";
        continue;
      }
      if (response.status >= 500) {  // the hub or its storage is briefly unwell: try again
        last_error = fmt::format("HTTP {}", response.status);
        continue;
      }
      if (response.status != 0 && response.status != 200 && response.status != 206)
        fail_status(response, url, file);
      if (response.transport_error.empty() && response.status != 0) {
        complete = true;
      } else {
        last_error = response.transport_error.empty() ? "no answer" : response.transport_error;
        if (settings_.show_progress)
          std::fprintf(stderr, "ssdq: %s: transfer interrupted at %lld bytes (%s); resuming\n", file.c_str(),
                       static_cast<long long>(file_size_or_zero(partial)), last_error.c_str());
      }
    }
    const int64_t have = file_size_or_zero(partial);
    if (!complete || (size >= 0 && have != size)) {
      fail("{}: the download of {} stopped at {} of {} bytes ({}); the partial file {} is kept and the next run "
           "resumes it",
           spec_.text(), file, have, size >= 0 ? std::to_string(size) : "?",
           last_error.empty() ? "the server sent a different length" : last_error, partial);
    }
    progress.finish();
    verify(partial, file, etag);
    std::error_code error;
    fs::rename(partial, blob, error);
    if (error) fail("{}: cannot move the download into place: {}", blob, error.message());
  }

  // LFS files are named by their SHA-256, others by their git blob SHA-1: check the bytes match.
  void verify(const std::string& partial, const std::string& file, const std::string& etag) const {
    std::string actual, kind;
    if (is_hex_of_length(etag, 64)) {
      actual = file_sha256_hex(partial), kind = "SHA-256";
    } else if (is_hex_of_length(etag, 40)) {
      actual = file_git_blob_sha1_hex(partial), kind = "git blob SHA-1";
    } else {
      return;  // an ETag of another form: only the size was checked
    }
    if (actual == etag) return;
    std::error_code ignored;
    fs::remove(partial, ignored);
    fail("{}: the downloaded {} has {} {}, but the hub's ETag says {}; the download was deleted, run again to retry",
         spec_.text(), file, kind, actual, etag);
  }

  void link_into_snapshot(const std::string& file, const std::string& etag) {
    const std::string link = snapshot_dir() + "/" + file;
    create_folders(snapshot_dir());
    const std::string temp = link + ".tmp-" + std::to_string(::getpid());
    ::unlink(temp.c_str());
    if (::symlink(("../../blobs/" + etag).c_str(), temp.c_str()) != 0)
      fail("{}: cannot create the link: {}", temp, std::strerror(errno));
    if (::rename(temp.c_str(), link.c_str()) != 0) {
      const int err = errno;
      ::unlink(temp.c_str());
      fail("{}: cannot move the link into place: {}", link, std::strerror(err));
    }
  }

  // huggingface_hub's marker for "the repository has no such file at this commit".
  void remember_absent(const std::string& file, const std::string& commit) {
    if (!is_commit_hash(commit)) return;
    const std::string folder = repo_dir_ + "/.no_exist/" + commit;
    create_folders(folder);
    write_file_atomic(folder + "/" + file, [](int) {});
  }

  const HubModelSpec& spec_;
  const HubSettings& settings_;
  std::string repo_dir_;
  std::string endpoint_;
  std::string url_revision_;
  std::string commit_;
  HttpClient client_;
};

}  // namespace

std::optional<HubModelSpec> parse_hub_model_spec(const std::string& text) {
  HubModelSpec spec;
  std::string name = text;
  if (const size_t at = text.find('@'); at != std::string::npos) {
    name = text.substr(0, at);
    spec.revision = text.substr(at + 1);
    if (!is_revision(spec.revision)) return std::nullopt;
  }
  const size_t slash = name.find('/');
  if (slash == std::string::npos || !is_hub_name(name.substr(0, slash)) || !is_hub_name(name.substr(slash + 1)))
    return std::nullopt;
  spec.repo_id = name;
  return spec;
}

HubSettings HubSettings::from_environment() {
  HubSettings settings;
  const std::string home = environment("HOME");
  std::string hf_home = environment("HF_HOME");
  if (hf_home.empty()) {
    const std::string xdg = environment("XDG_CACHE_HOME");
    hf_home = join_path(xdg.empty() ? join_path(home, ".cache") : xdg, "huggingface");
  }
  settings.cache_dir = environment("HF_HUB_CACHE");
  if (settings.cache_dir.empty()) settings.cache_dir = join_path(hf_home, "hub");
  if (!environment("HF_ENDPOINT").empty()) settings.endpoint = environment("HF_ENDPOINT");
  settings.token = trim(environment("HF_TOKEN"));
  if (settings.token.empty()) {
    std::string token_path = environment("HF_TOKEN_PATH");
    if (token_path.empty()) token_path = join_path(hf_home, "token");
    if (is_file(token_path)) settings.token = trim(read_file(token_path));
  }
  settings.offline = environment_true("HF_HUB_OFFLINE");
  settings.show_progress = !environment_true("HF_HUB_DISABLE_PROGRESS_BARS");
  return settings;
}

std::string resolve_hub_model(const HubModelSpec& spec, const HubSettings& settings) {
  if (settings.cache_dir.empty()) fail("{}: no Hugging Face cache folder (set HF_HUB_CACHE or HOME)", spec.text());
  if (settings.offline) {
    const CacheLookup cached = look_up_cache(spec, settings);
    if (cached.snapshot.empty())
      fail("{}: not in the Hugging Face cache at {}: {}; HF_HUB_OFFLINE=1 forbids downloading it (unset HF_HUB_OFFLINE "
           "to download config.json and the weights, or set HF_HUB_CACHE to a cache that has them)",
           spec.text(), settings.cache_dir, cached.missing);
    return cached.snapshot;
  }
  try {
    return Downloader(spec, settings).run();
  } catch (const Unreachable& e) {
    const CacheLookup cached = look_up_cache(spec, settings);
    if (cached.snapshot.empty())
      fail("{}: cannot reach the hub ({}), and the cache at {} has no complete copy: {}", spec.text(), e.what(),
           settings.cache_dir, cached.missing);
    std::fprintf(stderr, "ssdq: cannot reach the hub (%s); using the cached snapshot %s\n", e.what(),
                 cached.snapshot.c_str());
    return cached.snapshot;
  }
}

std::string resolve_model_dir(const std::string& model, const std::string& flag) {
  std::error_code ignored;
  if (fs::is_directory(model, ignored)) return model;
  if (fs::exists(model, ignored)) fail("{} {}: is a file; give the model's folder (or org/name from the hub)", flag, model);
  const std::optional<HubModelSpec> spec = parse_hub_model_spec(model);
  if (!spec)
    fail("{} {}: no such folder, and not a Hugging Face model name (org/name or org/name@revision)", flag, model);
  return resolve_hub_model(*spec, HubSettings::from_environment());
}

}  // namespace ssdq
