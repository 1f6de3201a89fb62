#include "pipeline/synthetic_quantized.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "calib/calibration_stats.h"
#include "pipeline/quantize_model.h"
#include "quant/sort_cluster.h"
#include "runtime/parallel.h"

namespace ssdq {
namespace {

// splitmix64: fast enough for billions of weights, and the same on every machine.
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
};

std::vector<float> uniform_vector(int64_t count, float lo, float hi, Random& rng) {
  std::vector<float> v(count);
  for (float& x : v) x = rng.uniform(lo, hi);
  return v;
}

// Uniform integers over the full range with one scale per group, so that q·s spans ±range.
WeightMatrix random_quantized(int64_t rows, int64_t cols, QuantBits bits, int64_t group_size, float range,
                              uint64_t seed) {
  WeightMatrix w;
  w.rows = rows;
  w.cols = cols;
  w.kind = WeightMatrix::Kind::kQuantized;
  QuantizedMatrix& q = w.quantized;
  q.rows = rows;
  q.cols = cols;
  q.bits = bits;
  q.granularity = group_size > 0 && group_size < cols ? Granularity::kPerGroup : Granularity::kPerChannel;
  q.group_size = q.granularity == Granularity::kPerGroup ? group_size : cols;
  q.values.resize(rows * cols);
  const int hi = quant_max(bits), span = 2 * hi + 1;
  parallel_for((rows + 255) / 256, [&](int64_t block) {
    Random rng{seed * 0x100000001b3ull + static_cast<uint64_t>(block)};
    const int64_t r0 = block * 256, r1 = std::min(rows, r0 + 256);
    for (int64_t i = r0 * cols; i < r1 * cols; ++i) q.values[i] = static_cast<int8_t>(int(rng.next() % span) - hi);
  });
  q.scales.assign(rows * q.groups_per_row(), range / hi);
  return w;
}

WeightMatrix random_dense(int64_t rows, int64_t cols, float range, uint64_t seed) {
  WeightMatrix w;
  w.rows = rows;
  w.cols = cols;
  w.kind = WeightMatrix::Kind::kFloat16;
  w.dense.resize(rows * cols);
  parallel_for((rows + 255) / 256, [&](int64_t block) {
    Random rng{seed * 0x100000001b3ull + static_cast<uint64_t>(block)};
    const int64_t r0 = block * 256, r1 = std::min(rows, r0 + 256);
    for (int64_t i = r0 * cols; i < r1 * cols; ++i) w.dense[i] = round_to_fp16(rng.uniform(-range, range));
  });
  return w;
}

// Statistics of a few random rows per point, with magnitudes like a trained model's.
LayerStats synthetic_stats(const Mamba2Config& c, int64_t l, Random& rng) {
  LayerStats stats = CalibrationStats::empty_for(c, l).layers[l];
  for (int p = 0; p < kStatPointCount; ++p) {
    const auto point = static_cast<StatPoint>(p);
    const int64_t width = stat_point_width(c, point);
    const float range = point == StatPoint::kSsdState ? 0.5f : point == StatPoint::kSsdCb ? 20.f : 4.f;
    const std::vector<float> rows = uniform_vector(4 * width, -range, range, rng);
    stats.at(point).add_rows(rows.data(), 4, width, stat_point_name(point));
  }
  return stats;
}

}  // namespace

QuantizedModel synthetic_quantized_model(const Mamba2Config& c, const RecipeOptions& options, uint64_t seed) {
  validate_config(c, "synthetic model");
  RecipeOptions o = options.resolved(c.heads_per_group(), c.headdim);
  o.act_clip = ActClip{};  // the synthetic statistics are ranges, with nothing for a clipping search
  o.validate(c.n_layer, c.heads_per_group(), c.headdim);
  o.validate_tp_blocks(c.nheads(), c.d_inner());
  const int64_t D = c.d_model, E = c.d_inner(), V = c.vocab_size, H = c.nheads(), P = c.headdim;
  const QuantBits bits = o.weights_int4() ? QuantBits::kInt4 : QuantBits::kInt8;
  const int64_t group = o.weights_int4() ? o.group_size : 0;
  Random rng{seed};
  QuantizedModel m;
  m.config = c;
  const float sqrt3 = std::sqrt(3.0f);
  m.embedding = o.quantize_embedding ? random_quantized(V, D, bits, 0, 0.02f * sqrt3, seed + 1)
                                     : random_dense(V, D, 0.02f * sqrt3, seed + 1);
  if (o.quantize_lm_head) {
    m.lm_head = random_quantized(V, D, bits, o.group_size, 0.02f * sqrt3, seed + 2);
  } else if (o.quantize_embedding) {
    m.lm_head = random_dense(V, D, 0.02f * sqrt3, seed + 2);
  }
  m.config.tie_embeddings = m.lm_head.empty();
  m.norm_f = uniform_vector(D, 0.9f, 1.1f, rng);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    QuantizedLayer q;
    q.norm = uniform_vector(D, 0.9f, 1.1f, rng);
    q.conv_weight = uniform_vector(c.conv_dim() * c.d_conv, -0.3f * sqrt3, 0.3f * sqrt3, rng);
    q.conv_bias = uniform_vector(c.conv_dim(), -0.1f * sqrt3, 0.1f * sqrt3, rng);
    q.dt_bias = uniform_vector(H, -5.f, -3.f, rng);
    q.A = uniform_vector(H, -16.f, -1.f, rng);
    q.D = uniform_vector(H, 0.9f, 1.1f, rng);
    q.gated_norm = uniform_vector(E, 0.9f, 1.1f, rng);
    const uint64_t layer_seed = seed * 1000003 + 16 * l;
    const float in_range = sqrt3 / std::sqrt(float(D)), out_range = sqrt3 / std::sqrt(float(E));
    if (o.quantized()) {
      q.in_proj = random_quantized(c.d_in_proj(), D, bits, group, in_range, layer_seed + 3);
      q.out_proj = random_quantized(D, E, bits, group, out_range, layer_seed + 4);
      const LayerStats stats = synthetic_stats(c, l, rng);
      SortClusterResult clusters;
      if (o.recipe == RecipeName::kQuamba2) {
        SortClusterOptions so;
        so.head_clusters = *o.head_clusters;
        so.channel_clusters = *o.channel_clusters;
        clusters = sort_and_cluster(stats.at(StatPoint::kSsdX).absmax(), H, P, c.ngroups, so);
      }
      assign_activation_formats(q, stats, o, l, c, o.recipe == RecipeName::kQuamba2 ? &clusters : nullptr);
      q.online_hadamard = o.recipe != RecipeName::kRtn;
      q.hadamard_blocks = q.online_hadamard ? o.tp_blocks : 1;
      if (o.recipe == RecipeName::kSsdi8 && o.mean_correction_eta() > 0) q.out_bias = uniform_vector(D, -0.01f, 0.01f, rng);
    } else {
      q.in_proj = random_dense(c.d_in_proj(), D, in_range, layer_seed + 3);
      q.out_proj = random_dense(D, E, out_range, layer_seed + 4);
      for (ActQuant* a : {&q.in_proj_in, &q.conv_in, &q.ssd_x, &q.ssd_B, &q.ssd_C, &q.ssd_dt, &q.out_proj_in,
                          &q.ssm_state})
        *a = ActQuant::float16();
    }
    m.layers.push_back(std::move(q));
  }
  validate_quantized_model(m, "synthetic model");
  return m;
}

}  // namespace ssdq
