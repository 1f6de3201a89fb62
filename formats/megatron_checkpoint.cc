#include "formats/megatron_checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "formats/error.h"
#include "formats/file_io.h"
#include "formats/torch_bin.h"

namespace ssdq {
namespace {

namespace fs = std::filesystem;
using ScalarKind = PickledScalar::Kind;

constexpr int kMaxShards = 64;

bool is_dir(const std::string& path) {
  std::error_code error;
  return fs::is_directory(path, error);
}

bool all_digits(const std::string& text, size_t from, size_t count) {
  if (text.size() < from + count) return false;
  for (size_t i = from; i < from + count; ++i)
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
  return true;
}

std::string trim(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
  return text.substr(start);
}

// The folder of the checkpointed iteration: what latest_checkpointed_iteration.txt names, else
// release/, else the folder itself when it holds the rank folders.
std::string iteration_dir(const std::string& dir) {
  const std::string tracker = join_path(dir, "latest_checkpointed_iteration.txt");
  if (file_exists(tracker)) {
    const std::string text = trim(read_file(tracker));
    std::string name;
    if (text == "release") {
      name = "release";
    } else if (!text.empty() && text.size() <= 12 &&
               std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      name = fmt::format("iter_{:07d}", std::stoll(text));
    } else {
      fail("{}: expected 'release' or an iteration number, found '{}'", tracker, text.substr(0, 80));
    }
    const std::string path = join_path(dir, name);
    if (!is_dir(path)) fail("{}: names iteration '{}', but {} is not a folder", tracker, text, path);
    return path;
  }
  if (is_dir(join_path(dir, "release"))) return join_path(dir, "release");
  return dir;
}

// The rank folders mp_rank_00 … mp_rank_{N-1}, each with its model file.
std::vector<std::string> shard_files(const std::string& dir) {
  std::map<int, std::string> ranks;
  bool distributed = false;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name == "metadata.json" || name == ".metadata" || entry.path().extension() == ".distcp") distributed = true;
    if (name.rfind("mp_rank_", 0) != 0) continue;
    // mp_rank_NN (tensor-parallel rank NN) or mp_rank_NN_PPP (and pipeline stage PPP).
    if (name.size() == 14 && all_digits(name, 8, 2) && name[10] == '_' && all_digits(name, 11, 3))
      fail("{}: {} is a pipeline-parallel shard; only tensor-parallel checkpoints (mp_rank_NN) are read — save the "
           "model with pipeline parallel size 1",
           dir, name);
    if (name.size() != 10 || !all_digits(name, 8, 2)) fail("{}: unexpected folder {}", dir, name);
    ranks[std::stoi(name.substr(8))] = join_path(dir, name);
  }
  if (error) fail("{}: cannot list the folder: {}", dir, error.message());
  if (ranks.empty()) {
    if (distributed)
      fail("{}: this is Megatron's distributed (torch_dist) checkpoint format; ssdq reads the torch format "
           "(mp_rank_NN/model_optim_rng.pt) — convert it with Megatron-LM's checkpoint converter",
           dir);
    fail("{}: no mp_rank_NN folders (not a Megatron-LM checkpoint iteration)", dir);
  }
  if (static_cast<int>(ranks.size()) > kMaxShards) fail("{}: more than {} tensor-parallel shards", dir, kMaxShards);
  std::vector<std::string> files;
  for (int rank = 0; rank < static_cast<int>(ranks.size()); ++rank) {
    auto found = ranks.find(rank);
    if (found == ranks.end())
      fail("{}: shard mp_rank_{:02d} is missing (found {} shards, numbered up to {:02d})", dir, rank, ranks.size(),
           ranks.rbegin()->first);
    std::string file;
    for (const char* name : {"model_optim_rng.pt", "model_rng.pt"})
      if (file.empty() && file_exists(join_path(found->second, name))) file = join_path(found->second, name);
    if (file.empty()) fail("{}: no model_optim_rng.pt in the shard folder", found->second);
    files.push_back(file);
  }
  return files;
}

