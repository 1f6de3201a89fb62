#include "quant/transforms.h"

#include <algorithm>
#include <random>
#include <string>

#include "formats/error.h"
#include "model/hadamard.h"

namespace ssdq {
namespace {

// `layer` < 0 names a model-level tensor.
void check_size(const std::vector<float>& v, int64_t expected, const char* what, int64_t layer) {
  if (static_cast<int64_t>(v.size()) == expected) return;
  const std::string name = layer < 0 ? std::string(what) : fmt::format("layers.{}.{}", layer, what);
  fail("model weights: {} has {} values, expected {}", name, v.size(), expected);
}

void check_layer_shapes(const LayerWeights& layer, const Mamba2Config& c, int64_t l) {
  const int64_t D = c.d_model, E = c.d_inner(), H = c.nheads();
  check_size(layer.norm, D, "norm", l);
  check_size(layer.in_proj, c.d_in_proj() * D, "in_proj", l);
  check_size(layer.conv_weight, c.conv_dim() * c.d_conv, "conv_weight", l);
  check_size(layer.conv_bias, c.conv_dim(), "conv_bias", l);
  check_size(layer.dt_bias, H, "dt_bias", l);
  check_size(layer.A, H, "A", l);
  check_size(layer.D, H, "D", l);
  check_size(layer.gated_norm, E, "gated_norm", l);
  check_size(layer.out_proj, D * E, "out_proj", l);
}

// Every tensor has the size the config says (a malformed ModelWeights must not be indexed).
void check_shapes(const ModelWeights& w) {
  const Mamba2Config& c = w.config;
  if (static_cast<int64_t>(w.layers.size()) != c.n_layer)
    fail("model weights: {} layers, the config says {}", w.layers.size(), c.n_layer);
  check_size(w.embedding, c.vocab_size * c.d_model, "embedding", -1);
  if (!w.lm_head.empty()) check_size(w.lm_head, c.vocab_size * c.d_model, "lm_head", -1);
  check_size(w.norm_f, c.d_model, "norm_f", -1);
  for (int64_t l = 0; l < c.n_layer; ++l) check_layer_shapes(w.layers[l], c, l);
}

// Each of `rows` rows x of `cols` values at m becomes x·diag(scale).
void scale_columns(float* m, int64_t rows, int64_t cols, const std::vector<float>& scale) {
  for (int64_t i = 0; i < rows * cols; ++i) m[i] *= scale[i % cols];
}

std::vector<float> transpose(const std::vector<float>& m, int64_t rows, int64_t cols) {
  std::vector<float> t(m.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  return t;
}

// Rows [begin, begin + count) of a [*, cols] matrix: new row i is old row begin + index[i].
void gather_rows(std::vector<float>& m, int64_t cols, int64_t begin, const std::vector<int64_t>& index) {
  std::vector<float> old(m.begin() + begin * cols, m.begin() + (begin + static_cast<int64_t>(index.size())) * cols);
  for (size_t i = 0; i < index.size(); ++i)
    std::copy(old.begin() + index[i] * cols, old.begin() + (index[i] + 1) * cols, m.begin() + (begin + i) * cols);
}

void gather(std::vector<float>& v, const std::vector<int64_t>& index) { gather_rows(v, 1, 0, index); }

// Rows of a table [*, cols] in blocks, each block body(first row, rows) on its own.
constexpr int64_t kRowsPerItem = 4096;
void for_row_blocks(const ParallelFor& parallel, int64_t rows,
                    const std::function<void(int64_t first, int64_t count)>& body) {
  run_items(parallel, (rows + kRowsPerItem - 1) / kRowsPerItem,
      [&](int64_t i) { body(i * kRowsPerItem, std::min(kRowsPerItem, rows - i * kRowsPerItem)); });
}

// Rows [first, first + count) of [*, n] become x·diag(signs)·H_n/√n.
void rotate_row_block(float* m, int64_t first, int64_t count, int64_t n, const std::vector<float>& signs) {
  float* rows = m + first * n;
  if (!signs.empty()) scale_columns(rows, count, n, signs);
  apply_hadamard_rows(rows, count, n, true);
}

// Each row x of [rows, n] becomes x·diag(signs)·H_n/√n.
void rotate_rows(std::vector<float>& m, int64_t n, const std::vector<float>& signs) {
  rotate_row_block(m.data(), 0, static_cast<int64_t>(m.size()) / n, n, signs);
}

}  // namespace

void fuse_norm_weights(ModelWeights& w, const ParallelFor& parallel) {
  check_shapes(w);
  const int64_t D = w.config.d_model;
  run_items(parallel, w.config.n_layer, [&](int64_t l) {
    LayerWeights& layer = w.layers[l];
    scale_columns(layer.in_proj.data(), w.config.d_in_proj(), D, layer.norm);
    std::fill(layer.norm.begin(), layer.norm.end(), 1.0f);
  });
  std::vector<float> head = w.head();
  for_row_blocks(parallel, w.config.vocab_size,
                 [&](int64_t first, int64_t rows) { scale_columns(head.data() + first * D, rows, D, w.norm_f); });
  w.lm_head = std::move(head);
  std::fill(w.norm_f.begin(), w.norm_f.end(), 1.0f);
  w.config.tie_embeddings = false;
}

std::vector<float> random_signs(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> signs(count);
  for (float& s : signs) s = (rng() >> 63) ? -1.0f : 1.0f;
  return signs;
}

void rotate_residual(ModelWeights& w, const std::vector<float>& signs, const ParallelFor& parallel) {
  check_shapes(w);
  const int64_t D = w.config.d_model, E = w.config.d_inner();
  hadamard_base_order(D);  // fails with a clear message before anything changes
  if (!signs.empty() && static_cast<int64_t>(signs.size()) != D)
    fail("rotate_residual: {} signs for d_model {}", signs.size(), D);
  for (float s : signs)
    if (s != 1.0f && s != -1.0f) fail("rotate_residual: sign {} is not +1 or -1", s);
  auto check_fused = [&](const std::vector<float>& norm, const std::string& what) {
    for (size_t i = 0; i < norm.size(); ++i)
      if (norm[i] != 1.0f)
        fail("rotate_residual: {} is not fused (entry {} is {}); call fuse_norm_weights first", what, i, norm[i]);
  };
  for (int64_t l = 0; l < w.config.n_layer; ++l) check_fused(w.layers[l].norm, fmt::format("layers.{}.norm", l));
  check_fused(w.norm_f, "norm_f");

  for (std::vector<float>* table : {&w.embedding, &w.lm_head})
    if (!table->empty())
      for_row_blocks(parallel, w.config.vocab_size,
                     [&](int64_t first, int64_t rows) { rotate_row_block(table->data(), first, rows, D, signs); });
  run_items(parallel, w.config.n_layer, [&](int64_t l) {
    LayerWeights& layer = w.layers[l];
    rotate_rows(layer.in_proj, D, signs);
    std::vector<float> out_t = transpose(layer.out_proj, D, E);  // columns of out_proj as rows
    rotate_rows(out_t, D, signs);
    layer.out_proj = transpose(out_t, E, D);
  });
}

void fuse_out_proj_hadamard(ModelWeights& w, int64_t blocks, const ParallelFor& parallel) {
  check_shapes(w);
  const int64_t D = w.config.d_model, E = w.config.d_inner();
  if (blocks < 1 || E % blocks != 0) fail("fuse_out_proj_hadamard: {} blocks do not split {} channels", blocks, E);
  hadamard_base_order(E / blocks);
  // A row of out_proj is B blocks of E/B columns, each rotated by H_{E/B}: the same as rotating
  // D·B rows of E/B.
  run_items(parallel, w.config.n_layer,
      [&](int64_t l) { apply_hadamard_rows(w.layers[l].out_proj.data(), D * blocks, E / blocks, true); });
}

void reorder_heads(LayerWeights& layer, const Mamba2Config& c, const HeadPermutation& perm) {
  if (c.headdim <= 0 || c.ngroups <= 0 || c.d_inner() % c.headdim != 0 || c.nheads() % c.ngroups != 0)
    fail("reorder_heads: d_inner {}, headdim {} and ngroups {} do not split into whole heads and groups", c.d_inner(),
         c.headdim, c.ngroups);
  const int64_t D = c.d_model, E = c.d_inner(), H = c.nheads(), P = c.headdim, K = c.d_conv;
  validate_head_permutation(perm, H, P, c.heads_per_group());
  check_layer_shapes(layer, c, -1);

  const std::vector<int64_t> channels = channel_gather_index(perm, P);
  gather_rows(layer.in_proj, D, 0, channels);                                  // z
  gather_rows(layer.in_proj, D, E, channels);                                  // x
  gather_rows(layer.in_proj, D, 2 * E + 2 * c.ngroups * c.d_state, perm.heads);  // dt
  gather_rows(layer.conv_weight, K, 0, channels);
  gather_rows(layer.conv_bias, 1, 0, channels);
  gather(layer.dt_bias, perm.heads);
  gather(layer.A, perm.heads);
  gather(layer.D, perm.heads);
  gather(layer.gated_norm, channels);
  std::vector<float> out_t = transpose(layer.out_proj, D, E);  // columns of out_proj as rows
  gather_rows(out_t, D, 0, channels);
  layer.out_proj = transpose(out_t, E, D);
}

}  // namespace ssdq
