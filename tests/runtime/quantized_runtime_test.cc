// The quantized CPU runtime: exact integer GEMMs and the projection epilogues, activation
// formats and their error bounds, the all-fp32 quantized model against the FP backend, the
// function-preserving transforms on the bundled model (logits within 1e-5), the SSDi8 integer
// SSD against a literal transcription of its specification, and decode against prefill.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "pipeline/stats_observer.h"
#include "pipeline/ssd_internals.h"
#include "formats/dtype.h"
#include "quant/activation_scales.h"
#include "model/hadamard.h"
#include "quant/sort_cluster.h"
#include "quant/transforms.h"
#include "quant/weight_formats.h"
#include "runtime/cpu_backend.h"
#include "runtime/cpu_backend.h"
#include "runtime/quantized_ops.h"
#include "runtime/quantized_ssd.h"
#include "tests/support/test_models.h"

namespace ssdq {
namespace {

using namespace testing_models;

std::vector<int8_t> random_int8(int64_t count, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int8_t> out(count);
  for (auto& v : out) v = static_cast<int8_t>(dist(rng));
  return out;
}

TEST(IntegerGemm, IsExactAcrossBlocksAndAtTheExtremes) {
  const int64_t m = 3, k = 3000, n = 4;  // k crosses the 1024-column fp32 blocks
  std::vector<int8_t> a = random_int8(m * k, -127, 127, 1), b = random_int8(n * k, -127, 127, 2);
  std::fill(a.begin(), a.begin() + k, 127);  // row 0 · row 0 = 127²·k, the largest magnitude
  std::fill(b.begin(), b.begin() + k, 127);
  std::vector<int32_t> c(m * n);
  gemm_s8s8_s32(a.data(), k, b.data(), k, c.data(), m, k, n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t expected = 0;
      for (int64_t x = 0; x < k; ++x) expected += int64_t{a[i * k + x]} * b[j * k + x];
      EXPECT_EQ(c[i * n + j], expected) << i << "," << j;
    }
  EXPECT_EQ(c[0], 127 * 127 * k);
}

TEST(LinearForward, IntegerPathFollowsItsEpilogue) {
  const int64_t rows = 5, K = 300, Nout = 7;  // int4 groups of 128, 128 and 44
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> w(Nout * K), x(rows * K);
  for (float& v : w) v = normal(rng);
  for (float& v : x) v = normal(rng);
  ActQuant input = int8_per_tensor({3.0f});
  apply_activation_format(input, x.data(), rows, K, K);
  const float s_x = input.scales[0];
  for (const bool int4 : {false, true}) {
    const WeightMatrix wq = rtn_weight(w, Nout, K, int4 ? QuantBits::kInt4 : QuantBits::kInt8, int4 ? 128 : 0);
    std::vector<float> y(rows * Nout);
    linear_forward(wq, input, x.data(), rows, y.data());
    const QuantizedMatrix& q = wq.quantized;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < Nout; ++o) {
        float sum = 0;
        for (int64_t g = 0; g < q.groups_per_row(); ++g) {
          int32_t acc = 0;
          for (int64_t k = g * q.group_size; k < std::min(K, (g + 1) * q.group_size); ++k)
            acc += quantize_value(x[r * K + k], s_x, QuantBits::kInt8) * q.values[o * K + k];
          // One rounding a group, as the epilogue does (an explicit fma: `sum += a * b` is one
          // or two roundings depending on the compiler's contraction at each -O level).
          sum = std::fma(static_cast<float>(acc), q.scales[o * q.groups_per_row() + g], sum);
        }
        EXPECT_EQ(y[r * Nout + o], sum * s_x) << (int4 ? "int4 " : "int8 ") << r << "," << o;
      }
  }
}

TEST(ActivationFormats, Int8IntegersComeBackExactlyAndErrorsAreBounded) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> log_scale(-20.0f, 10.0f);
  for (int trial = 0; trial < 2000; ++trial) {
    const float s = std::exp(log_scale(rng));
    for (int q = -127; q <= 127; ++q)
      ASSERT_EQ(quantize_value(dequantize_value(static_cast<int8_t>(q), s), s, QuantBits::kInt8), q) << s;
  }
  const ActQuant format = int8_per_segment({1, 2, 3, 4}, {1, 3});  // scales 1/127 and 4/127
  std::vector<float> x = {0.7f, -1.9f, 10.0f, 0.013f};
  const std::vector<float> original = x;
  apply_activation_format(format, x.data(), 1, 4, 4);
  EXPECT_LE(std::abs(x[0] - original[0]), 0.5f / 127 * 1.0001f);
  EXPECT_LE(std::abs(x[1] - original[1]), 2.0f / 127 * 1.0001f);
  EXPECT_FLOAT_EQ(x[2], 127 * (4.0f / 127));  // clamped at the segment's absmax
  EXPECT_LE(std::abs(x[3] - original[3]), 2.0f / 127);
  std::vector<float> h = {1.0f / 3, 70000.0f};
  apply_activation_format(ActQuant::float16(), h.data(), 1, 2, 2);
  EXPECT_EQ(h[0], half_to_float(float_to_half(1.0f / 3)));
  EXPECT_TRUE(std::isinf(h[1]));  // beyond fp16's range, as fp16 storage would give
}

