#include "runtime/cuda_tensor_parallel.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "formats/error.h"
#include "runtime/cuda_communicator.h"
#include "runtime/cuda_resources.h"

namespace ssdq {

// ---- RankThreads ----

struct RankThreads::Shared {
  std::mutex mutex;
  std::condition_variable changed;
  const std::function<void(int)>* job = nullptr;
  uint64_t generation = 0;
  int running = 0;
  bool stop = false;
  // The first error of a run in the order they happened: a rank that fails (out of memory) comes
  // before the peers that then wait for it at an all-reduce and time out.
  std::exception_ptr first_error;
};

RankThreads::RankThreads(const std::vector<int>& devices) : shared_(std::make_unique<Shared>()) {
  for (size_t r = 0; r < devices.size(); ++r)
    threads_.emplace_back([this, r, device = devices[r]] {
      Shared& s = *shared_;
      const cudaError_t selected = cudaSetDevice(device);
      uint64_t seen = 0;
      std::unique_lock<std::mutex> lock(s.mutex);
      for (;;) {
        s.changed.wait(lock, [&] { return s.stop || s.generation != seen; });
        if (s.stop) return;
        seen = s.generation;
        const std::function<void(int)>* job = s.job;
        lock.unlock();
        std::exception_ptr error;
        try {
          cuda_ok(selected, "cudaSetDevice");
          (*job)(static_cast<int>(r));
        } catch (...) {
          error = std::current_exception();
        }
        lock.lock();
        if (error && !s.first_error) s.first_error = error;
        if (--s.running == 0) s.changed.notify_all();
      }
    });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stop = true;
  }
  shared_->changed.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::run(const std::function<void(int)>& job) {
  Shared& s = *shared_;
  std::unique_lock<std::mutex> lock(s.mutex);
  s.job = &job;
  s.running = size();
  ++s.generation;
  s.changed.notify_all();
  s.changed.wait(lock, [&] { return s.running == 0; });
  if (s.first_error) std::rethrow_exception(std::exchange(s.first_error, nullptr));
}

// ---- the state: one CudaState per rank, on its GPU ----

namespace {

// Makes `device` current for a scope of the calling thread.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cuda_ok(cudaGetDevice(&previous_), "cudaGetDevice");
    cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

// tensors() lists rank 0's buffers, then rank 1's …; a copy or a zeroing runs on the stream of
// the rank whose buffer it writes, so it is ordered with that rank's forwards.
class TensorParallelState : public InferenceState {
 public:
  TensorParallelState(int64_t batch, const void* owner) : owner(owner), batch_(batch) {}
  int64_t batch() const override { return batch_; }
  void reset() override {
    for (size_t r = 0; r < ranks.size(); ++r) {
      DeviceScope scope(devices[r]);
      ranks[r]->reset();
    }
  }
  std::vector<StateTensor> tensors() const override {
    std::vector<StateTensor> out;
    for (const auto& rank : ranks)
      for (const StateTensor& t : rank->tensors()) out.push_back(t);
    return out;
  }
  void copy_all(const InferenceState& source) override {
    const auto* same = dynamic_cast<const TensorParallelState*>(&source);
    if (!same || same->owner != owner || same->batch_ != batch_) return InferenceState::copy_all(source);
    for (size_t r = 0; r < ranks.size(); ++r) {
      DeviceScope scope(devices[r]);
      ranks[r]->copy_all(*same->ranks[r]);
    }
  }

  const void* owner;
  std::vector<std::unique_ptr<InferenceState>> ranks;
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;

 protected:
  void copy_bytes(void* dst, const void* src, size_t bytes) const override {
    const int r = rank_of(dst);
    DeviceScope scope(devices[r]);
    cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, streams[r]), "state row copy");
  }
  void zero_bytes(void* dst, size_t bytes) const override {
    const int r = rank_of(dst);
    DeviceScope scope(devices[r]);
    cuda_ok(cudaMemsetAsync(dst, 0, bytes, streams[r]), "state row zero");
  }

 private:
  int rank_of(const void* p) const {
    const char* at = static_cast<const char*>(p);
    for (size_t r = 0; r < ranks.size(); ++r)
      for (const StateTensor& t : ranks[r]->tensors()) {
        const char* begin = static_cast<const char*>(t.data);
        if (at >= begin && at < begin + t.bytes_per_sequence * batch_) return static_cast<int>(r);
      }
    fail("internal: a state copy into memory no rank holds");
  }
  int64_t batch_;
};

TensorParallelState& tp_state(InferenceState& state, const void* owner) {
  auto* s = dynamic_cast<TensorParallelState*>(&state);
  if (!s || s->owner != owner) fail("the CUDA tensor-parallel backend was given a state it did not make");
  return *s;
}

