#include "model/tensor_parallel.h"

#include <algorithm>

#include <fmt/format.h>

#include "formats/error.h"

namespace ssdq {
namespace {

bool divides_model(const Mamba2Config& c, int tp) {
  const int64_t H = c.nheads(), G = c.ngroups;
  return tp >= 1 && H % tp == 0 && (G % tp == 0 || tp % G == 0) && c.vocab_size % tp == 0;
}

// The global indices of rank `rank`'s rows of in_proj, in its local order z | x | B | C | dt.
std::vector<int64_t> in_proj_rows(const Mamba2Config& c, const TensorParallelPlan& p, int rank) {
  const int64_t E = c.d_inner(), P = c.headdim, N = c.d_state, GN = c.ngroups * N;
  const int64_t c0 = p.first_head(rank) * P, channels = p.local_heads() * P;
  const int64_t g0 = p.first_group(rank) * N, group_rows = p.local_groups() * N;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < channels; ++i) rows.push_back(c0 + i);                  // z
  for (int64_t i = 0; i < channels; ++i) rows.push_back(E + c0 + i);              // x
  for (int64_t i = 0; i < group_rows; ++i) rows.push_back(2 * E + g0 + i);        // B
  for (int64_t i = 0; i < group_rows; ++i) rows.push_back(2 * E + GN + g0 + i);   // C
  for (int64_t h = 0; h < p.local_heads(); ++h) rows.push_back(2 * E + 2 * GN + p.first_head(rank) + h);  // dt
  return rows;
}

// The global indices of rank `rank`'s conv channels, in its local order x | B | C.
std::vector<int64_t> conv_channels(const Mamba2Config& c, const TensorParallelPlan& p, int rank) {
  const int64_t E = c.d_inner(), N = c.d_state, GN = c.ngroups * N;
  const int64_t c0 = p.first_head(rank) * c.headdim, channels = p.local_heads() * c.headdim;
  const int64_t g0 = p.first_group(rank) * N, group_rows = p.local_groups() * N;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < channels; ++i) out.push_back(c0 + i);
  for (int64_t i = 0; i < group_rows; ++i) out.push_back(E + g0 + i);
  for (int64_t i = 0; i < group_rows; ++i) out.push_back(E + GN + g0 + i);
  return out;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out;
}

std::vector<int64_t> range(int64_t first, int64_t count) {
  std::vector<int64_t> out(count);
  for (int64_t i = 0; i < count; ++i) out[i] = first + i;
  return out;
}

// Rows `rows` of a row-major [*, width] matrix.
std::vector<float> gather_rows(const std::vector<float>& m, int64_t width, const std::vector<int64_t>& rows) {
  std::vector<float> out(rows.size() * width);
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy_n(m.begin() + rows[r] * width, width, out.begin() + r * width);
  return out;
}

// Columns `cols` of a row-major [height, width] matrix.
std::vector<float> gather_cols(const std::vector<float>& m, int64_t height, int64_t width,
                               const std::vector<int64_t>& cols) {
  std::vector<float> out(height * cols.size());
  for (int64_t r = 0; r < height; ++r)
    for (size_t i = 0; i < cols.size(); ++i) out[r * cols.size() + i] = m[r * width + cols[i]];
  return out;
}

// Writes a shard's rows back into the whole matrix; a row written by an earlier rank (a replicated
// B/C group) must hold the same values.
class RowScatter {
 public:
  RowScatter(int64_t rows, int64_t width, const char* what)
      : width_(width), out_(rows * width), written_(rows, false), what_(what) {}
  void put(const std::vector<float>& shard, const std::vector<int64_t>& rows, int rank) {
    if (shard.size() != rows.size() * width_) fail("tensor parallel: rank {}'s {} has the wrong size", rank, what_);
    for (size_t r = 0; r < rows.size(); ++r) {
      const float* src = shard.data() + r * width_;
      float* dst = out_.data() + rows[r] * width_;
      if (written_[rows[r]] && !std::equal(src, src + width_, dst))
        fail("tensor parallel: rank {}'s copy of {} row {} differs from another rank's", rank, what_, rows[r]);
      std::copy_n(src, width_, dst);
      written_[rows[r]] = true;
    }
  }
  std::vector<float> take() {
    if (std::find(written_.begin(), written_.end(), false) != written_.end())
      fail("tensor parallel: the shards leave rows of {} unset", what_);
    return std::move(out_);
  }

 private:
  int64_t width_;
  std::vector<float> out_;
  std::vector<bool> written_;
  const char* what_;
};