TEST(ActivationFormats, Fp16RoundingAgreesWithTheDtypeConversions) {
  // Every 31st float bit pattern (all exponents, signs and mantissa residues), and the edges.
  auto check = [](uint32_t bits) {
    float value;
    std::memcpy(&value, &bits, sizeof value);
    const float expected = half_to_float(float_to_half(value));
    const float got = round_to_fp16(value);
    if (std::isnan(expected)) return std::isnan(got);
    return std::memcmp(&expected, &got, sizeof got) == 0;
  };
  int64_t mismatches = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 31) mismatches += !check(static_cast<uint32_t>(bits));
  for (float edge : {65504.0f, 65519.99f, 65520.0f, 6.1035156e-05f, 6.1035152e-05f, 5.9604645e-08f, 2.9802322e-08f,
                     2.9802326e-08f, 0.0f, -0.0f})
    for (float v : {edge, -edge}) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      mismatches += !check(bits);
    }
  EXPECT_EQ(mismatches, 0);
}

std::vector<float> logits_of(const Backend& backend, const std::vector<int32_t>& tokens) {
  std::vector<float> logits(tokens.size() * backend.config().vocab_size);
  auto state = backend.new_state(1);
  ForwardOutputs out;
  out.logits = logits.data();
  backend.forward(tokens.data(), static_cast<int64_t>(tokens.size()), *state, out);
  return logits;
}

// The bundled model, 300 WikiText-2-like tokens (two chunks of 256), on the FP backend and on the
// quantized runtime with transformed fp32 weights.
class TinyModelTransforms : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    weights_ = new ModelWeights(tiny_model());
    tokens_ = new std::vector<int32_t>(random_tokens(300, weights_->config.vocab_size, 9));
    reference_ = new std::vector<float>(logits_of(CpuBackend(std::make_shared<ModelWeights>(*weights_)), *tokens_));
  }
  static void TearDownTestSuite() {
    delete weights_;
    delete tokens_;
    delete reference_;
  }
  static double relative_error(const ModelWeights& transformed, bool online_hadamard) {
    QuantizedModel q = float_quantized_model(transformed);
    for (QuantizedLayer& layer : q.layers) layer.online_hadamard = online_hadamard;
    const double rel = max_relative(logits_of(CpuBackend(std::make_shared<QuantizedModel>(q)), *tokens_), *reference_);
    std::printf("max |Δlogit| / max |logit| = %.3g\n", rel);
    return rel;
  }
  static ModelWeights* weights_;
  static std::vector<int32_t>* tokens_;
  static std::vector<float>* reference_;
};
ModelWeights* TinyModelTransforms::weights_ = nullptr;
std::vector<int32_t>* TinyModelTransforms::tokens_ = nullptr;
std::vector<float>* TinyModelTransforms::reference_ = nullptr;

constexpr double kPreserved = 1e-5;

TEST_F(TinyModelTransforms, NormFusion) {
  ModelWeights w = *weights_;
  fuse_norm_weights(w);
  EXPECT_LT(relative_error(w, false), kPreserved);
}

TEST_F(TinyModelTransforms, ResidualRotationWithAndWithoutSigns) {
  for (const bool signed_rotation : {false, true}) {
    ModelWeights w = *weights_;
    fuse_norm_weights(w);
    rotate_residual(w, signed_rotation ? random_signs(w.config.d_model, 3) : std::vector<float>{});
    EXPECT_LT(relative_error(w, false), kPreserved);
  }
}

TEST_F(TinyModelTransforms, OnlineHadamardAtOutProjInput) {
  ModelWeights w = *weights_;
  fuse_out_proj_hadamard(w);
  EXPECT_LT(relative_error(w, true), kPreserved);
}

