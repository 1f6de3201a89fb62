#include "runtime/cpu_tensor_parallel.h"

#include <cstring>
#include <exception>
#include <thread>

#include <fmt/format.h>

#include "formats/error.h"
#include "runtime/communicator.h"
#include "runtime/cpu_backend.h"
#include "runtime/cpu_block.h"

namespace ssdq {
namespace {

// One CpuState per rank, in its shard's shapes; tensors() lists rank 0's buffers, then rank 1's …,
// so the state API copies and zeroes every rank's rows.
class CpuTensorParallelState : public InferenceState {
 public:
  CpuTensorParallelState(const std::vector<std::shared_ptr<const QuantizedModel>>& shards, int64_t batch)
      : batch_(batch) {
    for (const auto& shard : shards) ranks_.push_back(std::make_unique<CpuState>(shard->config, batch));
  }
  int64_t batch() const override { return batch_; }
  void reset() override {
    for (auto& rank : ranks_) rank->reset();
  }
  std::vector<StateTensor> tensors() const override {
    std::vector<StateTensor> out;
    for (const auto& rank : ranks_)
      for (const StateTensor& t : rank->tensors()) out.push_back(t);
    return out;
  }
  CpuState& rank(int r) { return *ranks_[r]; }

 protected:
  void copy_bytes(void* dst, const void* src, size_t bytes) const override { std::memcpy(dst, src, bytes); }
  void zero_bytes(void* dst, size_t bytes) const override { std::memset(dst, 0, bytes); }

