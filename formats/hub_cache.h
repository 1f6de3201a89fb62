// Models named on the Hugging Face hub ("org/name" or "org/name@revision"), found in and
// downloaded into the cache layout of huggingface_hub, so ssdq and the Python tools share one
// cache:
//   <cache>/models--org--name/refs/<revision>            the commit a branch or tag points to
//   <cache>/models--org--name/snapshots/<commit>/<file>  symlink to ../../blobs/<etag>
//   <cache>/models--org--name/blobs/<etag>               the bytes (etag: the SHA-256 of an LFS
//                                                        file, the git blob SHA-1 of any other)
//   <cache>/models--org--name/.no_exist/<commit>/<file>  empty marker: the repo has no such file
//
// Downloads go through libcurl, loaded with dlopen when the first download starts, so ssdq runs
// (and reads the cache) on machines without libcurl.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ssdq {

struct HubModelSpec {
  std::string repo_id;            // "org/name"
  std::string revision = "main";  // a branch, a tag or a 40-hex commit
  std::string text() const { return revision == "main" ? repo_id : repo_id + "@" + revision; }
};

// "org/name" or "org/name@revision" with the hub's name rules (letters, digits, '-', '_', '.';
// no "--" or ".." and no leading or trailing '-' or '.'); revisions may also hold '/'
// ("refs/pr/1"). nullopt for anything else.
std::optional<HubModelSpec> parse_hub_model_spec(const std::string& text);

struct HubSettings {
  std::string cache_dir;                        // the hub cache folder (holds models--org--name)
  std::string endpoint = "https://huggingface.co";
  std::string token;                            // sent as "Authorization: Bearer" to the endpoint only
  bool offline = false;                         // never touch the network
  bool show_progress = true;                    // a progress bar per downloaded file on stderr
  long connect_timeout_seconds = 30;
  long stall_timeout_seconds = 60;              // a transfer without a byte for this long is retried
  int attempts = 3;                             // tries per file; each retry resumes the partial file

  // cache_dir: $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
  // ~/.cache/huggingface/hub; endpoint: $HF_ENDPOINT; token: $HF_TOKEN, else the file
  // $HF_TOKEN_PATH or $HF_HOME/token (huggingface-cli login); offline: HF_HUB_OFFLINE=1 (or
  // true/yes/on); show_progress: off when HF_HUB_DISABLE_PROGRESS_BARS=1.
  static HubSettings from_environment();
};

// The files ssdq fetches for a model: config.json, the tokenizer files the repo has, and the
// weights in the first layout the repo has: model.safetensors, else
// model.safetensors.index.json and its shards, else pytorch_model.bin.
inline const std::vector<std::string> kHubTokenizerFiles = {"tokenizer.model", "tokenizer.model.v3", "tokenizer.json",
                                                            "tokenizer_config.json",
                                                            "special_tokens_map.json"};

// Returns the snapshot folder of the model, holding config.json and complete weights.
// Offline: from the cache alone; fails naming what is missing (the ref, the snapshot folder, or
// files in it). Online: asks the endpoint for each file (HEAD of /<repo>/resolve/<revision>/<file>)
// and downloads what the cache lacks: resumable (HTTP Range on blobs/<etag>.incomplete), checked
// against the size and the ETag the hub sends (SHA-256 or git SHA-1), then moved into place with
// a rename and linked from the snapshot. When the endpoint cannot be reached and the cache has
// a complete snapshot of the revision, that snapshot is used (with a note on stderr).
std::string resolve_hub_model(const HubModelSpec& spec, const HubSettings& settings);

// --model (or `flag`, as errors name it): an existing folder is returned as it is; "org/name[@revision]" is resolved with
// HubSettings::from_environment(); anything else fails with a message saying what was expected.
std::string resolve_model_dir(const std::string& model, const std::string& flag = "--model");

}  // namespace ssdq
