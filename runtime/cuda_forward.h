// The host side of a forward, shared by the CUDA backends: token and target upload through pinned
// buffers, the body, lm_head over the rows asked for in blocks of at most 256 MB of logits, the
// copies back, and decode steps captured into a CUDA graph per state and replayed.
//
// An Impl is a CudaEngineCore (stream, gemm, work_generation, the pinned buffers) with `config`,
// `work` (tokens, targets, nll, argmax: device [rows]; logits [logits_rows, vocab]), and
//   reserve(batch, length);  enqueue_body(batch, length, state);
//   head_input(length, last_position_only) → {device rows, row stride} of the final norm's output;
//   head_weights() → {lm_head [vocab, d_model], its element type (that of the head input)};
//   enqueue_head_gemv(x, ldx, rows) → whether it wrote the logits itself (a decode GEMV).
// A State provides batch(), a DecodeGraph `graph` and, for verify windows, `window` (its
// forward_graphs by length, cleared when its buffers are replaced).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/gemm.h"
#include "kernels/logits_reduce.h"
#include "kernels/ssd_chunk_scan.h"
#include "runtime/backend.h"
#include "runtime/cuda_resources.h"

namespace ssdq {

// A batch of per-sequence states in one device block, as both CUDA backends keep them: buffers
// one after another, each holding every sequence's bytes of one layer's conv or SSM state.
// Zeroing and row copies run on the backend's stream, so they are ordered with its forwards and
// can be captured into a CUDA graph.
class DeviceState : public InferenceState {
 public:
  // bytes_per_sequence[i]: buffer i's bytes for one sequence.
  DeviceState(int64_t batch, const std::vector<size_t>& bytes_per_sequence, cudaStream_t stream,
              MemoryCounter* counter, const void* owner)
      : owner(owner), batch_(batch), stream_(stream) {
    Layout layout;
    std::vector<size_t> offsets;
    for (size_t bytes : bytes_per_sequence) offsets.push_back(layout.add(bytes * batch));
    block_ = DeviceBlock(layout.total(), "the per-sequence state", counter);
    for (size_t i = 0; i < offsets.size(); ++i) tensors_.push_back({block_.at<char>(offsets[i]), bytes_per_sequence[i]});
    reset();
  }
  int64_t batch() const override { return batch_; }
  void reset() override {
    cuda_ok(cudaMemsetAsync(block_.at<char>(0), 0, block_.bytes(), stream_), "reset state");
    cuda_ok(cudaStreamSynchronize(stream_), "reset state");
  }
  std::vector<StateTensor> tensors() const override { return tensors_; }
  // A state of the same owner and batch has the same layout: the whole block in one copy.
  void copy_all(const InferenceState& source) override {
    const auto* same = dynamic_cast<const DeviceState*>(&source);
    if (!same || same->owner != owner || same->batch_ != batch_ || same->block_.bytes() != block_.bytes())
      return InferenceState::copy_all(source);
    if (same != this) copy_bytes(block_.at<char>(0), same->block_.at<char>(0), block_.bytes());
  }
  // Buffer i's first sequence.
  template <typename T>
  T* buffer(size_t i) const {
    return static_cast<T*>(tensors_[i].data);
  }

  const void* owner;
  // The captured decode step: valid for one workspace generation and one output signature.
  DecodeGraph graph;

 protected:
  void copy_bytes(void* dst, const void* src, size_t bytes) const override {
    cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "state row copy");
  }
  void zero_bytes(void* dst, size_t bytes) const override {
    cuda_ok(cudaMemsetAsync(dst, 0, bytes, stream_), "state row zero");
  }

 private:
  int64_t batch_;
  cudaStream_t stream_;
  DeviceBlock block_;
  std::vector<StateTensor> tensors_;
};

// What every CUDA model runner holds, written once for the bf16 model and the quantized one: the
// device, its stream, the count of device memory, the cuBLASLt workspace, the activation block
// (grown by the runner's reserve(); its generation invalidates captured graphs and plans) and the
// pinned buffers of run_cuda_forward.
struct CudaEngineCore {
  explicit CudaEngineCore(int device_index) : device(select_cuda_device(device_index)) {
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    gemm_workspace = DeviceBlock(kGemmWorkspaceBytes, "the cuBLASLt workspace", &counter);
    gemm = std::make_unique<kernels::Gemm>(gemm_workspace.at<void>(0), kGemmWorkspaceBytes);
  }
  ~CudaEngineCore() {
    gemm.reset();
    if (stream) cudaStreamDestroy(stream);
  }
  CudaEngineCore(const CudaEngineCore&) = delete;
  CudaEngineCore& operator=(const CudaEngineCore&) = delete;