TEST_F(TinyModelTransforms, SortAndClusterReordering) {
  // Cluster by the maxima of x over the test tokens, as export does with calibration maxima.
  StatsObserver observer(weights_->config, false);
  CpuBackend backend(std::make_shared<ModelWeights>(*weights_));
  auto state = backend.new_state(1);
  static_cast<CpuState&>(*state).set_observer(&observer);
  backend.forward(tokens_->data(), static_cast<int64_t>(tokens_->size()), *state, ForwardOutputs{});
  ModelWeights w = *weights_;
  const Mamba2Config& c = w.config;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const SortClusterResult clusters =
        sort_and_cluster(observer.stats().layers[l].at(StatPoint::kSsdX).absmax(), c.nheads(), c.headdim, c.ngroups);
    reorder_heads(w.layers[l], c, clusters.permutation);
  }
  EXPECT_LT(relative_error(w, false), kPreserved);
}

TEST_F(TinyModelTransforms, AllOfThemTogetherAsExportAppliesThem) {
  ModelWeights w = *weights_;
  fuse_norm_weights(w);
  rotate_residual(w, random_signs(w.config.d_model, 1));
  HeadPermutation perm = identity_head_permutation(w.config.nheads(), w.config.headdim);
  std::reverse(perm.heads.begin(), perm.heads.end());  // one group: any order of heads is allowed
  for (int64_t h = 0; h < w.config.nheads(); ++h)
    std::reverse(perm.channels.begin() + h * w.config.headdim, perm.channels.begin() + (h + 1) * w.config.headdim);
  for (LayerWeights& layer : w.layers) reorder_heads(layer, w.config, perm);
  fuse_out_proj_hadamard(w);
  EXPECT_LT(relative_error(w, true), kPreserved);
}

// SSD inputs of layer 0 of the bundled model on 300 tokens, and SSDi8 scales calibrated on them.
struct SsdCase {
  Mamba2Config config;
  std::vector<float> x, B, C, dt, A, D;
  ActQuant s_B, s_C, s_xs, s_state, s_cb;
};

class CaptureSsd : public ForwardObserver {
 public:
  explicit CaptureSsd(SsdCase& out) : out_(out) {}
  void on_activation(int64_t, ActivationPoint, const float*, int64_t, int64_t, int64_t) override {}
  void on_ssd_inputs(int64_t layer, const cpu::SsdDims& d, const cpu::SsdInputs& in, int64_t T, int64_t, const float*) override {
    if (layer != 0) return;
    const int64_t E = d.heads * d.headdim, GN = d.groups * d.dstate;
    for (int64_t t = 0; t < T; ++t) {
      out_.x.insert(out_.x.end(), in.x + t * in.x_stride, in.x + t * in.x_stride + E);
      out_.B.insert(out_.B.end(), in.B + t * in.bc_stride, in.B + t * in.bc_stride + GN);
      out_.C.insert(out_.C.end(), in.C + t * in.bc_stride, in.C + t * in.bc_stride + GN);
    }
    out_.dt.assign(in.dt, in.dt + T * d.heads);
    out_.A.assign(in.A, in.A + d.heads);
    out_.D.assign(in.D, in.D + d.heads);
  }

 private:
  SsdCase& out_;
};

SsdCase tiny_ssd_case(int64_t T) {
  SsdCase c;
  const ModelWeights w = tiny_model();
  c.config = w.config;
  CaptureSsd capture(c);
  CpuBackend backend(std::make_shared<ModelWeights>(w));
  auto state = backend.new_state(1);
  static_cast<CpuState&>(*state).set_observer(&capture);
  const std::vector<int32_t> tokens = random_tokens(T, w.config.vocab_size, 21);
  backend.forward(tokens.data(), T, *state, ForwardOutputs{});
  const Mamba2Config& k = c.config;
  const int64_t H = k.nheads(), P = k.headdim, N = k.d_state, G = k.ngroups;
  for (float& v : c.x) v = round_to_fp16(v);  // SSDi8 keeps x in fp16
  ChannelStats B(G * N, false), C(G * N, false), xs(H * P, false), st(H * P * N, false), cb(G, false);
  B.add_rows(c.B.data(), T, G * N, "B");
  C.add_rows(c.C.data(), T, G * N, "C");
  const cpu::SsdInputs in{c.x.data(), H * P, c.B.data(), c.C.data(), G * N, c.dt.data(), c.A.data(), c.D.data()};
  std::vector<float> zero(H * P * N, 0.0f);
  observe_ssd_internals({H, P, G, N}, in, T, k.chunk_size, zero.data(), xs, st, cb);
  c.s_B = int8_per_group(B.absmax(), N);
  c.s_C = int8_per_group(C.absmax(), N);
  c.s_xs = int8_per_channel(xs.absmax());
  c.s_state = int8_state_per_channel(st.absmax(), H * P, N);
  c.s_cb = int8_per_channel(cb.absmax());
  // B and C as the layer hands them over: fake-quantized.
  apply_activation_format(c.s_B, c.B.data(), T, G * N, G * N);
  apply_activation_format(c.s_C, c.C.data(), T, G * N, G * N);
  return c;
}