class Args {
 public:
  Args(PickledScalars values, std::string label) : values_(std::move(values)), label_(std::move(label)) {}
  const PickledScalar* find(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() || it->second.kind == ScalarKind::kNone ? nullptr : &it->second;
  }
  int64_t required_int(const std::string& name, const char* what) const {
    const PickledScalar* value = find(name);
    if (!value) fail("{}: args.{} ({}) is absent; a Mamba-2 model needs it", label_, name, what);
    if (value->kind != ScalarKind::kInt) fail("{}: args.{} is not an integer", label_, name);
    return value->int_value;
  }
  int64_t optional_int(const std::string& name, int64_t fallback) const {
    const PickledScalar* value = find(name);
    if (!value) return fallback;
    if (value->kind != ScalarKind::kInt) fail("{}: args.{} is not an integer", label_, name);
    return value->int_value;
  }
  bool optional_bool(const std::string& name, bool fallback) const {
    const PickledScalar* value = find(name);
    if (!value) return fallback;
    if (value->kind != ScalarKind::kBool) fail("{}: args.{} is not true or false", label_, name);
    return value->int_value != 0;
  }
  double optional_number(const std::string& name, double fallback) const {
    const PickledScalar* value = find(name);
    if (!value) return fallback;
    if (value->kind == ScalarKind::kFloat) return value->float_value;
    if (value->kind == ScalarKind::kInt) return static_cast<double>(value->int_value);
    fail("{}: args.{} is not a number", label_, name);
  }
  std::string optional_str(const std::string& name) const {
    const PickledScalar* value = find(name);
    if (!value) return {};
    if (value->kind != ScalarKind::kStr) fail("{}: args.{} is not a string", label_, name);
    return value->text;
  }

 private:
  PickledScalars values_;
  std::string label_;
};

// Refuses hybrid models: Megatron's hybrid stacks name their layers in hybrid_override_pattern
// (M = Mamba, * = attention, - = MLP) or mix them by ratio.
void check_pure_mamba(const Args& args, const std::string& label) {
  const std::string pattern = args.optional_str("hybrid_override_pattern");
  const size_t other = pattern.find_first_not_of('M');
  if (other != std::string::npos)
    fail("{}: args.hybrid_override_pattern '{}' has a non-Mamba layer ('{}' at layer {}); hybrid checkpoints with "
         "attention or MLP layers are not supported, only pure Mamba-2",
         label, pattern.substr(0, 80), pattern[other], other);
  for (const char* ratio : {"hybrid_attention_ratio", "hybrid_mlp_ratio"})
    if (args.optional_number(ratio, 0.0) > 0.0)
      fail("{}: args.{} = {} makes a hybrid model with attention or MLP layers; only pure Mamba-2 is supported", label,
           ratio, args.optional_number(ratio, 0.0));
}

std::string strip_model_prefix(const std::string& name) {
  return name.rfind("model.", 0) == 0 ? name.substr(6) : std::string();
}

// Megatron's name → (canonical name, how shards are merged).
enum class Merge { kReplicated, kRows, kColumns, kInProjSegments, kConvSegments };
struct Mapped {
  std::string name;
  Merge merge;
};

bool map_name(const std::string& megatron, Mapped& out, const std::string& label) {
  if (megatron == "embedding.word_embeddings.weight") return out = {tensor_names::kEmbedding, Merge::kRows}, true;
  if (megatron == "decoder.final_norm.weight") return out = {tensor_names::kNormF, Merge::kReplicated}, true;
  if (megatron == "output_layer.weight") return out = {tensor_names::kLmHead, Merge::kRows}, true;
  static const std::string kLayers = "decoder.layers.";
  if (megatron.rfind(kLayers, 0) != 0) return false;
  size_t digits = kLayers.size();
  while (digits < megatron.size() && digits - kLayers.size() < 9 && std::isdigit(static_cast<unsigned char>(megatron[digits])))
    ++digits;
  if (digits == kLayers.size() || digits >= megatron.size() || megatron[digits] != '.') return false;
  const int64_t layer = std::stoll(megatron.substr(kLayers.size(), digits - kLayers.size()));
  const std::string rest = megatron.substr(digits + 1);
  static const std::map<std::string, Mapped> kLayerNames = {
      {"mixer.in_proj.layer_norm_weight", {"norm.weight", Merge::kReplicated}},
      {"norm.weight", {"norm.weight", Merge::kReplicated}},
      {"mixer.in_proj.weight", {"mixer.in_proj.weight", Merge::kInProjSegments}},
      {"mixer.conv1d.weight", {"mixer.conv1d.weight", Merge::kConvSegments}},
      {"mixer.conv1d.bias", {"mixer.conv1d.bias", Merge::kConvSegments}},
      {"mixer.dt_bias", {"mixer.dt_bias", Merge::kRows}},
      {"mixer.A_log", {"mixer.A_log", Merge::kRows}},
      {"mixer.D", {"mixer.D", Merge::kRows}},
      {"mixer.norm.weight", {"mixer.norm.weight", Merge::kRows}},
      {"mixer.out_proj.weight", {"mixer.out_proj.weight", Merge::kColumns}},
  };
  auto found = kLayerNames.find(rest);
  if (found == kLayerNames.end()) {
    if (rest.find("self_attention") != std::string::npos || rest.find("mlp") != std::string::npos)
      fail("{}: '{}' belongs to an attention or MLP layer; hybrid checkpoints are not supported, only pure Mamba-2",
           label, megatron);
    return false;
  }
  out = {tensor_names::layer(layer, found->second.name), found->second.merge};
  return true;
}