  // Weights, workspace, live states and the peak, with `weight_bytes` the runner's weights.
  MemoryReport memory(size_t weight_bytes) const {
    MemoryReport report;
    report.weight_bytes = weight_bytes;
    report.workspace_bytes = work_block.bytes() + gemm_workspace.bytes();
    report.state_bytes = counter.live - report.weight_bytes - report.workspace_bytes;
    report.peak_bytes = counter.peak;
    return report;
  }
  std::string device_name() const {
    return fmt::format("{} (sm_{}{}, {:.0f} GiB)", device.name, device.major, device.minor,
                       device.total_memory / double(1 << 30));
  }

  kernels::DeviceInfo device;
  cudaStream_t stream = nullptr;
  mutable MemoryCounter counter;
  DeviceBlock gemm_workspace;
  std::unique_ptr<kernels::Gemm> gemm;
  mutable DeviceBlock work_block;
  mutable int64_t work_batch = 0, work_length = 0;
  // Counts replacements of the activation block and of the pinned buffers: captured graphs copy
  // through both, and plans read the block's addresses.
  mutable uint64_t work_generation = 0;
  mutable PinnedBuffer<int32_t> pinned_tokens, pinned_targets, pinned_argmax;
  mutable PinnedBuffer<float> pinned_nll, pinned_logits;
};

// The chunked SSD's shape for a prefill of `length` tokens of `batch` sequences (pointers unset).
inline kernels::SsdChunkScanArgs ssd_chunk_shape(const Mamba2Config& c, int64_t batch, int64_t length) {
  kernels::SsdChunkScanArgs a;
  a.batch = static_cast<int>(batch);
  a.seqlen = static_cast<int>(length);
  a.heads = static_cast<int>(c.nheads());
  a.headdim = static_cast<int>(c.headdim);
  a.groups = static_cast<int>(c.ngroups);
  a.dstate = static_cast<int>(c.d_state);
  a.chunk = static_cast<int>(c.chunk_size);
  return a;
}

// What a captured decode step depends on besides the state: the buffers it copies through (their
// generation) and which outputs it writes.
inline uint64_t decode_graph_key(uint64_t work_generation, const ForwardOutputs& out) {
  return work_generation * 16 + (out.logits ? 1 : 0) + (out.nll ? 2 : 0) + (out.argmax ? 4 : 0) +
         (out.last_position_only ? 8 : 0);
}

// NLL / argmax of one logits block reduced on the device; the logits copied to the pinned block
// when asked for.
template <typename Impl>
void enqueue_logits_outputs(const Impl& impl, int64_t first_row, int64_t rows, const ForwardOutputs& out,
                            float* pinned_logits_block) {
  const int64_t V = impl.config.vocab_size;
  const auto& work = impl.work;
  if (out.nll || out.argmax) {
    kernels::LogitsReduceArgs reduce;
    reduce.rows = rows;
    reduce.vocab = static_cast<int>(V);
    reduce.logits = work.logits;
    reduce.targets = out.nll ? work.targets + first_row : nullptr;
    reduce.nll = out.nll ? work.nll + first_row : nullptr;
    reduce.argmax = out.argmax ? work.argmax + first_row : nullptr;
    cuda_ok(kernels::launch_logits_reduce(reduce, impl.stream), "logits_reduce");
  }
  if (out.logits)
    cuda_ok(cudaMemcpyAsync(pinned_logits_block, work.logits, rows * V * 4, cudaMemcpyDeviceToHost, impl.stream),
            "copy logits");
}

// lm_head over `rows` rows of x from first_row (one logits block, fp32 logits); NLL / argmax
// reduced on the device; the logits copied to the pinned block when asked for.
template <typename Impl, typename T>
void enqueue_head_block(const Impl& impl, const T* x, int64_t ldx, int64_t first_row, int64_t rows,
                        const ForwardOutputs& out, float* pinned_logits_block) {
  if (!impl.enqueue_head_gemv(x + first_row * ldx, ldx, rows)) {
    const auto [weights, type] = impl.head_weights();
    kernels::GemmArgs head;
    head.m = rows;
    head.n = impl.head_vocab();
    head.k = impl.config.d_model;
    head.in_type = type;
    head.x = x + first_row * ldx;
    head.ldx = ldx;
    head.w = weights;
    head.out = impl.head_out();
    head.ldout = head.n;
    head.out_type = kernels::ElementType::kF32;
    impl.gemm->run(head, impl.stream);
  }
  impl.enqueue_head_gather(rows);
  if (impl.writes_outputs()) enqueue_logits_outputs(impl, first_row, rows, out, pinned_logits_block);
}