int8_t q8(float v, float s) { return quantize_value(v, s, QuantBits::kInt8); }
int8_t sat_rne(double v) { return static_cast<int8_t>(std::clamp(std::nearbyint(v), -127.0, 127.0)); }

// quantized_ssd.h's specification, transcribed loop by loop (no shared code with the runtime).
void literal_ssdi8(const SsdCase& c, int64_t T, std::vector<int8_t>& S, std::vector<float>& y) {
  const Mamba2Config& k = c.config;
  const int64_t H = k.nheads(), P = k.headdim, N = k.d_state, G = k.ngroups, E = H * P, l = k.chunk_size;
  y.assign(T * E, 0.0f);
  for (int64_t start = 0; start < T; start += l) {
    const int64_t L = std::min(l, T - start);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      const float sB = c.s_B.scale(g * N), sC = c.s_C.scale(g * N), scb = c.s_cb.scale(g);
      auto Bq = [&](int64_t t, int64_t n) { return q8(c.B[(start + t) * G * N + g * N + n], sB); };
      auto Cq = [&](int64_t t, int64_t n) { return q8(c.C[(start + t) * G * N + g * N + n], sC); };
      auto dt = [&](int64_t t) { return c.dt[(start + t) * H + h]; };
      std::vector<float> cs(L);
      float run = 0;
      for (int64_t t = 0; t < L; ++t) cs[t] = run += dt(t) * c.A[h];
      std::vector<int8_t> local(P * N);
      for (int64_t p = 0; p < P; ++p) {
        const float sxs = c.s_xs.scale(h * P + p), ss = c.s_state.scale(h * P + p);
        for (int64_t n = 0; n < N; ++n) {
          int32_t acc = 0;
          for (int64_t t = 0; t < L; ++t)
            acc += q8(dt(t) * std::exp(cs[L - 1] - cs[t]) * c.x[(start + t) * E + h * P + p], sxs) * Bq(t, n);
          local[p * N + n] = sat_rne(static_cast<float>(acc) * ((sxs * sB) / ss));
        }
      }
      std::vector<int8_t> cbq(L * L, 0);
      for (int64_t t = 0; t < L; ++t)
        for (int64_t s = 0; s <= t; ++s) {
          int32_t cb = 0;
          for (int64_t n = 0; n < N; ++n) cb += Cq(t, n) * Bq(s, n);
          cbq[t * L + s] = sat_rne(static_cast<float>(cb) * ((sC * sB) / scb));
        }
      for (int64_t t = 0; t < L; ++t)
        for (int64_t p = 0; p < P; ++p) {
          const float ss = c.s_state.scale(h * P + p);
          int32_t off = 0;
          for (int64_t n = 0; n < N; ++n) off += Cq(t, n) * S[(h * P + p) * N + n];
          float diag = 0;
          for (int64_t s = 0; s <= t; ++s) {
            const float w = round_to_fp16(static_cast<float>(cbq[t * L + s]) * (scb * dt(s) * std::exp(cs[t] - cs[s])));
            diag += w * round_to_fp16(c.x[(start + s) * E + h * P + p]);
          }
          const float x = c.x[(start + t) * E + h * P + p];
          y[(start + t) * E + h * P + p] =
              static_cast<float>(off) * (sC * ss) * std::exp(cs[t]) + diag + c.D[h] * x;
        }
      const int32_t qd = static_cast<int32_t>(std::nearbyint(std::exp(cs[L - 1]) * 128.0f));
      for (int64_t i = 0; i < P * N; ++i) {
        int8_t& s = S[h * P * N + i];
        const int32_t passed = static_cast<int32_t>(std::floor((qd * s + 64) / 128.0));
        s = static_cast<int8_t>(std::clamp(local[i] + passed, -127, 127));
      }
    }
  }
}

