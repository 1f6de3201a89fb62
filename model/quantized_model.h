// A quantized Mamba-2 model as the quantized runtime executes it and the .ssdq artifact stores it:
// every weight in its stored representation and, at every activation point of docs/QUANTIZATION.md ("Quantization points"), how
// the values are represented between ops. A layer whose formats are all fp32 computes the FP
// FP block (runtime/cpu_block.h) (export runs such layers to measure activations).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/config.h"
#include "model/quantizer.h"
#include "model/model_weights.h"

namespace ssdq {

// How the values at one activation point are held between ops.
//   kFloat32: as computed.
//   kFloat16: rounded to the nearest fp16 (ties to even), then used as fp32.
//   kInt8:    q = quantize_value(x, scale, int8) (quantizer.h: rne, clamp to ±127); the next op
//             takes q (an integer GEMM) or q·scale (every other op).
enum class ActFormat : uint8_t { kFloat32, kFloat16, kInt8 };

// Static int8 scales over the channels of a point. Channel c uses scales[index[c]]; an empty index
// means one scale for every channel (per tensor). With inner > 1 (the SSM state, whose elements
// are (c = h·P + p, n)), element (c, n) uses scales[index[c]·inner + n], and an empty index means
// index[c] = c. Every granularity of docs/QUANTIZATION.md ("Recipes") is one such map: per tensor, per segment
// (conv.in: x | B | C), per group g (B, C), per cluster (Quamba2's x), per (h, p) (X_scaled,
// SSDi8's state), per (head cluster, channel cluster, n) (Quamba2's cached state).
struct ActQuant {
  ActFormat format = ActFormat::kFloat32;
  std::vector<float> scales;
  std::vector<int32_t> index;
  int64_t inner = 1;

  static ActQuant float32() { return {}; }
  static ActQuant float16() { return {ActFormat::kFloat16, {}, {}, 1}; }
  bool is_int8() const { return format == ActFormat::kInt8; }
  bool per_tensor() const { return index.empty() && inner == 1; }
  float scale(int64_t channel, int64_t n = 0) const {
    const int64_t group = index.empty() ? (inner == 1 ? 0 : channel) : index[channel];
    return scales[group * inner + n];
  }
};

// A weight matrix [rows, cols] (rows = output channels) in one of three representations.
struct WeightMatrix {
  int64_t rows = 0, cols = 0;
  enum class Kind : uint8_t { kFloat32, kFloat16, kQuantized } kind = Kind::kFloat32;
  std::vector<float> dense;     // kFloat32 / kFloat16: [rows, cols] (kFloat16: values already fp16-exact)
  QuantizedMatrix quantized;    // kQuantized: int8 per channel, int4 per group, or per row (embedding)

  bool empty() const { return rows == 0; }
  bool is_quantized() const { return kind == Kind::kQuantized; }
  // The weights as fp32 (dequantized when quantized).
  std::vector<float> to_float() const;
  // Row r as fp32 into out[cols].
  void row_to_float(int64_t r, float* out) const;
};

// The SSD computation of a layer.
//   kFloat: cpu::ssd_chunked / ssd_step in fp32 on the inputs as their points represent them.
//   kSsdi8: the integer SSD of runtime/quantized_ssd.h (needs int8 B and C per group, X_scaled
//           per (h, p), an int8 state per (h, p) and CB per group).
enum class SsdMode : uint8_t { kFloat, kSsdi8 };

struct QuantizedLayer {
  std::vector<float> norm;         // [D] block-norm weight (all ones when fused into in_proj)
  WeightMatrix in_proj;            // [d_in_proj, D], rows z | x | B | C | dt
  std::vector<float> conv_weight;  // [conv_dim, K]
  std::vector<float> conv_bias;    // [conv_dim]
  std::vector<float> dt_bias;      // [H]
  std::vector<float> A;            // [H], A = -exp(A_log)
  std::vector<float> D;            // [H]
  std::vector<float> gated_norm;   // [E]
  bool online_hadamard = false;    // out_proj.in ← y·H_E/√E (hadamard.h) before quantization
  // With online_hadamard: the rotation is block-diagonal, I_B ⊗ H_{E/B} (each of B contiguous
  // blocks of E/B channels rotated alone, normalised by 1/√(E/B)), so that tensor-parallel ranks
  // holding whole blocks rotate their channels alone (export --tp-blocks B). 1: the full H_E.
  int64_t hadamard_blocks = 1;
  WeightMatrix out_proj;           // [D, E]
  std::vector<float> out_bias;     // [D] SSDi8 mean correction added to out_proj.out, or empty