// `window`: a verify window (the state's window buffers reserved), captured per length.
template <typename Impl, typename State>
void run_cuda_forward(const Impl& impl, const int32_t* tokens, int64_t length, State& state, const ForwardOutputs& out,
                      bool use_graphs, bool window = false) {
  const int64_t batch = state.batch(), M = batch * length, V = impl.config.vocab_size;
  check_forward_ids(tokens, batch, length, V, out);
  const int64_t rows = batch * out.rows(length);
  impl.reserve(batch, length);
  const auto& work = impl.work;
  cudaStream_t stream = impl.stream;

  uint64_t* generation = &impl.work_generation;  // a replaced pinned buffer makes captured graphs stale
  int32_t* host_tokens = impl.pinned_tokens.get(M, generation);
  std::memcpy(host_tokens, tokens, M * 4);
  // A tensor-parallel rank other than 0 runs the head (its slice) for the same rows, and writes nothing back.
  const bool writes = impl.writes_outputs();
  int32_t* host_targets = writes && out.targets && out.nll ? impl.pinned_targets.get(rows, generation) : nullptr;
  if (host_targets) std::memcpy(host_targets, out.targets, rows * 4);
  float* host_nll = writes && out.nll ? impl.pinned_nll.get(rows, generation) : nullptr;
  int32_t* host_argmax = writes && out.argmax ? impl.pinned_argmax.get(rows, generation) : nullptr;
  const int64_t block_rows = std::min(rows, work.logits_rows);
  float* host_logits = writes && out.logits ? impl.pinned_logits.get(block_rows * V, generation) : nullptr;
  const auto [head_x, head_ldx] = impl.head_input(length, out.last_position_only);

  auto copy_reductions = [&] {
    if (host_nll) cuda_ok(cudaMemcpyAsync(host_nll, work.nll, rows * 4, cudaMemcpyDeviceToHost, stream), "copy nll");
    if (host_argmax)
      cuda_ok(cudaMemcpyAsync(host_argmax, work.argmax, rows * 4, cudaMemcpyDeviceToHost, stream), "copy argmax");
  };
  auto enqueue_all = [&](bool whole_head) {
    cuda_ok(cudaMemcpyAsync(work.tokens, host_tokens, M * 4, cudaMemcpyHostToDevice, stream), "copy tokens");
    if (host_targets)
      cuda_ok(cudaMemcpyAsync(work.targets, host_targets, rows * 4, cudaMemcpyHostToDevice, stream), "copy targets");
    impl.enqueue_body(batch, length, state, window);
    if (!whole_head) return;
    if (out.any()) enqueue_head_block(impl, head_x, head_ldx, 0, rows, out, host_logits);
    copy_reductions();
  };

  const bool one_block = rows <= work.logits_rows;
  if (use_graphs && window && one_block) {
    auto& graph = state.window.forward_graphs[state.window.graph_key(length)];
    if (!graph) graph = std::make_unique<DecodeGraph>();
    graph->run(stream, decode_graph_key(impl.work_generation, out), [&] { enqueue_all(true); });
  } else if (use_graphs && length == 1 && one_block) {
    state.graph.run(stream, decode_graph_key(impl.work_generation, out), [&] { enqueue_all(true); });
  } else if (one_block) {
    enqueue_all(true);
  } else {
    enqueue_all(false);
    for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
      const int64_t n = std::min(block_rows, rows - r0);
      enqueue_head_block(impl, head_x, head_ldx, r0, n, out, host_logits);
      if (host_logits) {
        cuda_ok(cudaStreamSynchronize(stream), "forward");
        std::memcpy(out.logits + r0 * V, host_logits, n * V * 4);
      }
    }
    copy_reductions();
  }
  cuda_ok(cudaStreamSynchronize(stream), "forward");
  if (host_logits && one_block) std::memcpy(out.logits, host_logits, rows * V * 4);
  if (host_nll)
    for (int64_t i = 0; i < rows; ++i) out.nll[i] = host_nll[i];
  if (host_argmax) std::memcpy(out.argmax, host_argmax, rows * 4);
}

}  // namespace ssdq