// Which global indices rank `rank` holds, in its local order: heads, their channels, conv channels
// (x | B | C), in_proj rows (z | x | B | C | dt). The same for every layer.
struct RankIndices {
  std::vector<int64_t> heads, channels, conv, in_proj;
  RankIndices(const Mamba2Config& c, const TensorParallelPlan& p, int rank)
      : heads(range(p.first_head(rank), p.local_heads())),
        channels(range(p.first_head(rank) * c.headdim, p.local_heads() * c.headdim)),
        conv(conv_channels(c, p, rank)),
        in_proj(in_proj_rows(c, p, rank)) {}
};

}  // namespace

std::vector<int> valid_tensor_parallel_sizes(const Mamba2Config& config, int limit) {
  std::vector<int> out;
  for (int tp = 1; tp <= limit; ++tp)
    if (divides_model(config, tp)) out.push_back(tp);
  return out;
}

TensorParallelPlan plan_tensor_parallel(const Mamba2Config& c, int tp) {
  if (!divides_model(c, tp)) {
    std::vector<std::string> sizes;
    for (int size : valid_tensor_parallel_sizes(c))
      if (size > 1) sizes.push_back(std::to_string(size));
    fail("--tp {}: {} heads, {} group{}, vocabulary {}: the heads must split evenly, the groups split evenly or "
         "evenly share ranks, and the vocabulary split evenly; valid: {}",
         tp, c.nheads(), c.ngroups, c.ngroups == 1 ? "" : "s", c.vocab_size,
         sizes.empty() ? std::string("none above 1") : "--tp " + joined(sizes));
  }
  TensorParallelPlan p;
  p.tp = tp;
  p.heads = c.nheads();
  p.groups = c.ngroups;
  p.vocab = c.vocab_size;
  p.groups_split = c.ngroups % tp == 0;
  return p;
}

Mamba2Config shard_config(const Mamba2Config& config, const TensorParallelPlan& plan) {
  Mamba2Config local = config;
  local.d_inner_shard = plan.local_heads() * config.headdim;
  local.ngroups = plan.local_groups();
  return local;
}

ModelWeights shard_weights(const ModelWeights& w, const TensorParallelPlan& plan, int rank) {
  const Mamba2Config& c = w.config;
  if (rank < 0 || rank >= plan.tp) fail("tensor parallel: rank {} of {}", rank, plan.tp);
  const int64_t D = c.d_model, E = c.d_inner(), K = c.d_conv;
  const RankIndices at(c, plan, rank);
  ModelWeights s;
  s.config = shard_config(c, plan);
  s.embedding = w.embedding;
  s.norm_f = w.norm_f;
  s.lm_head = gather_rows(w.head(), D, range(rank * plan.local_vocab(), plan.local_vocab()));
  for (const LayerWeights& l : w.layers) {
    LayerWeights o;
    o.norm = l.norm;
    o.in_proj = gather_rows(l.in_proj, D, at.in_proj);
    o.conv_weight = gather_rows(l.conv_weight, K, at.conv);
    o.conv_bias = gather_rows(l.conv_bias, 1, at.conv);
    o.dt_bias = gather_rows(l.dt_bias, 1, at.heads);
    o.A = gather_rows(l.A, 1, at.heads);
    o.D = gather_rows(l.D, 1, at.heads);
    o.gated_norm = gather_rows(l.gated_norm, 1, at.channels);
    o.out_proj = gather_cols(l.out_proj, D, E, at.channels);
    s.layers.push_back(std::move(o));
  }
  return s;
}

