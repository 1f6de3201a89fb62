#include "model/synthetic_configs.h"

#include "formats/error.h"

namespace ssdq {
namespace {

struct Entry {
  const char* name;
  int64_t d_model, n_layer, ngroups, vocab;
};

// d_model / n_layer of state-spaces/mamba2-* (their config.json; vocab 50277 padded to 50288);
// every other hyper-parameter is mamba_ssm's default (d_state 128, headdim 64, expand 2).
// mamba2-8b-like is nvidia/mamba2-8b-3t-4k's shape as its Megatron-LM args give it (hidden_size
// 4096, num_layers 56, mamba_num_groups 8, mamba_state_dim 128, mamba_head_dim 64, vocabulary
// 256,000 from its SentencePiece model, untied output layer; docs/CHECKPOINTS.md).
constexpr Entry kEntries[] = {
    {"mamba2-130m", 768, 24, 1, 50288},  {"mamba2-370m", 1024, 48, 1, 50288}, {"mamba2-780m", 1536, 48, 1, 50288},
    {"mamba2-1.3b", 2048, 48, 1, 50288}, {"mamba2-2.7b", 2560, 64, 1, 50288}, {"mamba2-8b-like", 4096, 56, 8, 256000},
};

}  // namespace

std::vector<std::string> synthetic_config_names() {
  std::vector<std::string> names;
  for (const Entry& e : kEntries) names.push_back(e.name);
  return names;
}

Mamba2Config synthetic_config(const std::string& name) {
  for (const Entry& e : kEntries) {
    if (name != e.name) continue;
    Mamba2Config c;
    c.d_model = e.d_model;
    c.n_layer = e.n_layer;
    c.ngroups = e.ngroups;
    c.vocab_size = e.vocab;
    c.tie_embeddings = e.vocab == 50288;
    validate_config(c, name);
    return c;
  }
  std::string known;
  for (const auto& n : synthetic_config_names()) known += (known.empty() ? "" : ", ") + n;
  fail("--synthetic {}: unknown config (known: {})", name, known);
}

}  // namespace ssdq
