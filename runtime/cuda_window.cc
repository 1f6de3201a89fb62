// Speculative verify windows on the CUDA engine (runtime/decode_session.h): a window of K tokens a
// sequence runs as one forward whose recurrence steps token by token with the state rounded after
// each, every layer writing in_proj's and the conv's outputs to the state's window buffers; a
// sequence that keeps only its first n tokens is restored to its state before the window and
// replayed from those buffers (the conv state and the state update: Activation Replay), its
// projections not recomputed. Or, without the restore (replay_then_window): a window leaves the
// state before its tokens, and the next window's conv and state update replay the kept ones first.
#include "runtime/cuda_engine.h"

namespace ssdq {

bool CudaBackend::Impl::runs_window() const {
  for (const DeviceLayer& d : layers)
    if (!d.int8_state && d.state_format.format != Format::kFloat32 && d.state_format.format != Format::kFloat16)
      return false;
  return true;
}

bool CudaBackend::Impl::exact_window(int64_t batch, int64_t length) const {
  // The FP model with rows_alone: up to the GEMV's rows every projection, norm and the head run the
  // kernels of a single step, each row in the order of sums it has alone, the conv and the state
  // update token by token as a step does. A tensor-parallel rank's all-reduce chooses its route by
  // the message's size, and an artifact's window takes its integer GEMMs past 4 rows.
  const int64_t M = batch * length;
  if (!bf16_model || !options.rows_alone || options.communicator || M > kernels::kGemvMaxRows || !runs_window())
    return false;
  const auto fits = [&](const DeviceLinear& L) {
    return kernels::gemv_shape_supported(static_cast<int>(M), static_cast<int>(L.n), static_cast<int>(L.k));
  };
  for (const DeviceLayer& d : layers)
    if (!fits(d.in_proj) || !fits(d.out_proj)) return false;
  return head_weights().second == ElementType::kBF16 &&
         kernels::gemv_shape_supported(static_cast<int>(M), static_cast<int>(head_vocab()), static_cast<int>(config.d_model));
}

void CudaBackend::Impl::reserve_window(CudaState& state, int64_t length) const {
  CudaState::Window& w = state.window;
  if (length <= w.capacity) return;
  const Mamba2Config& c = config;
  const int64_t rows = state.batch() * length, act = bf16_model ? 2 : 4;
  cuda_ok(cudaStreamSynchronize(stream), "synchronize before resizing the window buffers");
  w.forward_graphs.clear();
  w.replay_graphs.clear();
  w.block = DeviceBlock();
  w.zxbcdt_bytes = align_up(rows * c.d_in_proj() * act);
  w.layer_bytes = w.zxbcdt_bytes + align_up(rows * c.conv_dim() * act);
  w.layers = c.n_layer;
  const int64_t entries = CudaState::Window::steps_entries(state.batch());
  w.block = DeviceBlock(2 * c.n_layer * w.layer_bytes + entries * 4, "a verify window's kept activations", &counter);
  w.steps = w.block.at<int32_t>(2 * c.n_layer * w.layer_bytes);
  w.host_steps.get(entries);
  w.host_replay_steps.get(entries);
  w.capacity = length;
  w.length = 0;
}

void CudaBackend::Impl::enqueue_replay(CudaState& state) const {
  const Mamba2Config& c = config;
  const int64_t batch = state.batch(), length = state.window.length;
  WorkRedirect redirect(work);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const DeviceLayer& d = layers[l];
    redirect.to(state.window_zxbcdt(l, state.window.set), state.window_conv_out(l, state.window.set));
    // What the window's conv read (its input, formats and state), replayed per sequence's count.
    const kernels::CausalConv1dArgs window_conv = conv_args(d, batch, length, state.conv(l), false);
    kernels::ConvStateReplayArgs conv;
    conv.batch = window_conv.batch;
    conv.channels = window_conv.channels;
    conv.width = window_conv.width;
    conv.steps = window_conv.seqlen;
    conv.seq_steps = state.window.steps;
    conv.in = window_conv.in;
    conv.in_stride = window_conv.in_stride;
    conv.type = window_conv.in_type;
    conv.in_formats = window_conv.in_formats;
    conv.state = window_conv.state;
    cuda_ok(kernels::launch_conv_state_replay(conv, stream), "conv_state_replay");
    kernels::SsdStateUpdateArgs step = state_update_args(d, batch, length, state.ssm(l), true);
    step.seq_steps = state.window.steps;
    cuda_ok(kernels::launch_ssd_state_update(step, stream), "ssd_state_update (replay)");
  }
}

// The last window's kept rows, as the kernels of a window over them read them (the same pointers
// enqueue_replay gives its kernels); the counts and that window's rows a sequence in steps.
void CudaBackend::Impl::add_window_replay(kernels::CausalConv1dArgs& conv, const CudaState& state, int64_t l) const {
  const CudaState::Window& w = state.window;
  WorkRedirect redirect(work);
  redirect.to(state.window_zxbcdt(l, w.set), state.window_conv_out(l, w.set));
  conv.replay_steps = w.steps;
  conv.replay_rows = w.replay_rows(state.batch());
  conv.replay_in = conv_args(layers[l], state.batch(), std::max<int64_t>(w.length, 1), state.conv(l), false).in;
  conv.store_final = false;
}

