// Tensor parallelism on GPUs: one process, one thread per GPU, each thread owning a CUDA engine
// over its shard of the model (model/tensor_parallel.h: heads split, out_proj row-parallel),
// its stream, its CUDA graphs and its DeviceCommunicator (runtime/cuda_communicator.h). The model
// is read once and sliced in host memory. Every rank keeps a bit-identical fp32 residual (each adds
// the same all-reduced sum) and runs the final norm and its vocabulary rows of the lm_head; the
// slices of the logits are gathered on rank 0, which writes the outputs (without NCCL the head runs
// whole on rank 0). docs/TENSOR_PARALLEL.md describes what runs where.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "model/model_weights.h"
#include "model/tensor_parallel.h"
#include "runtime/backend.h"
#include "runtime/cuda_backend.h"

namespace ssdq {

class CudaRankGroup;

// One thread per rank, each with its GPU current; run() executes a job on every rank at once.
class RankThreads {
 public:
  explicit RankThreads(const std::vector<int>& devices);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;
  // job(rank) on each rank's thread; returns when all are done, rethrowing the first error.
  void run(const std::function<void(int)>& job);
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  struct Shared;
  std::unique_ptr<Shared> shared_;
  std::vector<std::thread> threads_;
};

class CudaTensorParallelBackend : public Backend {
 public:
  // The FP model over `tp` GPUs (options.device, options.device + 1, …). Fails naming the valid
  // sizes when `tp` does not divide the model, and the reason when the GPUs cannot run it.
  CudaTensorParallelBackend(const ModelWeights& weights, int tp, const CudaBackendOptions& options);
  // Random weights made on each GPU for its shard (synthetic benchmarks).
  CudaTensorParallelBackend(const Mamba2Config& config, uint64_t seed, int tp, const CudaBackendOptions& options);
  // An artifact over `tp` GPUs, sliced as the CPU's ranks slice it (shard_quantized_model): fails
  // when its int4 groups straddle the ranks or its online rotation spans them (export --tp-blocks).
  CudaTensorParallelBackend(const QuantizedModel& model, int tp, const CudaBackendOptions& options);
  ~CudaTensorParallelBackend() override;

  std::string name() const override { return "cuda"; }
  const Mamba2Config& config() const override { return config_; }
  std::unique_ptr<InferenceState> new_state(int64_t batch) const override;
  void forward(const int32_t* tokens, int64_t length, InferenceState& state,
               const ForwardOutputs& outputs) const override;
  void reserve(int64_t batch, int64_t length) const override;
  // Per GPU: the largest rank's (rank 0, which holds the lm_head).
  MemoryReport memory() const override;
  // Per GPU: one rank's share of a sequence's state.
  size_t state_bytes_per_sequence() const override;
  bool on_device() const override { return true; }
  std::string device_name() const override;
  std::string describe_plan(int64_t batch, int64_t length) const override;
  bool runs_window() const override;
  void forward_window(const int32_t* tokens, int64_t length, InferenceState& state,
                      const ForwardOutputs& outputs) const override;
  void replay_window(InferenceState& state, const std::vector<int64_t>& steps) const override;

  const TensorParallelPlan& plan() const { return plan_; }
  // Rank r's engine (tests compare its state with one GPU's slices).
  const CudaBackend& rank(int r) const { return *ranks_[r]; }

 private:
  CudaTensorParallelBackend(const Mamba2Config& config, int tp, const CudaBackendOptions& options);
  // Runs `build(rank, options)` on each rank's thread to make its engine. `artifact`: the ranks run
  // a quantized model, whose gated norm is shared by all-reducing its sums first (the FP model's
  // rides in out_proj's all-reduce).
  void make_ranks(const std::function<std::unique_ptr<CudaBackend>(int, const CudaBackendOptions&)>& build,
                  bool artifact = false);
  // Whether the lm_head is split by vocabulary (its logits gathered over NCCL); else whole on rank 0.
  bool vocab_parallel() const;
  // What rank `rank`'s engine is asked for: the same outputs (rank 0 writes them), or none where
  // the head runs on rank 0 alone.
  ForwardOutputs rank_outputs(int rank, const ForwardOutputs& outputs) const;
  // A forward (or a verify window) on every rank, each rank's workspace reserved first.
  void run_forward(const int32_t* tokens, int64_t length, InferenceState& state, const ForwardOutputs& outputs,
                   bool window) const;

  Mamba2Config config_;
  TensorParallelPlan plan_;
  CudaBackendOptions options_;
  std::vector<int> devices_;
  std::unique_ptr<CudaRankGroup> group_;
  mutable RankThreads threads_;
  std::vector<std::unique_ptr<CudaBackend>> ranks_;
};

}  // namespace ssdq