// The gated norm's channels over all ranks when its sums of squares are folded into out_proj's
// all-reduce (one norm group spanning every rank); 0 when each rank's groups are whole. A norm
// group shared by some ranks but not all cannot be folded (its scale differs from the other
// groups' inside one sum) and is refused.
int64_t folded_norm_width(const Mamba2Config& c, const TensorParallelPlan& plan) {
  const int shared = plan.ranks_per_norm_group();
  if (shared == 1) return 0;
  if (shared != plan.tp)
    fail("--tp {} on CUDA: {} groups shared by {} ranks each; the CUDA engine folds the gated norm's sums only when "
         "one group spans every rank (--tp a divisor of {} or of the heads with 1 group); valid here: {}",
         plan.tp, c.ngroups, shared, c.ngroups, fmt::join(valid_tensor_parallel_sizes(c), ", "));
  return c.d_inner();
}

}  // namespace

// ---- the backend ----

CudaTensorParallelBackend::CudaTensorParallelBackend(const Mamba2Config& config, int tp,
                                                     const CudaBackendOptions& options)
    : config_(config), plan_(plan_tensor_parallel(config, tp)), options_(options),
      devices_([&] {
        std::vector<int> d;
        for (int r = 0; r < tp; ++r) d.push_back(options.device + r);
        return d;
      }()),
      group_(tp >= 2 ? std::make_unique<CudaRankGroup>(devices_) : nullptr), threads_(devices_),
      ranks_(static_cast<size_t>(std::max(tp, 0))) {
  if (tp < 2) fail("internal: the tensor-parallel backend needs 2 or more ranks (one GPU is CudaBackend)");
}

void CudaTensorParallelBackend::make_ranks(
    const std::function<std::unique_ptr<CudaBackend>(int, const CudaBackendOptions&)>& build, bool artifact) {
  // Refuses what the engine cannot run before any upload.
  const int64_t norm_width = artifact ? 0 : folded_norm_width(config_, plan_);
  const bool shared_norm = artifact && plan_.ranks_per_norm_group() > 1;
  threads_.run([&](int r) {
    CudaBackendOptions o = options_;
    o.device = devices_[r];
    o.communicator = &group_->rank(r);
    o.folded_norm_width = norm_width;
    o.head_rows = vocab_parallel() ? plan_.local_vocab() : 0;
    if (shared_norm) {
      o.norm_groups = config_.ngroups;
      o.norm_first_group = plan_.first_group(r);
      o.norm_group_size = config_.d_inner() / config_.ngroups;
    }
    ranks_[r] = build(r, o);
  });
}

CudaTensorParallelBackend::CudaTensorParallelBackend(const ModelWeights& weights, int tp,
                                                     const CudaBackendOptions& options)
    : CudaTensorParallelBackend(weights.config, tp, options) {
  make_ranks([&](int r, const CudaBackendOptions& o) {
    ModelWeights shard = shard_weights(weights, plan_, r);  // lm_head: the rank's vocabulary rows
    shard.config.tie_embeddings = false;
    if (!vocab_parallel()) {  // rank 0 runs the whole head, the others none
      shard.lm_head.clear();
      shard.config.tie_embeddings = r > 0 || config_.tie_embeddings;
      if (r == 0 && !config_.tie_embeddings) shard.lm_head = weights.lm_head;
    }
    return std::make_unique<CudaBackend>(shard, o);
  });
}

CudaTensorParallelBackend::CudaTensorParallelBackend(const Mamba2Config& config, uint64_t seed, int tp,
                                                     const CudaBackendOptions& options)
    : CudaTensorParallelBackend(config, tp, options) {
  make_ranks([&](int r, const CudaBackendOptions& o) {
    Mamba2Config local = shard_config(config_, plan_);
    local.tie_embeddings = vocab_parallel() ? false : r > 0 || config_.tie_embeddings;
    return std::make_unique<CudaBackend>(local, seed + r, o);
  });
}

CudaTensorParallelBackend::CudaTensorParallelBackend(const QuantizedModel& model, int tp,
                                                     const CudaBackendOptions& options)
    : CudaTensorParallelBackend(model.config, tp, options) {
  validate_quantized_model(model, "artifact");
  // Every rank's shard before any upload, so that a model the ranks cannot split fails first.
  std::vector<std::shared_ptr<const QuantizedModel>> shards;
  for (int r = 0; r < tp; ++r) {
    QuantizedModel shard = shard_quantized_model(model, plan_, r);  // lm_head: the rank's vocabulary rows
    if (!vocab_parallel()) shard.lm_head = model.head();  // whole (rank 0 runs it; the others hold it unused)
    shard.config.tie_embeddings = shard.lm_head.empty();
    shards.push_back(std::make_shared<const QuantizedModel>(std::move(shard)));
  }
  make_ranks([&](int r, const CudaBackendOptions& o) { return std::make_unique<CudaBackend>(shards[r], o); },
             /*artifact=*/true);
}