void CudaBackend::Impl::add_window_replay(kernels::SsdStateUpdateArgs& step, const CudaState& state, int64_t l) const {
  const CudaState::Window& w = state.window;
  WorkRedirect redirect(work);
  redirect.to(state.window_zxbcdt(l, w.set), state.window_conv_out(l, w.set));
  const kernels::SsdStateUpdateArgs kept = state_update_args(layers[l], state.batch(), std::max<int64_t>(w.length, 1), state.ssm(l), true);
  step.replay_steps = w.steps;
  step.replay_rows = w.replay_rows(state.batch());
  step.replay_x = kept.x;
  step.replay_B = kept.B;
  step.replay_dt = kept.dt;
  step.store_final = false;
}

void CudaBackend::Impl::run_window(const int32_t* tokens, int64_t length, CudaState& state, const ForwardOutputs& outputs,
                                   bool replaying) const {
  CudaState::Window& w = state.window;
  w.replaying = replaying;
  try {
    run_cuda_forward(*this, tokens, length, state, outputs, options.use_graphs, true);
  } catch (...) {
    w.replaying = false;
    throw;
  }
  w.replaying = false;
  w.set = w.next_set();
  w.length = length;
}

namespace {

void check_window(const CudaBackend& backend, int64_t length) {
  if (length <= 0) fail("verify window: length must be positive, got {}", length);
  if (!backend.runs_window()) fail("internal: this model's state formats need a pass the window cannot round per token");
}

// Each sequence's count of the last window's kept tokens and the sequence whose kept tokens it
// takes (from[b]; empty: its own), checked, into `pinned`, which the kernels' replay_steps and
// replay_rows are copied from (the counts, that window's rows a sequence, the sources); whether
// any count is positive.
bool stage_replay_counts(CudaState& s, const std::vector<int64_t>& steps, const std::vector<int64_t>& from,
                         PinnedBuffer<int32_t>& pinned) {
  CudaState::Window& w = s.window;
  const int64_t B = s.batch();
  if (static_cast<int64_t>(steps.size()) != B) fail("replay: {} counts for a batch of {}", steps.size(), B);
  if (!from.empty() && static_cast<int64_t>(from.size()) != B) fail("replay: {} source rows for a batch of {}", from.size(), B);
  int32_t* host = pinned.get(CudaState::Window::steps_entries(B));
  bool any = false;
  for (int64_t b = 0; b < B; ++b) {
    if (steps[b] < 0 || steps[b] > w.length)
      fail("replay: sequence {} replays {} tokens of a window of {}", b, steps[b], w.length);
    const int64_t source = from.empty() ? b : from[b];
    if (source < 0 || source >= B) fail("replay: sequence {} takes the tokens of row {}, outside 0..{}", b, source, B - 1);
    host[b] = static_cast<int32_t>(steps[b]);
    host[B + 1 + b] = static_cast<int32_t>(source);
    any = any || steps[b] > 0;
  }
  host[B] = static_cast<int32_t>(w.length);
  return any;
}

}  // namespace

bool CudaBackend::runs_window() const { return impl_->runs_window(); }

bool CudaBackend::exact_window(int64_t batch, int64_t length) const { return impl_->exact_window(batch, length); }

bool CudaBackend::replays_in_window() const { return impl_->options.replay_in_window && impl_->runs_window(); }

void CudaBackend::forward_window(const int32_t* tokens, int64_t length, InferenceState& state,
                                 const ForwardOutputs& outputs) const {
  CudaState& s = cuda_state(state);
  check_window(*this, length);
  impl_->reserve_window(s, length);
  s.window.length = 0;
  impl_->run_window(tokens, length, s, outputs, false);
}

// Where a sequence replays nothing, its tokens of the last window are simply not taken in; where
// the window buffers must grow, the last window is replayed apart first (growing them drops it).
void CudaBackend::replay_then_window(const std::vector<int64_t>& steps, const std::vector<int64_t>& from,
                                     const int32_t* tokens, int64_t length, InferenceState& state,
                                     const ForwardOutputs& outputs) const {
  CudaState& s = cuda_state(state);
  check_window(*this, length);
  if (stage_replay_counts(s, steps, from, s.window.host_steps) && length > s.window.capacity) {
    replay_window_from(state, steps, from);  // the window then replays nothing (and the buffers may grow)
    stage_replay_counts(s, std::vector<int64_t>(s.batch(), 0), {}, s.window.host_steps);
  }
  impl_->reserve_window(s, length);
  impl_->run_window(tokens, length, s, outputs, true);
}

void CudaBackend::replay_window(InferenceState& state, const std::vector<int64_t>& steps) const {
  CudaState& s = cuda_state(state);
  CudaState::Window& w = s.window;
  if (w.length == 0) fail("replay: no verify window to replay (forward_window first)");
  stage_replay_counts(s, steps, {}, w.host_replay_steps);
  int32_t* host = w.host_replay_steps.get(CudaState::Window::steps_entries(s.batch()));
  cudaStream_t stream = impl_->stream;
  auto enqueue = [&] {
    cuda_ok(cudaMemcpyAsync(w.steps, host, CudaState::Window::steps_entries(s.batch()) * 4, cudaMemcpyHostToDevice,
                            stream),
            "copy replay counts");
    impl_->enqueue_replay(s);
  };
  if (impl_->options.use_graphs) {
    auto& graph = w.replay_graphs[w.length * 2 + w.set];
    if (!graph) graph = std::make_unique<DecodeGraph>();
    graph->run(stream, impl_->work_generation, enqueue);
  } else {
    enqueue();
  }
  // No wait here: what follows runs on the same stream, and these pinned counts (not the window's)
  // are written again only by the next replay, after a window that waits for the stream.
  w.length = 0;
}

}  // namespace ssdq
