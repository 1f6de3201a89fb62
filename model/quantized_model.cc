#include "model/quantized_model.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "formats/dtype.h"
#include "formats/error.h"
#include "model/hadamard.h"

namespace ssdq {

std::vector<float> WeightMatrix::to_float() const {
  if (kind == Kind::kQuantized) return dequantize(quantized);
  return dense;
}

void WeightMatrix::row_to_float(int64_t r, float* out) const {
  if (kind != Kind::kQuantized) {
    std::copy_n(dense.data() + r * cols, cols, out);
    return;
  }
  for (int64_t c = 0; c < cols; ++c)
    out[c] = dequantize_value(quantized.values[r * cols + c], quantized.scales[quantized.scale_index(r, c)]);
}

namespace {

// Whether `ok` holds for every value, in blocks of a fixed count without an early exit (loops the
// compiler vectorises at -O2), then the tail: the engines of an export check a layer's 40 M
// weights each time one is made.
template <typename T, typename Ok>
bool all_of_blocks(const T* values, size_t n, Ok ok) {
  constexpr size_t kBlock = 64;
  bool all = true;
  size_t i = 0;
  for (; i + kBlock <= n && all; i += kBlock) {
    unsigned block = 1;
    for (size_t j = 0; j < kBlock; ++j) block &= ok(values[i + j]) ? 1u : 0u;
    all = block != 0;
  }
  for (; i < n && all; ++i) all = ok(values[i]);
  return all;
}

void check_vector(const std::vector<float>& v, int64_t size, const std::string& what) {
  if (static_cast<int64_t>(v.size()) != size) fail("{} has {} values, expected {}", what, v.size(), size);
  if (all_of_blocks(v.data(), v.size(), [](float value) {
        uint32_t bits;
        std::memcpy(&bits, &value, sizeof bits);
        return (bits & 0x7f800000u) != 0x7f800000u;
      }))
    return;
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) fail("{} has the non-finite value {} at {}", what, v[i], i);
}

void check_weight(const WeightMatrix& w, int64_t rows, int64_t cols, const std::string& what) {
  if (w.rows != rows || w.cols != cols) fail("{} is [{}, {}], expected [{}, {}]", what, w.rows, w.cols, rows, cols);
  if (w.kind != WeightMatrix::Kind::kQuantized) {
    check_vector(w.dense, rows * cols, what);
    return;
  }
  const QuantizedMatrix& q = w.quantized;
  if (q.rows != rows || q.cols != cols) fail("{}: quantized shape [{}, {}] differs", what, q.rows, q.cols);
  if (q.granularity == Granularity::kPerTensor) fail("{}: per-tensor weight scales are not used by ssdq", what);
  if (q.group_size <= 0 || q.group_size > cols) fail("{}: group size {} is outside 1..{}", what, q.group_size, cols);
  if (q.granularity == Granularity::kPerChannel && q.group_size != cols)
    fail("{}: per-channel scales with group size {} != {}", what, q.group_size, cols);
  if (static_cast<int64_t>(q.values.size()) != rows * cols) fail("{}: {} values, expected {}", what, q.values.size(), rows * cols);
  if (static_cast<int64_t>(q.scales.size()) != rows * q.groups_per_row())
    fail("{}: {} scales, expected {}", what, q.scales.size(), rows * q.groups_per_row());
  for (size_t i = 0; i < q.scales.size(); ++i)
    if (!(q.scales[i] > 0) || !std::isfinite(q.scales[i])) fail("{}: scale {} is {}, expected finite > 0", what, i, q.scales[i]);
  const int lo = quant_min(q.bits), hi = quant_max(q.bits);
  if (all_of_blocks(q.values.data(), q.values.size(), [lo, hi](int8_t value) { return value >= lo && value <= hi; })) return;
  for (size_t i = 0; i < q.values.size(); ++i)
    if (q.values[i] < lo || q.values[i] > hi) fail("{}: value {} at {} is outside [{}, {}]", what, q.values[i], i, lo, hi);
}

void check_act(const ActQuant& a, int64_t channels, int64_t inner, const std::string& what) {
  if (a.format != ActFormat::kInt8) {
    if (!a.scales.empty() || !a.index.empty()) fail("{}: a float point carries scales", what);
    return;
  }
  if (a.inner != 1 && a.inner != inner) fail("{}: inner size {} is neither 1 nor {}", what, a.inner, inner);
  if (a.scales.empty() || a.scales.size() % a.inner != 0) fail("{}: {} scales for inner size {}", what, a.scales.size(), a.inner);
  for (size_t i = 0; i < a.scales.size(); ++i)
    if (!(a.scales[i] > 0) || !std::isfinite(a.scales[i])) fail("{}: scale {} is {}, expected finite > 0", what, i, a.scales[i]);
  const int64_t groups = static_cast<int64_t>(a.scales.size()) / a.inner;
  if (a.index.empty()) {
    const int64_t expected = a.inner == 1 ? 1 : channels;
    if (groups != expected) fail("{}: {} scale groups without an index, expected {}", what, groups, expected);
    return;
  }
  if (static_cast<int64_t>(a.index.size()) != channels) fail("{}: index has {} entries, expected {}", what, a.index.size(), channels);
  for (int64_t c = 0; c < channels; ++c)
    if (a.index[c] < 0 || a.index[c] >= groups) fail("{}: index[{}] = {} is outside 0..{}", what, c, a.index[c], groups - 1);
}

// Every channel uses the scale of the first channel of its group of `group_width` channels.
void check_per_group(const ActQuant& a, int64_t channels, int64_t group_width, const std::string& what) {
  for (int64_t c = 0; c < channels; ++c)
    if (a.scale(c) != a.scale(c - c % group_width)) fail("{}: channel {} does not share its group's scale", what, c);
}

}  // namespace