 private:
  int64_t batch_;
  std::vector<std::unique_ptr<CpuState>> ranks_;
};

}  // namespace

BlockRank block_rank(const Mamba2Config& config, const TensorParallelPlan& plan, int rank, Communicator* comm) {
  BlockRank part;
  part.comm = comm;
  part.norm_split = plan.ranks_per_norm_group() > 1;
  part.norm_groups = config.ngroups;
  part.norm_group = plan.first_group(rank);
  part.norm_group_size = config.d_inner() / config.ngroups;
  return part;
}

CpuTensorParallelBackend::CpuTensorParallelBackend(const ModelWeights& weights, int tp)
    : config_(weights.config), plan_(plan_tensor_parallel(weights.config, tp)) {
  for (int r = 0; r < tp; ++r) {
    ModelWeights shard = shard_weights(weights, plan_, r);
    head_slices_.push_back(std::move(shard.lm_head));
    shard.lm_head.clear();  // the rank's layers only: the head runs from head_slices_
    shard.config.tie_embeddings = true;
    shards_.push_back(std::make_shared<const QuantizedModel>(float_quantized_model(shard)));
  }
}

CpuTensorParallelBackend::CpuTensorParallelBackend(const QuantizedModel& model, int tp)
    : config_(model.config), plan_(plan_tensor_parallel(model.config, tp)) {
  validate_quantized_model(model, "artifact");
  for (int r = 0; r < tp; ++r) {
    QuantizedModel shard = shard_quantized_model(model, plan_, r);
    head_slices_.push_back(shard.lm_head.to_float());
    shard.lm_head = WeightMatrix();  // the rank's layers only: the head runs from head_slices_
    shard.config.tie_embeddings = true;
    shards_.push_back(std::make_shared<const QuantizedModel>(std::move(shard)));
  }
}

std::unique_ptr<InferenceState> CpuTensorParallelBackend::new_state(int64_t batch) const {
  if (batch <= 0) fail("batch size must be positive, got {}", batch);
  return std::make_unique<CpuTensorParallelState>(shards_, batch);
}

void CpuTensorParallelBackend::forward(const int32_t* tokens, int64_t length, InferenceState& state,
                                       const ForwardOutputs& outputs) const {
  auto* tp_state = dynamic_cast<CpuTensorParallelState*>(&state);
  if (!tp_state) fail("the CPU tensor-parallel backend was given a state made by another backend");
  if (length <= 0) return;
  const int64_t batch = tp_state->batch(), D = config_.d_model, V = config_.vocab_size;
  check_forward_ids(tokens, batch, length, V, outputs);
  // Every rank advances every sequence through every layer; their residuals stay bit-identical
  // (each adds the same all-reduced sum), so rank 0's feeds the head.
  std::vector<std::vector<float>> residuals(batch);
  VirtualRanks ranks(plan_.tp);
  auto run_rank = [&](int r) {
    const QuantizedModel& m = *shards_[r];
    const BlockRank part = block_rank(config_, plan_, r, &ranks.rank(r));
    CpuState& rank_state = tp_state->rank(r);
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<float> residual(length * D);
      for (int64_t t = 0; t < length; ++t) m.embedding.row_to_float(tokens[b * length + t], residual.data() + t * D);
      for (int64_t l = 0; l < m.config.n_layer; ++l)
        cpu_block_forward(m.config, m.layers[l], l, residual.data(), length, rank_state.conv(l, b),
                          rank_state.ssm(l, b), nullptr, &part);
      if (r == 0) residuals[b] = std::move(residual);
    }
  };
  // Every rank runs the same shapes, so an error (an Error from the block) reaches every rank at
  // the same point, before the same collective; the first is rethrown here.
  std::vector<std::exception_ptr> errors(plan_.tp);
  auto guarded = [&](int r) {
    try {
      run_rank(r);
    } catch (...) {
      errors[r] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < plan_.tp; ++r) threads.emplace_back(guarded, r);
  guarded(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
  std::vector<const float*> slices;
  for (const std::vector<float>& slice : head_slices_) slices.push_back(slice.data());
  for (int64_t b = 0; b < batch; ++b)
    cpu_head_forward(config_, shards_[0]->norm_f.data(), slices, residuals[b].data(), length,
                     outputs.for_sequence(b, length, V), /*parallel=*/true);
}

std::string CpuTensorParallelBackend::device_name() const {
  return fmt::format("CPU ({} virtual tensor-parallel ranks)", plan_.tp);
}

MemoryReport CpuTensorParallelBackend::memory() const {
  MemoryReport report;
  const auto bytes = [](const WeightMatrix& w) {
    return w.dense.size() * sizeof(float) + w.quantized.values.size() + w.quantized.scales.size() * sizeof(float);
  };
  for (const auto& shard : shards_) {
    for (const QuantizedLayer& q : shard->layers) report.weight_bytes += bytes(q.in_proj) + bytes(q.out_proj);
  }
  for (const auto& slice : head_slices_) report.weight_bytes += slice.size() * sizeof(float);
  return report;
}

size_t CpuTensorParallelBackend::state_bytes_per_sequence() const {
  size_t bytes = 0;
  for (const auto& shard : shards_) bytes += cpu_state_bytes_per_sequence(shard->config);
  return bytes;
}

std::string CpuTensorParallelBackend::describe_plan(int64_t batch, int64_t length) const {
  if (batch <= 0 || length <= 0) fail("plan: batch and length must be positive, got {} x {}", batch, length);
  const Mamba2Config local = shards_[0]->config;
  return fmt::format(
      "plan for batch {} x {} token{}, CPU specification over {} virtual ranks (threads)\n"
      "every layer: each rank {} heads ({} channels), B/C {} ({} group{} a rank), cpu_block_forward on its shard;\n"
      "  gated norm {}; out_proj row-parallel, summed over the ranks (all-reduce in rank order) into the residual\n"
      "lm_head: vocab-parallel, {} rows a rank, gathered\n",
      batch, length, length == 1 ? "" : "s", plan_.tp, plan_.local_heads(), local.d_inner(),
      plan_.groups_split ? "split" : "replicated", local.ngroups, local.ngroups == 1 ? "" : "s",
      plan_.ranks_per_norm_group() > 1 ? fmt::format("sums of squares combined over {} ranks", plan_.ranks_per_norm_group())
                                       : "local to each rank",
      plan_.local_vocab());
}

}  // namespace ssdq
