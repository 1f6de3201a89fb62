// The CUDA backend against the CPU backend: the bundled model's logits and NLL, a synthetic
// ngroups = 4 model, decode after prefill against prefill of the whole sequence, batches, and a
// graph-replayed decode equal to the eager one.
#include "runtime/cuda_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include "formats/error.h"
#include "formats/safetensors.h"
#include "runtime/cpu_backend.h"
#include "model/model_loader.h"
#include "tests/gpu/model_test_util.h"
#include "tests/support/compare.h"

namespace ssdq {
namespace {

using testing::golden_tokens;
using testing::logits_of;

class TinyModelOnCuda : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    weights_ = load_model("examples/mamba2-tiny").weights;
    cuda_ = new CudaBackend(*weights_, CudaBackendOptions{});
    cpu_ = new CpuBackend(weights_);
  }
  static void TearDownTestSuite() {
    delete cuda_;
    delete cpu_;
  }
  static std::shared_ptr<const ModelWeights> weights_;
  static CudaBackend* cuda_;
  static CpuBackend* cpu_;
};
std::shared_ptr<const ModelWeights> TinyModelOnCuda::weights_;
CudaBackend* TinyModelOnCuda::cuda_ = nullptr;
CpuBackend* TinyModelOnCuda::cpu_ = nullptr;

TEST_F(TinyModelOnCuda, LogitsMatchCpu) {
  const auto tokens = golden_tokens(300);  // crosses the 256-token chunk boundary
  const double err = testing::max_relative_difference(logits_of(*cuda_, tokens, 1), logits_of(*cpu_, tokens, 1));
  std::printf("max |Δlogit| / max |logit| = %.3g\n", err);
  EXPECT_LT(err, 3e-2);
}

TEST_F(TinyModelOnCuda, MeanNllMatchesCpuWithinHalfPercent) {
  const auto tokens = golden_tokens(512);
  const double gpu = testing::mean_nll(*cuda_, tokens), cpu = testing::mean_nll(*cpu_, tokens);
  std::printf("mean NLL: cuda %.5f cpu %.5f\n", gpu, cpu);
  EXPECT_NEAR(std::exp(gpu), std::exp(cpu), std::exp(cpu) * 5e-3);
}

TEST_F(TinyModelOnCuda, DecodeAfterPrefillEqualsPrefillOfWholeSequence) {
  const auto tokens = golden_tokens(272);
  const int64_t n = 260, V = cuda_->config().vocab_size;
  const auto whole = logits_of(*cuda_, tokens, 1);
  auto state = cuda_->new_state(1);
  std::vector<float> step(V), split;
  ForwardOutputs out;
  std::vector<float> prefix(n * V);
  out.logits = prefix.data();
  cuda_->forward(tokens.data(), n, *state, out);
  for (int64_t t = n; t < static_cast<int64_t>(tokens.size()); ++t) {
    out.logits = step.data();
    cuda_->forward(&tokens[t], 1, *state, out);
    split.insert(split.end(), step.begin(), step.end());
  }
  const std::vector<float> tail(whole.begin() + n * V, whole.end());
  EXPECT_LT(testing::max_relative_difference(split, tail), 3e-2);
}

TEST_F(TinyModelOnCuda, GraphReplayEqualsEagerDecode) {
  const auto tokens = golden_tokens(40);
  auto run = [&](bool graphs) {
    CudaBackendOptions options;
    options.use_graphs = graphs;
    return testing::two_sequence_steps(CudaBackend(*weights_, options), tokens, 20, 20);
  };
  const auto eager = run(false), graph = run(true);
  EXPECT_EQ(eager.first, graph.first);
  EXPECT_EQ(eager.second, graph.second);  // bit-identical: the same kernels replayed
}

TEST(SyntheticOnCuda, GroupedModelMatchesCpuInBatches) {
  Mamba2Config c;
  c.d_model = 256;
  c.n_layer = 2;
  c.vocab_size = 1000;
  c.d_state = 64;
  c.headdim = 64;
  c.ngroups = 4;
  c.chunk_size = 64;
  auto weights = std::make_shared<ModelWeights>(random_weights(c, 3));
  CudaBackend cuda(*weights, CudaBackendOptions{});
  CpuBackend cpu(weights);
  std::mt19937 rng(4);
  std::vector<int32_t> tokens(3 * 150);
  for (auto& t : tokens) t = rng() % c.vocab_size;
  EXPECT_LT(testing::max_relative_difference(logits_of(cuda, tokens, 3), logits_of(cpu, tokens, 3)), 3e-2);
}

TEST(CudaBackendErrors, TokenOutsideVocabularyIsRefused) {
  Mamba2Config c;
  c.d_model = 64;
  c.n_layer = 1;
  c.vocab_size = 50;
  c.d_state = 32;
  c.headdim = 32;
  CudaBackend cuda(random_weights(c, 1), CudaBackendOptions{});
  auto state = cuda.new_state(1);
  const int32_t bad[2] = {3, 50};
  EXPECT_THROW(cuda.forward(bad, 2, *state, ForwardOutputs{}), Error);
}

}  // namespace
}  // namespace ssdq
