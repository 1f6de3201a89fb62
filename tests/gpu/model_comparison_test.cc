// eval-ppl's comparison on the GPU: the bf16 CUDA model against the FP32 CPU specification on the
// bundled model (the logits of every position come back from the device in window batches), and a
// CUDA model against itself (KL exactly 0).
#include <gtest/gtest.h>

#include <vector>

#include "formats/token_data.h"
#include "formats/tokenizer.h"
#include "model/model_loader.h"
#include "runtime/cpu_backend.h"
#include "runtime/cuda_backend.h"
#include "runtime/eval_ppl.h"
#include "tests/support/test_models.h"

namespace ssdq {
namespace {

using namespace testing_models;

TEST(CudaModelComparison, Bf16AgainstTheCpuSpecification) {
  const LoadedModel loaded = load_model(kTinyModel);
  const CpuBackend cpu(loaded.weights);
  const CudaBackend cuda(*loaded.weights, CudaBackendOptions{});
  const Tokenizer tokenizer = Tokenizer::from_file(std::string(kTinyModel) + "/tokenizer.json");
  const std::vector<int32_t> tokens = tokenize_data_file("examples/wikitext-2-raw/wiki.test.raw", tokenizer);
  EvalOptions options;
  options.ctx = 1024;
  options.max_tokens = 4097;
  const ComparisonSummary s = compare_models(cuda, cpu, tokens, options).summary;
  EXPECT_EQ(s.positions, 4096);
  std::printf("bf16 vs fp32: KL %.6f (p99.9 %.5f), top-1 %.4f, ln ppl ratio %+.5f\n", s.kl.mean, s.kl_p999,
              s.top1_agreement.mean, s.log_ppl_ratio.mean);
  EXPECT_GT(s.kl.mean, 0);  // bf16 weights and activations are not fp32
  EXPECT_LT(s.kl.mean, 2e-3);
  EXPECT_GT(s.top1_agreement.mean, 0.97);
  EXPECT_LT(std::abs(s.log_ppl_ratio.mean), 5e-3);

  const ComparisonSummary same = compare_models(cuda, cuda, tokens, options).summary;
  EXPECT_EQ(same.kl.mean, 0);
  EXPECT_EQ(same.top1_agreement.mean, 1);
}

}  // namespace
}  // namespace ssdq
