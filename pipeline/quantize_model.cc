#include "pipeline/quantize_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>

#include "pipeline/calibrate.h"
#include "calib/input_gram.h"
#include "runtime/parallel.h"
#include "formats/error.h"
#include "quant/activation_clipping.h"
#include "quant/activation_scales.h"
#include "model/hadamard.h"
#include "quant/mean_correction.h"
#include "quant/sort_cluster.h"
#include "quant/transforms.h"
#include "quant/weight_formats.h"

namespace ssdq {
namespace {

void check_same_shape(const Mamba2Config& model, const Mamba2Config& calib) {
  auto differs = [](int64_t a, int64_t b) { return a != b; };
  if (differs(model.d_model, calib.d_model) || differs(model.n_layer, calib.n_layer) ||
      differs(model.vocab_size, calib.vocab_size) || differs(model.d_state, calib.d_state) ||
      differs(model.headdim, calib.headdim) || differs(model.ngroups, calib.ngroups) ||
      differs(model.expand, calib.expand) || differs(model.d_conv, calib.d_conv) ||
      differs(model.chunk_size, calib.chunk_size))
    fail("the calibration file was made for a different model ({}) than this one ({})", calib.summary(),
         model.summary());
}

// *hessian is consumed (GPTQ works in its storage).
WeightMatrix quantize_projection(const std::vector<float>& w, int64_t rows, int64_t cols, const RecipeOptions& o,
                                 std::vector<double>* hessian, const ExportOptions& export_options) {
  if (o.keeps_float("weights")) return float16_weight(w, rows, cols);
  const QuantBits bits = o.weights_int4() ? QuantBits::kInt4 : QuantBits::kInt8;
  const int64_t group_size = o.weights_int4() ? o.group_size : 0;
  if (!hessian) return rtn_weight(w, rows, cols, bits, group_size);
  GptqOptions g;
  g.bits = bits;
  g.group_size = group_size;
  g.damp_percent = o.damp;
  g.act_order = o.act_order;
  g.static_groups = o.act_order;
  g.parallel_for = parallel_for;  // rows and U's columns over the cores (quant/gptq.h)
  g.factored_row_pass = export_options.gptq_factored_row_pass;
  return gptq_weight(w, rows, cols, std::move(*hessian), g);
}

std::vector<float> clipped(std::vector<float> absmax, double clip) {
  for (float& v : absmax) v = static_cast<float>(v * clip);
  return absmax;
}

std::vector<float> histogram_edges() {
  std::vector<float> edges(ChannelStats::kHistogramBins + 1);
  for (int64_t b = 0; b <= ChannelStats::kHistogramBins; ++b)
    edges[b] = b < ChannelStats::kHistogramBins ? ChannelStats::histogram_edge(b) : std::numeric_limits<float>::max();
  return edges;
}

// Per-channel maxima for the scale builders of quant/activation_scales.h after clipping: channel c
// of set set_of_channel[c] (every channel in set 0 when empty) becomes min(absmax_c, clip of its
// set), so the maximum over a set is its clip. A point calibrated without clipping data (an
// older statistics file) can only use absmax.
std::vector<float> clipped_maxima(const ChannelStats& stats, const std::vector<int32_t>& set_of_channel, int64_t sets,
                                  const ActClip& clip, const char* point) {
  std::vector<float> maxima = stats.absmax();
  if (clip.mode == ActClip::Mode::kAbsmax) return maxima;
  const int64_t channels = stats.channels();
  const auto set = [&](int64_t c) { return set_of_channel.empty() ? 0 : set_of_channel[c]; };
  std::vector<float> set_absmax(sets, 0.0f);
  std::vector<int64_t> set_channels(sets, 0);
  for (int64_t c = 0; c < channels; ++c) {
    set_absmax[set(c)] = std::max(set_absmax[set(c)], maxima[c]);
    ++set_channels[set(c)];
  }
  std::vector<double> set_clip(sets);
  if (sets == 1 && stats.tracks_histogram()) {
    static const std::vector<float> edges = histogram_edges();
    set_clip[0] = clip_from_histogram(stats.histogram(), edges, set_absmax[0], clip);
  } else if (stats.tracks_top_values()) {
    std::vector<std::vector<float>> values(sets);
    std::vector<double> floor(sets, 0.0);
    for (int64_t c = 0; c < channels; ++c) {
      const std::vector<float> top = stats.top_values(c);
      values[set(c)].insert(values[set(c)].end(), top.begin(), top.end());
      floor[set(c)] = std::max<double>(floor[set(c)], top.back());
    }
    for (int64_t k = 0; k < sets; ++k)
      set_clip[k] = clip_from_top_values(std::move(values[k]), stats.rows() * set_channels[k], floor[k], set_absmax[k],
                                         clip);
  } else {
    fail("--act-clip {}: the statistics file has no clipping data for {} (written by an older ssdq); run ssdq "
         "calibrate again",
         clip.name(), point);
  }
  for (int64_t c = 0; c < channels; ++c) maxima[c] = std::min<float>(maxima[c], static_cast<float>(set_clip[set(c)]));
  return maxima;
}

std::vector<int32_t> consecutive_sets(int64_t channels, int64_t width) {
  std::vector<int32_t> out(channels);
  for (int64_t c = 0; c < channels; ++c) out[c] = static_cast<int32_t>(c / width);
  return out;
}

}  // namespace

void use_fp16_activations(QuantizedLayer& q) {
  q.ssd_mode = SsdMode::kFloat;
  q.x_scaled = q.cb = ActQuant::float32();
  for (ActQuant* a : {&q.in_proj_in, &q.conv_in, &q.ssd_x, &q.ssd_B, &q.ssd_C, &q.ssd_dt, &q.out_proj_in, &q.ssm_state})
    *a = ActQuant::float16();
}

// The activation formats of layer `l` from its statistics (the calibration file's for rtn, pass
// A's otherwise); `clusters` is quamba2's sort-and-cluster result for the layer.
void assign_activation_formats(QuantizedLayer& q, const LayerStats& s, const RecipeOptions& o, int64_t l,
                               const Mamba2Config& c, const SortClusterResult* clusters) {
  const int64_t E = c.d_inner(), GN = c.ngroups * c.d_state, N = c.d_state;
  const ActQuant fp16 = ActQuant::float16();
  auto absmax = [&](StatPoint p) { return s.at(p).absmax(); };
  // Maxima after --act-clip for one scale per tensor, per `width` consecutive channels, per channel,
  // or per set of a map.
  auto tensor_max = [&](StatPoint p) { return clipped_maxima(s.at(p), {}, 1, o.act_clip, stat_point_name(p)); };
  auto map_max = [&](StatPoint p, const std::vector<int32_t>& map, int64_t sets) {
    return clipped_maxima(s.at(p), map, sets, o.act_clip, stat_point_name(p));
  };
  auto width_max = [&](StatPoint p, int64_t width) {
    const int64_t channels = s.at(p).channels();
    return map_max(p, consecutive_sets(channels, width), (channels + width - 1) / width);
  };
  if (!o.int8_activations(l)) {
    use_fp16_activations(q);
    return;
  }
  q.ssd_mode = SsdMode::kFloat;
  q.x_scaled = q.cb = ActQuant::float32();
  q.in_proj_in = int8_per_tensor(tensor_max(StatPoint::kInProjIn));
  {
    std::vector<int32_t> segment(E + 2 * GN, 0);
    std::fill(segment.begin() + E, segment.begin() + E + GN, 1);
    std::fill(segment.begin() + E + GN, segment.end(), 2);
    q.conv_in = int8_per_segment(map_max(StatPoint::kConvIn, segment, 3), {E, GN, GN});
  }
  q.out_proj_in = int8_per_tensor(tensor_max(StatPoint::kOutProjIn));
  switch (o.recipe) {
    case RecipeName::kRtn:
    case RecipeName::kHad:
      q.ssd_x = int8_per_tensor(tensor_max(StatPoint::kSsdX));
      q.ssd_B = int8_per_tensor(tensor_max(StatPoint::kSsdB));
      q.ssd_C = int8_per_tensor(tensor_max(StatPoint::kSsdC));
      q.ssd_dt = int8_per_tensor(tensor_max(StatPoint::kSsdDt));
      q.ssm_state = fp16;
      break;
    case RecipeName::kQuamba2: {
      const std::vector<int32_t>& map = clusters->cluster_of_channel;
      const int64_t count = static_cast<int64_t>(clusters->scales.size());
      q.ssd_x = int8_per_cluster(map_max(StatPoint::kSsdX, map, count), map, count);
      q.ssd_B = int8_per_group(width_max(StatPoint::kSsdB, N), N);
      q.ssd_C = int8_per_group(width_max(StatPoint::kSsdC, N), N);
      q.ssd_dt = int8_per_tensor(tensor_max(StatPoint::kSsdDt));
      q.ssm_state = int8_state_per_cluster(absmax(StatPoint::kSsdState), map, count, N);
      break;
    }
    case RecipeName::kSsdi8:
      q.ssd_mode = SsdMode::kSsdi8;
      q.ssd_x = fp16;
      q.ssd_dt = fp16;
      q.ssd_B = int8_per_group(width_max(StatPoint::kSsdB, N), N);
      q.ssd_C = int8_per_group(width_max(StatPoint::kSsdC, N), N);
      q.x_scaled = int8_per_channel(clipped(width_max(StatPoint::kSsdXScaled, 1), o.x_scaled_clip));
      q.ssm_state = int8_state_per_channel(absmax(StatPoint::kSsdState), E, N);
      q.cb = int8_per_channel(width_max(StatPoint::kSsdCb, 1));
      break;
  }
  // Ablations: points left in fp16 (SSDi8 operands left in float run ssdi8_chunked_simulated).
  const std::pair<const char*, ActQuant*> points[] = {
      {"in_proj.in", &q.in_proj_in}, {"conv.in", &q.conv_in},     {"ssd.x", &q.ssd_x},
      {"ssd.B", &q.ssd_B},           {"ssd.C", &q.ssd_C},         {"ssd.dt", &q.ssd_dt},
      {"ssd.state", &q.ssm_state},   {"ssd.x_scaled", &q.x_scaled}, {"ssd.cb", &q.cb},
      {"out_proj.in", &q.out_proj_in}};
  for (const auto& [name, act] : points)
    if (o.keeps_float(name)) *act = (act == &q.x_scaled || act == &q.cb) ? ActQuant::float32() : fp16;
}

QuantizedModel quantize_model(const ModelWeights& fp, const CalibrationFile& calib, const ExportOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  ModelWeights copy = copy_weights(fp, parallel_for);
  if (options.times)
    options.times->prepare += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return quantize_model(std::move(copy), calib, options);
}

QuantizedModel quantize_model(ModelWeights&& fp, const CalibrationFile& calib, const ExportOptions& options) {
  const Mamba2Config c = fp.config;
  const RecipeOptions o = options.recipe.resolved(c.heads_per_group(), c.headdim);
  if (o.auto_w4a16_layers != 0)
    fail("internal: --w4a16-layers auto:K is resolved by choose_w4a16_layers before quantize_model");
  check_same_shape(c, calib.config);
  o.validate(c.n_layer, c.heads_per_group(), c.headdim);
  o.validate_tp_blocks(c.nheads(), c.d_inner());
  const int64_t D = c.d_model, E = c.d_inner(), V = c.vocab_size, H = c.nheads(), P = c.headdim;
  const int64_t in_dim = c.d_in_proj(), L = c.n_layer, T = calib.provenance.seqlen;
  const int64_t S = options.max_samples > 0 ? std::min(options.max_samples, calib.provenance.samples)
                                            : calib.provenance.samples;

  // Where the time goes, for the command's summary.
  auto timed = [&options](double ExportTimes::*part, const std::function<void()>& work) {
    const auto start = std::chrono::steady_clock::now();
    work();
    if (options.times)
      options.times->*part += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const std::vector<int32_t> tokens(calib.tokens.begin(), calib.tokens.begin() + S * T);
  const bool internals = o.recipe == RecipeName::kQuamba2 || o.recipe == RecipeName::kSsdi8;
  const double eta = o.mean_correction_eta();
  // μ_fp over the same samples as μ_q: the calibration file's means cover all of its samples, so a
  // subset (--calib-samples) gets its own FP forward.
  std::vector<std::vector<float>> fp_means(L);
  if (eta > 0) {
    const bool subset = S < calib.provenance.samples;
    CalibrationStats subset_stats;
    if (subset) {
      CollectOptions collect;
      collect.ssd_internals = false;
      subset_stats =
          (options.collect ? options.collect : collect_statistics)(copy_weights(fp, parallel_for), tokens, S, T, collect);
    }
    for (int64_t l = 0; l < L; ++l)
      fp_means[l] = (subset ? subset_stats : calib.stats).layers[l].at(StatPoint::kOutProjOut).mean();
  }

  // Function-preserving transforms (docs/QUANTIZATION.md, "Recipes"), in the export's own model.
  const auto prepare_start = std::chrono::steady_clock::now();
  ModelWeights w = std::move(fp);
  std::vector<SortClusterResult> clusters(L);
  std::vector<float> signs;
  if (o.uses_transforms()) {
    fuse_norm_weights(w, parallel_for);
    if (o.rotation_seed) signs = random_signs(D, *o.rotation_seed);
    rotate_residual(w, signs, parallel_for);
    // Reordering permutes out_proj's columns, so it comes before the Hadamard is fused into them.
    if (o.recipe == RecipeName::kQuamba2)
      parallel_for(L, [&](int64_t l) {  // layers are independent
        SortClusterOptions so;
        so.head_clusters = *o.head_clusters;
        so.channel_clusters = *o.channel_clusters;
        clusters[l] = sort_and_cluster(calib.stats.layers[l].at(StatPoint::kSsdX).absmax(), H, P, c.ngroups, so);
        reorder_heads(w.layers[l], c, clusters[l].permutation);
      });
    fuse_out_proj_hadamard(w, o.tp_blocks, parallel_for);
  }

  QuantizedModel m;
  m.config = w.config;
  m.norm_f = w.norm_f;
  const QuantBits weight_bits = o.weights_int4() ? QuantBits::kInt4 : QuantBits::kInt8;
  m.embedding = o.quantize_embedding ? rtn_weight(w.embedding, V, D, weight_bits, 0)
                                     : float16_weight(w.embedding, V, D, parallel_for);
  if (o.quantize_lm_head) {
    m.lm_head = rtn_weight(w.head(), V, D, weight_bits, o.group_size);
  } else if (o.quantize_embedding || !w.lm_head.empty()) {
    m.lm_head = float16_weight(w.head(), V, D, parallel_for);
  }
  m.config.tie_embeddings = m.lm_head.empty();

  if (!o.quantized() || o.recipe == RecipeName::kRtn) {
    for (int64_t l = 0; l < L; ++l) {
      QuantizedLayer q = float_quantized_layer(w.layers[l]);
      if (o.quantized()) {
        q.in_proj = quantize_projection(w.layers[l].in_proj, in_dim, D, o, nullptr, options);
        q.out_proj = quantize_projection(w.layers[l].out_proj, D, E, o, nullptr, options);
        assign_activation_formats(q, calib.stats.layers[l], o, l, c, nullptr);
      } else {
        q.in_proj = float16_weight(w.layers[l].in_proj, in_dim, D);
        q.out_proj = float16_weight(w.layers[l].out_proj, D, E);
        for (ActQuant* a : {&q.in_proj_in, &q.conv_in, &q.ssd_x, &q.ssd_B, &q.ssd_C, &q.ssd_dt, &q.out_proj_in,
                            &q.ssm_state})
          *a = ActQuant::float16();
      }
      m.layers.push_back(std::move(q));
    }
    validate_quantized_model(m, "export");
    return m;
  }

  // Sequential passes over the calibration samples' residual streams, each entering the current layer.
  if (options.times)
    options.times->prepare += std::chrono::duration<double>(std::chrono::steady_clock::now() - prepare_start).count();
  std::unique_ptr<LayerPasses> passes;
  timed(&ExportTimes::streams, [&] {
    passes = (options.layer_passes ? options.layer_passes : cpu_layer_passes)(c, m.embedding, tokens, S, T,
                                                                              options.on_progress);
  });
  if (static_cast<int64_t>(options.done_layers.size()) >= L)
    fail("internal: resuming an export with {} of {} layers done", options.done_layers.size(), L);
  for (int64_t l = 0; l < L; ++l) {
    const std::string layer_name = fmt::format("layer {}/{}", l + 1, L);
    if (l < static_cast<int64_t>(options.done_layers.size())) {
      // A layer an interrupted export finished: the samples advance through it as pass C advanced
      // them (the block without the mean-correction bias, then the bias added to the streams).
      const QuantizedLayer& done = options.done_layers[l];
      QuantizedLayer unbiased = done;
      unbiased.out_bias.clear();
      timed(&ExportTimes::advance, [&] { passes->advance(layer_name + " (resumed) forward", l, unbiased, nullptr); });
      passes->add_bias(done.out_bias);
      m.layers.push_back(done);
      continue;
    }
    // The layer's fp32 tensors move into q (w is this export's own copy): its projections are
    // quantized from q's fp32 values, which pass A (in_proj, out_proj) and pass B (out_proj) run.
    QuantizedLayer q = float_quantized_layer(std::move(w.layers[l]));
    q.online_hadamard = true;
    q.hadamard_blocks = o.tp_blocks;

    // Pass A: activation maxima of the fp32 layer (and the in_proj Hessian).
    CalibrationStats stats = CalibrationStats::empty_for(c, l);
    InputGram in_gram(D);
    timed(&ExportTimes::observe, [&] {
      passes->observe_layer(layer_name + " activations", l, q, internals, stats, o.uses_gptq() ? &in_gram : nullptr);
    });
    assign_activation_formats(q, stats.layers[l], o, l, c, o.recipe == RecipeName::kQuamba2 ? &clusters[l] : nullptr);
    std::vector<double> hessian;
    if (o.uses_gptq()) timed(&ExportTimes::hessians, [&] { hessian = std::move(in_gram).hessian(parallel_for); });
    timed(&ExportTimes::weights, [&] {
      q.in_proj = quantize_projection(q.in_proj.dense, in_dim, D, o, o.uses_gptq() ? &hessian : nullptr, options);
    });

    // Pass B: the out_proj input Hessian through the quantized in_proj and activations.
    if (o.uses_gptq()) {
      InputGram out_gram(E);
      timed(&ExportTimes::out_proj_gram,
            [&] { passes->observe_out_proj_input(layer_name + " out_proj Hessian", l, q, out_gram); });
      timed(&ExportTimes::hessians, [&] { hessian = std::move(out_gram).hessian(parallel_for); });
    }
    timed(&ExportTimes::weights, [&] {
      q.out_proj = quantize_projection(q.out_proj.dense, D, E, o, o.uses_gptq() ? &hessian : nullptr, options);
    });

    // Pass C: advance the streams through the quantized layer; mean correction.
    if (l + 1 < L || eta > 0) {
      ChannelStats output(D, true);
      timed(&ExportTimes::advance,
            [&] { passes->advance(layer_name + " quantized forward", l, q, eta > 0 ? &output : nullptr); });
      if (eta > 0) {
        // μ_fp in the rotated basis: the FP block output o becomes o·Q with Q = diag(signs)·H/√D.
        std::vector<float> fp_mean = fp_means[l];
        if (!signs.empty())
          for (int64_t i = 0; i < D; ++i) fp_mean[i] *= signs[i];
        apply_hadamard_rows(fp_mean.data(), 1, D, /*normalized=*/true);
        q.out_bias = mean_correction(fp_mean, output.mean(), eta);
        passes->add_bias(q.out_bias);
      }
    }
    m.layers.push_back(std::move(q));
    if (options.on_layer_done) options.on_layer_done(m);
  }
  if (options.times) options.times->pass_setup += passes->setup_seconds();
  validate_quantized_model(m, "export");
  return m;
}

}  // namespace ssdq