namespace {

// A weight matrix's rows `rows` (in_proj's rank rows, the head's vocabulary rows).
WeightMatrix weight_rows(const WeightMatrix& w, const std::vector<int64_t>& rows) {
  WeightMatrix out = w;
  out.rows = static_cast<int64_t>(rows.size());
  if (!w.is_quantized()) {
    out.dense = gather_rows(w.dense, w.cols, rows);
    return out;
  }
  const QuantizedMatrix& q = w.quantized;
  QuantizedMatrix& s = out.quantized;
  s.rows = out.rows;
  s.values.assign(rows.size() * q.cols, 0);
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy_n(q.values.begin() + rows[r] * q.cols, q.cols, s.values.begin() + r * q.cols);
  if (q.granularity != Granularity::kPerTensor) {
    const int64_t groups = q.groups_per_row();
    s.scales.assign(rows.size() * groups, 0.f);
    for (size_t r = 0; r < rows.size(); ++r)
      std::copy_n(q.scales.begin() + rows[r] * groups, groups, s.scales.begin() + r * groups);
  }
  return out;
}

// out_proj's columns [c0, c0 + count) (a rank's channels): per-row scales stay; int4 groups go with
// their columns and must lie wholly inside the range.
WeightMatrix weight_cols(const WeightMatrix& w, int64_t c0, int64_t count, const std::string& what) {
  WeightMatrix out = w;
  out.cols = count;
  std::vector<int64_t> cols = range(c0, count);
  if (!w.is_quantized()) {
    out.dense = gather_cols(w.dense, w.rows, w.cols, cols);
    return out;
  }
  const QuantizedMatrix& q = w.quantized;
  QuantizedMatrix& s = out.quantized;
  s.cols = count;
  s.values.assign(q.rows * count, 0);
  for (int64_t r = 0; r < q.rows; ++r)
    std::copy_n(q.values.begin() + r * q.cols + c0, count, s.values.begin() + r * count);
  if (q.granularity == Granularity::kPerChannel) {
    s.group_size = count;  // one scale a row, over the rank's columns
  } else if (q.granularity == Granularity::kPerGroup) {
    if (c0 % q.group_size != 0 || count % q.group_size != 0)
      fail("tensor parallel: {}'s weight groups of {} columns straddle the ranks' {} columns each; "
           "export with a group size dividing {} or use a --tp that does",
           what, q.group_size, count, count);
    const int64_t groups = q.groups_per_row(), local = count / q.group_size, g0 = c0 / q.group_size;
    s.scales.assign(q.rows * local, 0.f);
    for (int64_t r = 0; r < q.rows; ++r)
      std::copy_n(q.scales.begin() + r * groups + g0, local, s.scales.begin() + r * local);
  }
  return out;
}

// A point's format on the channels `channels` (global indices, in the rank's local order).
ActQuant format_on(const ActQuant& a, const std::vector<int64_t>& channels) {
  if (!a.is_int8() || a.per_tensor()) return a;
  ActQuant out = a;
  out.index.resize(channels.size());
  for (size_t i = 0; i < channels.size(); ++i)
    out.index[i] = a.index.empty() ? static_cast<int32_t>(channels[i]) : a.index[channels[i]];
  return out;
}

}  // namespace

QuantizedModel shard_quantized_model(const QuantizedModel& m, const TensorParallelPlan& plan, int rank) {
  const Mamba2Config& c = m.config;
  if (rank < 0 || rank >= plan.tp) fail("tensor parallel: rank {} of {}", rank, plan.tp);
  const int64_t N = c.d_state;
  const RankIndices at(c, plan, rank);
  std::vector<int64_t> groups;  // the rank's B/C channels (g, n) within one of B or C
  for (int64_t g = plan.first_group(rank); g < plan.first_group(rank) + plan.local_groups(); ++g)
    for (int64_t n = 0; n < N; ++n) groups.push_back(g * N + n);
  std::vector<int64_t> group_ids;
  for (int64_t g = plan.first_group(rank); g < plan.first_group(rank) + plan.local_groups(); ++g) group_ids.push_back(g);
  QuantizedModel s;
  s.config = shard_config(c, plan);
  s.embedding = m.embedding;
  s.norm_f = m.norm_f;
  s.lm_head = weight_rows(m.head(), range(rank * plan.local_vocab(), plan.local_vocab()));
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const QuantizedLayer& q = m.layers[l];
    const std::string what = fmt::format("layer {} out_proj", l);
    if (q.online_hadamard && q.hadamard_blocks % plan.tp != 0)
      fail("tensor parallel: layer {} rotates out_proj's input with a Hadamard transform over {} blocks of {} "
           "channels, which would mix the channels of --tp {}'s ranks; export the artifact with --tp-blocks {} (or a "
           "multiple of it) to run it on {} ranks",
           l, q.hadamard_blocks, c.d_inner() / q.hadamard_blocks, plan.tp, plan.tp, plan.tp);
    QuantizedLayer o = q;
    o.hadamard_blocks = q.online_hadamard ? q.hadamard_blocks / plan.tp : 1;  // the rank's whole blocks
    o.in_proj = weight_rows(q.in_proj, at.in_proj);
    o.out_proj = weight_cols(q.out_proj, at.channels.front(), static_cast<int64_t>(at.channels.size()), what);
    o.conv_weight = gather_rows(q.conv_weight, c.d_conv, at.conv);
    o.conv_bias = gather_rows(q.conv_bias, 1, at.conv);
    o.dt_bias = gather_rows(q.dt_bias, 1, at.heads);
    o.A = gather_rows(q.A, 1, at.heads);
    o.D = gather_rows(q.D, 1, at.heads);
    o.gated_norm = gather_rows(q.gated_norm, 1, at.channels);
    o.conv_in = format_on(q.conv_in, at.conv);
    o.ssd_x = format_on(q.ssd_x, at.channels);
    o.ssd_B = format_on(q.ssd_B, groups);
    o.ssd_C = format_on(q.ssd_C, groups);
    o.ssd_dt = format_on(q.ssd_dt, at.heads);
    o.ssm_state = format_on(q.ssm_state, at.channels);
    o.x_scaled = format_on(q.x_scaled, at.channels);
    o.cb = format_on(q.cb, group_ids);
    s.layers.push_back(std::move(o));
  }
  return s;
}