  SsdMode ssd_mode = SsdMode::kFloat;
  ActQuant in_proj_in;   // [D], per tensor when int8 (integer GEMM)
  ActQuant conv_in;      // [E + 2GN]
  ActQuant ssd_x;        // [H·P]
  ActQuant ssd_B;        // [G·N]
  ActQuant ssd_C;        // [G·N]
  ActQuant ssd_dt;       // [H], dt before dt_bias and softplus
  ActQuant out_proj_in;  // [E], per tensor when int8 (integer GEMM)
  ActQuant ssm_state;    // [H·P, N]: the state kept between forward calls (the decode state)
  ActQuant x_scaled;     // kSsdi8: [H·P]
  ActQuant cb;           // kSsdi8: [G]
};

struct QuantizedModel {
  Mamba2Config config;
  WeightMatrix embedding;     // [V, D]; quantized per row when head-to-toe quantized
  std::vector<float> norm_f;  // [D]
  WeightMatrix lm_head;       // [V, D]; empty: tied to the embedding (then the embedding is float)
  std::vector<QuantizedLayer> layers;

  const WeightMatrix& head() const { return lm_head.empty() ? embedding : lm_head; }
};

// Checks every shape, index range and scale (finite, > 0) against the config, and that each
// layer's formats are ones the runtime executes (integer GEMMs need per-tensor int8 inputs;
// kSsdi8 needs its scales). `label` prefixes errors (the artifact path). `head_rows`: the rows of
// lm_head when it is a vocab-parallel rank's slice (0: the vocabulary).
void validate_quantized_model(const QuantizedModel& model, const std::string& label, int64_t head_rows = 0);

// The FP32 model as a QuantizedModel with every format fp32 (runs as the FP reference), from a
// copy made over `parallel` (copy_weights), or with the model's tensors moved in.
QuantizedModel float_quantized_model(const ModelWeights& weights, const ParallelFor& parallel = {});
QuantizedModel float_quantized_model(ModelWeights&& weights);
QuantizedLayer float_quantized_layer(const LayerWeights& layer);
QuantizedLayer float_quantized_layer(LayerWeights&& layer);  // the same, the layer's tensors moved in

// fp16 rounding (ties to even) of one value, as the kFloat16 format applies it: the fp32 value of
// half_to_float(float_to_half(value)) (dtype.h), computed on the bits (tested to agree).
inline float round_to_fp16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  const uint32_t sign = word & 0x80000000u, magnitude = word & 0x7fffffffu;
  uint32_t out;
  if (magnitude >= 0x7f800000u) return value;       // inf, NaN
  if (magnitude >= 0x477ff000u) {                   // 65520 and above round to inf
    out = sign | 0x7f800000u;
  } else if (magnitude >= 0x38800000u) {            // fp16 normal: keep 10 mantissa bits, ties to even
    out = sign | ((magnitude + 0xfffu + ((magnitude >> 13) & 1u)) & 0xffffe000u);
  } else {                                          // fp16 subnormal or zero: multiples of 2^-24
    float abs_value;
    std::memcpy(&abs_value, &magnitude, sizeof abs_value);
    const float rounded = std::nearbyint(abs_value * 16777216.0f) * (1.0f / 16777216.0f);
    std::memcpy(&out, &rounded, sizeof out);
    out |= sign;
  }
  float result;
  std::memcpy(&result, &out, sizeof result);
  return result;
}

}  // namespace ssdq