TEST(Ssdi8, IntegerPathMatchesItsSpecificationAndApproximatesTheFpSsd) {
  const int64_t T = 300;  // a full chunk of 256 and a partial one
  const SsdCase c = tiny_ssd_case(T);
  const Mamba2Config& k = c.config;
  const int64_t H = k.nheads(), P = k.headdim, N = k.d_state, G = k.ngroups, E = H * P;
  const cpu::SsdDims dims{H, P, G, N};
  const cpu::SsdInputs in{c.x.data(), E, c.B.data(), c.C.data(), G * N, c.dt.data(), c.A.data(), c.D.data()};
  std::vector<float> state(H * P * N, 0.0f), y(T * E);
  ssdi8_chunked(dims, in, T, k.chunk_size, {c.s_B, c.s_C, c.s_xs, c.s_state, c.s_cb}, state.data(), y.data());

  std::vector<int8_t> S(H * P * N, 0);
  std::vector<float> y_literal;
  literal_ssdi8(c, T, S, y_literal);
  int64_t nonzero = 0;
  for (int64_t i = 0; i < H * P * N; ++i) {
    ASSERT_EQ(q8(state[i], c.s_state.scale(i / N)), S[i]) << "state element " << i;
    nonzero += S[i] != 0;
  }
  EXPECT_GT(nonzero, H * P * N / 10);
  EXPECT_LT(max_relative(y, y_literal), 1e-5);

  std::vector<float> fp_state(H * P * N, 0.0f), y_fp(T * E);
  cpu::ssd_chunked(dims, in, T, k.chunk_size, fp_state.data(), y_fp.data());
  const double rel = max_relative(y, y_fp);
  std::printf("SSDi8 vs fp32 SSD on layer 0 of the bundled model: max |Δy| / max |y| = %.4f\n", rel);
  EXPECT_LT(rel, 0.05);

  // The ablation path: with every operand int8 it is the integer path up to fp32 rounding ...
  std::vector<float> sim_state(H * P * N, 0.0f), y_sim(T * E);
  const Ssdi8Scales all_int8{c.s_B, c.s_C, c.s_xs, c.s_state, c.s_cb};
  ASSERT_TRUE(ssdi8_all_int8(all_int8));
  ssdi8_chunked_simulated(dims, in, T, k.chunk_size, all_int8, sim_state.data(), y_sim.data());
  int64_t same = 0;
  for (int64_t i = 0; i < H * P * N; ++i) same += sim_state[i] == state[i];
  EXPECT_GT(same, H * P * N * 99 / 100);
  EXPECT_LT(max_relative(y_sim, y), 2e-3);
  // ... and with X_scaled, the state and CB in fp32 it is the fp32 SSD up to ChunkScan2's fp16 operands.
  const ActQuant fp32;
  const Ssdi8Scales float_internals{c.s_B, c.s_C, fp32, fp32, fp32};
  EXPECT_FALSE(ssdi8_all_int8(float_internals));
  std::vector<float> float_state(H * P * N, 0.0f), y_float(T * E);
  ssdi8_chunked_simulated(dims, in, T, k.chunk_size, float_internals, float_state.data(), y_float.data());
  EXPECT_LT(max_relative(y_float, y_fp), 2e-3);
  EXPECT_LT(max_relative(float_state, fp_state), 1e-5);
}

TEST(CpuBackend, DecodeContinuesPrefill) {
  const ModelWeights w = random_weights(synthetic_config(2), 5);
  const std::vector<int32_t> tokens = random_tokens(70, 256, 3);
  auto model = std::make_shared<QuantizedModel>(float_quantized_model(w));
  for (QuantizedLayer& layer : model->layers) layer.ssm_state = layer.conv_in = ActQuant::float16();
  const CpuBackend backend(model);
  const std::vector<float> all = logits_of(backend, tokens);
  const int64_t V = 256, prefix = 65;
  auto state = backend.new_state(1);
  backend.forward(tokens.data(), prefix, *state, ForwardOutputs{});
  std::vector<float> step(V);
  for (int64_t t = prefix; t < 70; ++t) {
    ForwardOutputs out;
    out.logits = step.data();
    backend.forward(&tokens[t], 1, *state, out);
    const std::vector<float> expected(all.begin() + t * V, all.begin() + (t + 1) * V);
    // The state is rounded to fp16 after each call, so decode differs from prefill by that rounding.
    EXPECT_LT(max_relative(step, expected), 2e-3) << "token " << t;
  }
}

}  // namespace
}  // namespace ssdq