CudaTensorParallelBackend::~CudaTensorParallelBackend() {
  try {
    threads_.run([&](int r) { ranks_[r].reset(); });  // each engine freed on its own GPU's thread
  } catch (...) {
  }
}

std::unique_ptr<InferenceState> CudaTensorParallelBackend::new_state(int64_t batch) const {
  if (batch <= 0) fail("batch size must be positive, got {}", batch);
  auto state = std::make_unique<TensorParallelState>(batch, this);
  state->ranks.resize(plan_.tp);
  threads_.run([&](int r) { state->ranks[r] = ranks_[r]->new_state(batch); });
  state->devices = devices_;
  for (const auto& rank : ranks_) state->streams.push_back(rank->stream());
  return state;
}

void CudaTensorParallelBackend::run_forward(const int32_t* tokens, int64_t length, InferenceState& state,
                                            const ForwardOutputs& outputs, bool window) const {
  TensorParallelState& s = tp_state(state, this);
  check_forward_ids(tokens, s.batch(), length, config_.vocab_size, outputs);
  // Every rank's workspace first: a rank that cannot allocate fails before any rank has enqueued an
  // all-reduce that would wait for it.
  reserve(s.batch(), length);
  threads_.run([&](int r) {
    const ForwardOutputs out = rank_outputs(r, outputs);
    if (window)
      ranks_[r]->forward_window(tokens, length, *s.ranks[r], out);
    else
      ranks_[r]->forward(tokens, length, *s.ranks[r], out);
  });
}

void CudaTensorParallelBackend::forward(const int32_t* tokens, int64_t length, InferenceState& state,
                                        const ForwardOutputs& outputs) const {
  if (length > 0) run_forward(tokens, length, state, outputs, /*window=*/false);
}

void CudaTensorParallelBackend::reserve(int64_t batch, int64_t length) const {
  threads_.run([&](int r) { ranks_[r]->reserve(batch, length); });
}

MemoryReport CudaTensorParallelBackend::memory() const { return ranks_[0]->memory(); }

size_t CudaTensorParallelBackend::state_bytes_per_sequence() const { return ranks_[0]->state_bytes_per_sequence(); }

std::string CudaTensorParallelBackend::device_name() const {
  return fmt::format("{} × {}, tensor parallel ({})", plan_.tp, ranks_[0]->device_name(), group_->describe());
}

std::string CudaTensorParallelBackend::describe_plan(int64_t batch, int64_t length) const {
  std::string text;
  threads_.run([&](int r) {
    if (r == 0) text = ranks_[0]->describe_plan(batch, length);
  });
  return fmt::format("tensor parallel over {} GPUs: each rank {} of {} heads, B/C groups {}, gated norm {}; {}\n{}",
                     plan_.tp, plan_.local_heads(), plan_.heads, plan_.groups_split ? "split" : "replicated",
                     plan_.ranks_per_norm_group() > 1 ? "folded into the all-reduce" : "local",
                     vocab_parallel() ? fmt::format("lm_head vocab-parallel ({} rows a rank, logits gathered by NCCL)",
                                                    plan_.local_vocab())
                                      : "lm_head whole on rank 0 (NCCL absent)",
                     text);
}

bool CudaTensorParallelBackend::vocab_parallel() const { return group_->nccl(); }

ForwardOutputs CudaTensorParallelBackend::rank_outputs(int rank, const ForwardOutputs& outputs) const {
  // Vocab-parallel: every rank runs the head on the same rows (their outputs are written by rank 0).
  return rank == 0 || vocab_parallel() ? outputs : ForwardOutputs{};
}

bool CudaTensorParallelBackend::runs_window() const { return ranks_[0]->runs_window(); }

void CudaTensorParallelBackend::forward_window(const int32_t* tokens, int64_t length, InferenceState& state,
                                               const ForwardOutputs& outputs) const {
  if (length <= 0) fail("verify window: length must be positive, got {}", length);
  run_forward(tokens, length, state, outputs, /*window=*/true);
}

void CudaTensorParallelBackend::replay_window(InferenceState& state, const std::vector<int64_t>& steps) const {
  TensorParallelState& s = tp_state(state, this);
  threads_.run([&](int r) { ranks_[r]->replay_window(*s.ranks[r], steps); });
}

}  // namespace ssdq
