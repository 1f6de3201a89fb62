// Tensor parallelism on the CPU's virtual ranks against the model on one rank: prefill logits,
// decode steps, NLL and the state API, for groups split over the ranks and groups they share.
#include "runtime/cpu_tensor_parallel.h"

#include <gtest/gtest.h>

#include "model/model_weights.h"
#include "runtime/communicator.h"
#include "runtime/cpu_backend.h"
#include "tests/support/test_models.h"

#include <thread>

namespace ssdq {
namespace {

using testing_models::max_relative;
using testing_models::random_tokens;
using testing_models::synthetic_config;

// Logits of a prefill of `length` tokens then `steps` decode steps of each of `batch` sequences.
std::vector<float> run(const Backend& backend, const std::vector<int32_t>& tokens, int64_t batch, int64_t length,
                       int64_t steps) {
  const int64_t V = backend.config().vocab_size;
  auto state = backend.new_state(batch);
  std::vector<float> logits(batch * length * V), out;
  std::vector<int32_t> prompt;
  for (int64_t b = 0; b < batch; ++b)
    prompt.insert(prompt.end(), tokens.begin() + b * (length + steps), tokens.begin() + b * (length + steps) + length);
  ForwardOutputs o;
  o.logits = logits.data();
  backend.forward(prompt.data(), length, *state, o);
  out = logits;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<int32_t> step(batch);
    for (int64_t b = 0; b < batch; ++b) step[b] = tokens[b * (length + steps) + length + s];
    std::vector<float> step_logits(batch * V);
    o.logits = step_logits.data();
    backend.forward(step.data(), 1, *state, o);
    out.insert(out.end(), step_logits.begin(), step_logits.end());
  }
  return out;
}

TEST(CpuTensorParallel, EqualsOneRank) {
  for (int64_t groups : {1, 2, 4, 8}) {
    for (int tp : {2, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << "ngroups " << groups << ", tp " << tp);
      const Mamba2Config c = synthetic_config(groups);
      const ModelWeights w = random_weights(c, 11);
      const CpuBackend one(w);
      const CpuTensorParallelBackend sharded(w, tp);
      const int64_t batch = 2, length = 45, steps = 3;  // 45 tokens: a chunk of 32 and a partial one
      const std::vector<int32_t> tokens = random_tokens(batch * (length + steps), c.vocab_size, 5);
      // Only the summation order differs (out_proj split over ranks, norm sums combined).
      EXPECT_LT(max_relative(run(sharded, tokens, batch, length, steps), run(one, tokens, batch, length, steps)), 2e-5);
    }
  }
}

TEST(CpuTensorParallel, NllArgmaxAndStateCopies) {
  const Mamba2Config c = synthetic_config(1);
  const ModelWeights w = random_weights(c, 2);
  const CpuBackend one(w);
  const CpuTensorParallelBackend sharded(w, 4);
  const int64_t length = 20;
  const std::vector<int32_t> tokens = random_tokens(length + 1, c.vocab_size, 9);
  std::vector<double> nll_one(length), nll_tp(length);
  std::vector<int32_t> arg_one(length), arg_tp(length);
  for (auto [backend, nll, arg] : {std::make_tuple(static_cast<const Backend*>(&one), &nll_one, &arg_one),
                                   std::make_tuple(static_cast<const Backend*>(&sharded), &nll_tp, &arg_tp)}) {
    auto state = backend->new_state(1);
    ForwardOutputs o;
    o.targets = tokens.data() + 1;
    o.nll = nll->data();
    o.argmax = arg->data();
    backend->forward(tokens.data(), length, *state, o);
  }
  for (int64_t t = 0; t < length; ++t) EXPECT_NEAR(nll_tp[t], nll_one[t], 1e-4 * std::abs(nll_one[t]));
  EXPECT_EQ(arg_tp, arg_one);

  // Every rank's state rows move with the state API: a copied row decodes as its source does.
  auto state = sharded.new_state(2);
  const int32_t first[2] = {tokens[0], tokens[1]};
  sharded.forward(first, 1, *state, {});
  state->copy_rows(*state, {0}, {1});
  std::vector<float> logits(2 * c.vocab_size);
  ForwardOutputs o;
  o.logits = logits.data();
  const int32_t next[2] = {tokens[2], tokens[2]};
  sharded.forward(next, 1, *state, o);
  EXPECT_TRUE(std::equal(logits.begin(), logits.begin() + c.vocab_size, logits.begin() + c.vocab_size));
  EXPECT_EQ(sharded.state_bytes_per_sequence(), one.state_bytes_per_sequence() +
                                                    (sharded.plan().tp - 1) * c.n_layer * 2 * c.d_state *
                                                        (c.d_conv - 1) * sizeof(float));
}

TEST(VirtualRanks, SumInRankOrderGivesEveryRankTheSameBits) {
  VirtualRanks ranks(3);
  std::vector<std::vector<float>> data = {{1e8f, 1.f}, {-1e8f, 2.f}, {1.f, 3.f}};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] { ranks.rank(r).all_reduce_sum(data[r].data(), 2); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(data[r][0], (0.f + 1e8f) + -1e8f + 1.f);  // rank order: (1e8 - 1e8) + 1
    EXPECT_EQ(data[r][1], 6.f);
  }
}

}  // namespace
}  // namespace ssdq