void validate_quantized_model(const QuantizedModel& m, const std::string& label, int64_t head_rows) {
  const Mamba2Config& c = m.config;
  validate_config(c, label);
  const int64_t D = c.d_model, E = c.d_inner(), H = c.nheads(), P = c.headdim, G = c.ngroups, N = c.d_state;
  check_weight(m.embedding, c.vocab_size, D, label + ": embedding");
  check_vector(m.norm_f, D, label + ": norm_f");
  if (!m.lm_head.empty()) {
    check_weight(m.lm_head, head_rows > 0 ? head_rows : c.vocab_size, D, label + ": lm_head");
  } else if (m.embedding.is_quantized()) {
    fail("{}: a quantized embedding needs its own lm_head", label);
  }
  if (static_cast<int64_t>(m.layers.size()) != c.n_layer)
    fail("{}: {} layers, the config says {}", label, m.layers.size(), c.n_layer);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const QuantizedLayer& q = m.layers[l];
    const std::string at = label + ": layer " + std::to_string(l);
    check_vector(q.norm, D, at + " norm");
    check_weight(q.in_proj, c.d_in_proj(), D, at + " in_proj");
    check_vector(q.conv_weight, c.conv_dim() * c.d_conv, at + " conv weight");
    check_vector(q.conv_bias, c.conv_dim(), at + " conv bias");
    check_vector(q.dt_bias, H, at + " dt_bias");
    check_vector(q.A, H, at + " A");
    check_vector(q.D, H, at + " D");
    check_vector(q.gated_norm, E, at + " gated norm");
    check_weight(q.out_proj, D, E, at + " out_proj");
    if (!q.out_bias.empty()) check_vector(q.out_bias, D, at + " out_proj bias");
    if (q.hadamard_blocks < 1 || E % q.hadamard_blocks != 0)
      fail("{}: {} Hadamard blocks do not split the {} channels of out_proj's input", at, q.hadamard_blocks, E);
    if (!q.online_hadamard && q.hadamard_blocks != 1)
      fail("{}: Hadamard blocks ({}) without an online Hadamard transform", at, q.hadamard_blocks);
    if (q.online_hadamard && !hadamard_size_supported(E / q.hadamard_blocks))
      fail("{}: no Hadamard transform of size {} ({} channels in {} blocks)", at, E / q.hadamard_blocks, E,
           q.hadamard_blocks);
    check_act(q.in_proj_in, D, 1, at + " in_proj.in");
    check_act(q.conv_in, c.conv_dim(), 1, at + " conv.in");
    check_act(q.ssd_x, E, 1, at + " ssd.x");
    check_act(q.ssd_B, G * N, 1, at + " ssd.B");
    check_act(q.ssd_C, G * N, 1, at + " ssd.C");
    check_act(q.ssd_dt, H, 1, at + " ssd.dt");
    check_act(q.out_proj_in, E, 1, at + " out_proj.in");
    check_act(q.ssm_state, H * P, N, at + " ssd.state");
    check_act(q.x_scaled, E, 1, at + " ssd.x_scaled");
    check_act(q.cb, G, 1, at + " ssd.cb");
    for (const auto* gemm : {&q.in_proj_in, &q.out_proj_in})
      if (gemm->is_int8() && !gemm->per_tensor()) fail("{}: an integer GEMM input must have one scale", at);
    if (q.ssd_mode == SsdMode::kSsdi8) {
      // Operands left in float (ablations) run the simulated path; int8 ones must fit the integer path.
      if (q.ssd_B.is_int8()) check_per_group(q.ssd_B, G * N, N, at + " ssd.B");
      if (q.ssd_C.is_int8()) check_per_group(q.ssd_C, G * N, N, at + " ssd.C");
      if (q.ssm_state.is_int8() && q.ssm_state.inner != 1)
        fail("{}: the SSDi8 state has one scale per (h, p), not per n", at);
    } else if (q.x_scaled.is_int8() || q.cb.is_int8()) {
      fail("{}: X_scaled and CB scales belong to the SSDi8 path only", at);
    }
  }
}