ModelWeights unshard_weights(const std::vector<ModelWeights>& shards, const Mamba2Config& c,
                             const TensorParallelPlan& plan) {
  if (static_cast<int>(shards.size()) != plan.tp)
    fail("tensor parallel: {} shards for --tp {}", shards.size(), plan.tp);
  const int64_t D = c.d_model, E = c.d_inner(), K = c.d_conv, V = c.vocab_size;
  ModelWeights w;
  w.config = c;
  RowScatter embedding(V, D, "the embedding"), norm_f(D, 1, "norm_f"), head(V, D, "lm_head");
  for (int r = 0; r < plan.tp; ++r) {
    embedding.put(shards[r].embedding, range(0, V), r);
    norm_f.put(shards[r].norm_f, range(0, D), r);
    head.put(shards[r].lm_head, range(r * plan.local_vocab(), plan.local_vocab()), r);
  }
  w.embedding = embedding.take();
  w.norm_f = norm_f.take();
  w.lm_head = head.take();
  if (c.tie_embeddings) {
    if (w.lm_head != w.embedding) fail("tensor parallel: the shards' lm_head is not the tied embedding");
    w.lm_head.clear();
  }
  std::vector<RankIndices> ranks;
  for (int r = 0; r < plan.tp; ++r) ranks.emplace_back(c, plan, r);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    RowScatter norm(D, 1, "norm"), in_proj(c.d_in_proj(), D, "in_proj"), conv_weight(c.conv_dim(), K, "conv weight"),
        conv_bias(c.conv_dim(), 1, "conv bias"), dt_bias(c.nheads(), 1, "dt_bias"), A(c.nheads(), 1, "A"),
        Dv(c.nheads(), 1, "D"), gated_norm(E, 1, "gated norm"), out_proj_t(E, D, "out_proj");
    for (int r = 0; r < plan.tp; ++r) {
      const LayerWeights& s = shards[r].layers.at(l);
      const RankIndices& at = ranks[r];
      const std::vector<int64_t>& channels = at.channels;
      norm.put(s.norm, range(0, D), r);
      in_proj.put(s.in_proj, at.in_proj, r);
      conv_weight.put(s.conv_weight, at.conv, r);
      conv_bias.put(s.conv_bias, at.conv, r);
      dt_bias.put(s.dt_bias, at.heads, r);
      A.put(s.A, at.heads, r);
      Dv.put(s.D, at.heads, r);
      gated_norm.put(s.gated_norm, channels, r);
      // out_proj's columns are rows of its transpose.
      std::vector<float> transposed(channels.size() * D);
      const int64_t local = static_cast<int64_t>(channels.size());
      if (static_cast<int64_t>(s.out_proj.size()) != D * local) fail("tensor parallel: rank {}'s out_proj has the wrong size", r);
      for (int64_t i = 0; i < D; ++i)
        for (int64_t j = 0; j < local; ++j) transposed[j * D + i] = s.out_proj[i * local + j];
      out_proj_t.put(transposed, channels, r);
    }
    LayerWeights o;
    o.norm = norm.take();
    o.in_proj = in_proj.take();
    o.conv_weight = conv_weight.take();
    o.conv_bias = conv_bias.take();
    o.dt_bias = dt_bias.take();
    o.A = A.take();
    o.D = Dv.take();
    o.gated_norm = gated_norm.take();
    const std::vector<float> t = out_proj_t.take();
    o.out_proj.resize(D * E);
    for (int64_t j = 0; j < E; ++j)
      for (int64_t i = 0; i < D; ++i) o.out_proj[i * E + j] = t[j * D + i];
    w.layers.push_back(std::move(o));
  }
  return w;
}

}  // namespace ssdq
