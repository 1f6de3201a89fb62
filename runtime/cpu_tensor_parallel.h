// Tensor parallelism on the CPU: `tp` virtual ranks (threads of this process, runtime/communicator.h)
// each running its shard (model/tensor_parallel.h) of every layer through cpu_block_forward, with
// out_proj's partial outputs and split gated-norm sums combined across the ranks, and the
// lm_head vocab-parallel (each rank's slice of the logits gathered into whole rows). It is the
// specification of sharded execution and the check, without a GPU, that sharding a model
// changes nothing but the summation order: `--device cpu --tp N`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model_weights.h"
#include "model/quantized_model.h"
#include "model/tensor_parallel.h"
#include "runtime/backend.h"
#include "runtime/cpu_block.h"

namespace ssdq {

// Rank `rank`'s part in every block of `config` (the whole model's) sharded by `plan`.
BlockRank block_rank(const Mamba2Config& config, const TensorParallelPlan& plan, int rank, Communicator* comm);

class CpuTensorParallelBackend : public Backend {
 public:
  // Fails naming the valid sizes when `tp` does not divide the model.
  CpuTensorParallelBackend(const ModelWeights& weights, int tp);
  // An artifact (model/tensor_parallel.h shard_quantized_model): a W8A8 out_proj sums its int32
  // products across the ranks, so its output is the one-rank runtime's bit for bit.
  CpuTensorParallelBackend(const QuantizedModel& model, int tp);

  std::string name() const override { return "cpu"; }
  const Mamba2Config& config() const override { return config_; }
  std::unique_ptr<InferenceState> new_state(int64_t batch) const override;
  void forward(const int32_t* tokens, int64_t length, InferenceState& state,
               const ForwardOutputs& outputs) const override;
  std::string device_name() const override;
  MemoryReport memory() const override;
  size_t state_bytes_per_sequence() const override;
  std::string describe_plan(int64_t batch, int64_t length) const override;

  const TensorParallelPlan& plan() const { return plan_; }

 private:
  Mamba2Config config_;
  TensorParallelPlan plan_;
  std::vector<std::shared_ptr<const QuantizedModel>> shards_;  // rank r's layers (its shard_config)
  std::vector<std::vector<float>> head_slices_;                 // rank r's vocabulary rows of the lm_head
};

}  // namespace ssdq