// Rows of one shard's tensor for each segment, in order (every shard holds 1/tp of each).
std::vector<int64_t> segment_rows(Merge merge, const Mamba2Config& c, int64_t tp) {
  const int64_t E = c.d_inner() / tp, GN = c.ngroups * c.d_state / tp, H = c.nheads() / tp;
  if (merge == Merge::kInProjSegments) return {E, E, GN, GN, H};
  return {E, GN, GN};
}

Tensor merge_shards(const std::vector<const Tensor*>& shards, Merge merge, const Mamba2Config& c,
                    const std::string& name, const std::string& label) {
  const Tensor& first = *shards[0];
  const int64_t tp = static_cast<int64_t>(shards.size());
  for (size_t r = 1; r < shards.size(); ++r)
    if (shards[r]->dtype != first.dtype || shards[r]->shape != first.shape)
      fail("{}: tensor '{}' is {} {} in mp_rank_00 but {} {} in mp_rank_{:02d}; the shards disagree", label, name,
           dtype_name(first.dtype), shape_str(first.shape), dtype_name(shards[r]->dtype), shape_str(shards[r]->shape), r);
  if (tp == 1) return first;
  if (merge == Merge::kReplicated) {
    for (size_t r = 1; r < shards.size(); ++r)
      if (std::memcmp(shards[r]->data, first.data, first.nbytes()) != 0)
        fail("{}: tensor '{}' should be the same on every tensor-parallel rank but mp_rank_{:02d} differs", label,
             name, r);
    return first;
  }
  if (first.shape.empty()) fail("{}: tensor '{}' is a scalar; cannot merge shards", label, name);
  const int64_t rows = first.shape[0];
  const size_t row_bytes = first.nbytes() / static_cast<size_t>(std::max<int64_t>(rows, 1));
  Shape shape = first.shape;
  std::vector<uint8_t> out(first.nbytes() * shards.size());
  uint8_t* dst = out.data();
  if (merge == Merge::kColumns) {
    if (shape.size() != 2) fail("{}: tensor '{}' has shape {}, expected a matrix", label, name, shape_str(shape));
    shape[1] *= tp;
    for (int64_t row = 0; row < rows; ++row)
      for (const Tensor* shard : shards) {
        std::memcpy(dst, shard->data + row * row_bytes, row_bytes);
        dst += row_bytes;
      }
    return Tensor::own(first.dtype, shape, std::move(out));
  }
  std::vector<int64_t> segments = {rows};
  if (merge == Merge::kInProjSegments || merge == Merge::kConvSegments) {
    segments = segment_rows(merge, c, tp);
    int64_t total = 0;
    for (int64_t s : segments) total += s;
    if (total != rows)
      fail("{}: tensor '{}' has {} rows per shard; {} shards of this model's widths need {}", label, name, rows, tp,
           total);
  }
  shape[0] *= tp;
  int64_t offset = 0;
  for (int64_t segment : segments) {
    for (const Tensor* shard : shards) {
      std::memcpy(dst, shard->data + offset * row_bytes, segment * row_bytes);
      dst += segment * row_bytes;
    }
    offset += segment;
  }
  return Tensor::own(first.dtype, shape, std::move(out));
}

Mamba2Config config_from_args(const Args& args, const TensorMap& rank0, int64_t tp, const std::string& label) {
  Mamba2Config c;
  c.spelling = ConfigSpelling::kMegatronArgs;
  c.d_model = args.required_int("hidden_size", "the model width");
  c.n_layer = args.required_int("num_layers", "the number of layers");
  c.d_state = args.required_int("mamba_state_dim", "the SSM state size");
  c.headdim = args.required_int("mamba_head_dim", "the SSM head dimension");
  c.ngroups = args.required_int("mamba_num_groups", "the number of B/C groups");
  c.tie_embeddings = !args.optional_bool("untie_embeddings_and_output_weights", false);
  c.norm_eps = args.optional_number("norm_epsilon", 1e-5);
  const std::string normalization = args.optional_str("normalization");
  if (!normalization.empty() && normalization != "RMSNorm")
    fail("{}: args.normalization is '{}'; Mamba-2 uses RMSNorm", label, normalization);
  auto embedding = rank0.find("model.embedding.word_embeddings.weight");
  if (embedding == rank0.end() || embedding->second.shape.size() != 2)
    fail("{}: no embedding.word_embeddings.weight matrix in the model", label);
  c.vocab_size = embedding->second.shape[0] * tp;
  const int64_t padded = args.optional_int("padded_vocab_size", c.vocab_size);
  if (padded != c.vocab_size)
    fail("{}: args.padded_vocab_size is {} but the embedding has {} rows over {} shard(s)", label, padded,
         c.vocab_size, tp);
  auto out_proj = rank0.find("model.decoder.layers.0.mixer.out_proj.weight");
  auto conv = rank0.find("model.decoder.layers.0.mixer.conv1d.weight");
  if (out_proj == rank0.end() || out_proj->second.shape.size() != 2 || conv == rank0.end() ||
      conv->second.shape.size() != 3)
    fail("{}: layer 0 has no Mamba mixer (mixer.out_proj.weight, mixer.conv1d.weight); not a Mamba-2 checkpoint",
         label);
  const int64_t d_inner = out_proj->second.shape[1] * tp;
  if (d_inner % c.d_model != 0)
    fail("{}: out_proj's {} inner channels are not a multiple of hidden_size {}", label, d_inner, c.d_model);
  c.expand = d_inner / c.d_model;
  c.d_conv = conv->second.shape[2];
  validate_config(c, label);
  if (c.ngroups % tp != 0 || c.nheads() % tp != 0)
    fail("{}: {} tensor-parallel shards do not divide {} groups and {} heads", label, tp, c.ngroups, c.nheads());
  return c;
}

}  // namespace