QuantizedLayer float_quantized_layer(const LayerWeights& w) { return float_quantized_layer(LayerWeights(w)); }

QuantizedLayer float_quantized_layer(LayerWeights&& w) {
  QuantizedLayer q;
  q.in_proj.rows = static_cast<int64_t>(w.in_proj.size() / w.norm.size());
  q.in_proj.cols = static_cast<int64_t>(w.norm.size());
  q.out_proj.rows = static_cast<int64_t>(w.norm.size());
  q.out_proj.cols = static_cast<int64_t>(w.gated_norm.size());
  q.norm = std::move(w.norm);
  q.in_proj.dense = std::move(w.in_proj);
  q.conv_weight = std::move(w.conv_weight);
  q.conv_bias = std::move(w.conv_bias);
  q.dt_bias = std::move(w.dt_bias);
  q.A = std::move(w.A);
  q.D = std::move(w.D);
  q.gated_norm = std::move(w.gated_norm);
  q.out_proj.dense = std::move(w.out_proj);
  return q;
}

QuantizedModel float_quantized_model(const ModelWeights& w, const ParallelFor& parallel) {
  return float_quantized_model(copy_weights(w, parallel));
}

QuantizedModel float_quantized_model(ModelWeights&& w) {
  QuantizedModel q;
  q.config = w.config;
  const int64_t V = w.config.vocab_size, D = w.config.d_model;
  q.embedding.rows = V;
  q.embedding.cols = D;
  q.embedding.dense = std::move(w.embedding);
  q.norm_f = std::move(w.norm_f);
  if (!w.lm_head.empty()) {
    q.lm_head.rows = V;
    q.lm_head.cols = D;
    q.lm_head.dense = std::move(w.lm_head);
  }
  for (LayerWeights& layer : w.layers) q.layers.push_back(float_quantized_layer(std::move(layer)));
  return q;
}

}  // namespace ssdq