bool is_megatron_checkpoint(const std::string& dir) {
  return file_exists(join_path(dir, "latest_checkpointed_iteration.txt")) || is_dir(join_path(dir, "release")) ||
         is_dir(join_path(dir, "mp_rank_00"));
}

Checkpoint load_megatron_checkpoint(const std::string& dir) {
  const std::string iteration = iteration_dir(dir);
  const std::vector<std::string> files = shard_files(iteration);
  std::vector<TorchCheckpoint> shards;
  for (const std::string& file : files) shards.push_back(read_torch_checkpoint(file));
  Checkpoint checkpoint = assemble_megatron_checkpoint(shards, files, iteration);
  checkpoint.dir = dir;
  return checkpoint;
}

Checkpoint assemble_megatron_checkpoint(const std::vector<TorchCheckpoint>& shards,
                                        const std::vector<std::string>& files, const std::string& iteration) {
  if (shards.empty() || shards.size() != files.size()) fail("{}: no shards to assemble", iteration);
  const int64_t tp = static_cast<int64_t>(files.size());
  const std::string& label = files[0];

  auto args_found = shards[0].namespaces.find("args");
  if (args_found == shards[0].namespaces.end())
    fail("{}: no 'args' (argparse.Namespace) in the checkpoint; cannot tell the model's shape", label);
  const Args args(args_found->second, label);
  const int64_t saved_tp = args.optional_int("tensor_model_parallel_size", tp);
  if (saved_tp != tp)
    fail("{}: args.tensor_model_parallel_size is {} but {} holds {} shard(s); a shard is missing", label, saved_tp,
         iteration, tp);
  const int64_t pipeline = args.optional_int("pipeline_model_parallel_size", 1);
  if (pipeline != 1)
    fail("{}: args.pipeline_model_parallel_size is {}; only checkpoints saved without pipeline parallelism are read",
         label, pipeline);
  check_pure_mamba(args, label);

  Checkpoint checkpoint;
  checkpoint.dir = iteration;
  checkpoint.weights_path = label;
  checkpoint.layout = fmt::format("Megatron-LM ({}, {} tensor-parallel shard{})", fs::path(iteration).filename().string(),
                                  tp, tp == 1 ? "" : "s");
  checkpoint.config = config_from_args(args, shards[0].tensors, tp, label);

  TensorMap merged;
  for (const auto& [full_name, tensor] : shards[0].tensors) {
    const std::string name = strip_model_prefix(full_name);
    if (name.empty()) continue;  // optimizer or RNG state, not the model
    if (name.size() >= 12 && name.compare(name.size() - 12, 12, "_extra_state") == 0) continue;  // TransformerEngine
    Mapped mapped;
    if (!map_name(name, mapped, label))
      fail("{}: unexpected tensor '{}' (not part of a Megatron-LM Mamba-2 model)", label, name);
    std::vector<const Tensor*> parts;
    for (int64_t r = 0; r < tp; ++r) {
      auto found = shards[r].tensors.find(full_name);
      if (found == shards[r].tensors.end()) fail("{}: tensor '{}' is missing", files[r], name);
      parts.push_back(&found->second);
    }
    if (!merged.emplace(mapped.name, merge_shards(parts, mapped.merge, checkpoint.config, name, label)).second)
      fail("{}: two tensors map to '{}' (both a fused and a separate pre-norm?)", label, mapped.name);
  }
  for (int64_t r = 1; r < tp; ++r)
    for (const auto& [full_name, tensor] : shards[r].tensors)
      if (!strip_model_prefix(full_name).empty() && !shards[0].tensors.count(full_name))
        fail("{}: tensor '{}' is not in mp_rank_00", files[r], strip_model_prefix(full_name));
  checkpoint.tensors = canonicalize_tensors(std::move(merged), checkpoint.config, label);
  return checkpoint;
}

}  // namespace ssdq
