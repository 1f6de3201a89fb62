// The CUDA engine's workspace and executor: the layer as its plan says, the body of a forward
// and the lm_head's hooks for runtime/cuda_forward.h.
#include "runtime/cuda_engine.h"

namespace ssdq {

void CudaBackend::Impl::reserve(int64_t batch, int64_t length) const {
  if (batch <= work_batch && length <= work_length) return;
  batch = std::max(batch, work_batch);
  length = std::max(length, work_length);
  const Mamba2Config& c = config;
  const int64_t M = batch * length, D = c.d_model, E = c.d_inner(), in_dim = c.d_in_proj();
  const int64_t widest_in = std::max(D, E), widest_out = std::max(in_dim, D);
  const int64_t logits_rows = std::max<int64_t>(1, std::min<int64_t>(M, kLogitsBlockBytes / (c.vocab_size * 4)));
  const int64_t act = bf16_model ? 2 : 4;           // bytes of an element of zxbcdt, conv_out, y
  const int64_t artifact = bf16_model ? 0 : 1;      // buffers only an artifact's steps use
  Layout layout;
  const size_t tokens = layout.add(M * 4), targets = layout.add(M * 4), argmax = layout.add(M * 4),
               acc = layout.add(integer_gemm ? M * widest_out * 4 : 0), arrivals = layout.add(batch * c.ngroups * 4);
  const size_t residual = layout.add(M * D * 4), normed = layout.add(artifact * M * D * 4),
               zxbcdt = layout.add(M * in_dim * act), conv_out = layout.add(M * c.conv_dim() * act),
               y = layout.add(M * E * act), gated = layout.add(artifact * M * E * 4),
               proj = layout.add(artifact ? M * D * 4 : options.communicator ? M * (D + 1) * 4 : 0), chain = layout.add(grouped_gemm ? M * widest_out * 4 : 0),
               logits = layout.add(logits_rows * c.vocab_size * 4), nll = layout.add(M * 4);
  const size_t head_slice = layout.add(options.head_rows ? logits_rows * options.head_rows * 4 : 0),
               gathered = layout.add(options.head_rows ? logits_rows * c.vocab_size * 4 : 0);
  const size_t norm_partial = layout.add(any_norm_in_parts ? norm_sums_floats(M) * 4 : 0),
               norm_sums = layout.add(any_norm_in_parts ? norm_sums_floats(M) * 4 : 0);
  const size_t x8 = layout.add(artifact * M * widest_in), x16 = layout.add(M * widest_in * 2),
               expanded = layout.add(expand_bytes);
  const size_t ssdi8_bc = layout.add(any_ssdi8 ? M * 2 * c.ngroups * c.d_state : 0);  // the SSDi8 kernel's int8 B|C rows
  const size_t xbc_int8 = layout.add(any_split_in_proj ? M * c.conv_dim() : 0);  // split in_proj's int8 x|B|C rows
  kernels::Ssdi8ChunkScanArgs ssdi8_shape;  // the SSDi8 kernel's workspace at the largest batch and length
  ssdi8_shape.batch = static_cast<int>(batch);
  ssdi8_shape.seqlen = static_cast<int>(length);
  ssdi8_shape.heads = static_cast<int>(c.nheads());
  ssdi8_shape.headdim = static_cast<int>(c.headdim);
  ssdi8_shape.dstate = static_cast<int>(c.d_state);
  ssdi8_shape.groups = static_cast<int>(c.ngroups);
  ssdi8_shape.chunk = static_cast<int>(c.chunk_size);
  const size_t ssdi8_workspace = layout.add(any_ssdi8 ? kernels::ssdi8_chunk_scan_workspace_bytes(ssdi8_shape) : 0);
  const size_t chunk_scan_workspace =
      layout.add(any_float_ssd ? kernels::ssd_chunk_scan_workspace_bytes(ssd_chunk_shape(config, batch, length)) : 0);
  cuda_ok(cudaStreamSynchronize(stream), "synchronize before resizing the workspace");
  work_block = DeviceBlock();
  work_block = DeviceBlock(layout.total(), "activations", &counter);
  const DeviceBlock& b = work_block;
  work = {b.at<int32_t>(tokens), b.at<int32_t>(targets), b.at<int32_t>(argmax), b.at<int32_t>(acc),
          b.at<int32_t>(arrivals),
          b.at<float>(residual), b.at<float>(normed),    b.at<float>(zxbcdt),    b.at<float>(conv_out),
          b.at<float>(y),        b.at<float>(gated),     b.at<float>(proj),      b.at<float>(chain),
          b.at<float>(logits),   b.at<float>(nll),       b.at<float>(head_slice), b.at<float>(gathered),
          b.at<float>(norm_partial), b.at<float>(norm_sums),
          b.at<int8_t>(x8),       b.at<int8_t>(ssdi8_bc),
          b.at<int8_t>(xbc_int8), b.at<void>(ssdi8_workspace), b.at<void>(chunk_scan_workspace),
          b.at<__half>(x16),     b.at<void>(expanded),   logits_rows};
  cuda_ok(cudaMemsetAsync(work.arrivals, 0, batch * c.ngroups * 4, stream), "cudaMemsetAsync");
  work_batch = batch;
  work_length = length;
  ++work_generation;
}

void CudaBackend::Impl::enqueue_format(const DeviceFormat& f, float* data, int64_t rows, int64_t width, int64_t stride, Reader reader,
                    const char* what) const {
  kernels::ActivationFormatArgs a;
  a.rows = rows;
  a.width = static_cast<int>(width);
  a.data = data;
  a.stride = stride;
  a.format = f.format;
  a.scales = f.format == Format::kInt8 ? f.scales.at<float>(0) : nullptr;
  a.index = f.index.bytes() ? f.index.at<int32_t>(0) : nullptr;
  if (reader == Reader::kInt8) {
    a.q_out = work.x_int8;
    a.q_stride = width;
  } else if (reader == Reader::kFloat16) {
    a.h_out = work.x16;
    a.h_stride = width;
  }
  if (a.format == Format::kFloat32 && !a.q_out && !a.h_out) return;
  cuda_ok(kernels::launch_activation_format(a, stream), what);
}

void CudaBackend::Impl::enqueue_linear(const LinearPlan& plan, const DeviceLinear& L, int64_t m, float x_scale, const float* bias,
                    float* out, const char* what, const float* norm_weight,
                    const kernels::L2Prefetch* prefetch, const float* x32) const {
  using Schedule = LinearPlan::Schedule;
  const bool residual_add = plan.residual_add;
  // cuBLASLt over dense weights: out[m, n] (+)= x[m, k] · wᵀ, contiguous rows.
  const auto dense_gemm = [&](ElementType type, const void* x, const void* w, ElementType out_type) {
    kernels::GemmArgs g;
    g.m = m;
    g.n = L.n;
    g.k = L.k;
    g.in_type = type;
    g.x = x;
    g.ldx = L.k;
    g.w = w;
    g.out = out;
    g.ldout = L.n;
    g.out_type = out_type;
    g.accumulate = residual_add;
    g.tf32 = plan.tf32;
    gemm->run(g, stream);
  };
  if (plan.schedule == Schedule::kFp32Gemm) {
    dense_gemm(ElementType::kF32, x32, L.dense32.at<void>(0), ElementType::kF32);
    return;
  }
  if (plan.schedule == Schedule::kBf16Gemv) {
    const GemvPrologue prologue = plan.norm_prologue         ? GemvPrologue::kRmsNorm
                                  : plan.gated_norm_prologue ? GemvPrologue::kGatedRmsNorm
                                                             : GemvPrologue::kNone;
    const GemvOutput output = residual_add       ? GemvOutput::kResidualAdd
                              : plan.partial_out ? GemvOutput::kTpPartial
                                                 : GemvOutput::kBf16;
    cuda_ok(kernels::launch_gemv(bf16_gemv_args(L, m, out, output, norm_weight, prologue), stream), what);
    return;
  }
  if (plan.schedule == Schedule::kBf16Gemm) {
    dense_gemm(ElementType::kBF16, work.x16, L.dense16.at<void>(0),
               residual_add || plan.partial_out ? ElementType::kF32 : ElementType::kBF16);
    return;
  }
  if (plan.schedule == Schedule::kQgemv) {
    kernels::QgemvArgs q = qgemv_args(L, m, x_scale);
    if (prefetch) std::copy(prefetch, prefetch + kernels::kL2PrefetchRanges, q.l2_prefetch);
    q.bias = L.folds_bias() || residual_add ? bias : nullptr;
    q.out = out;
    q.ldout = L.n;
    q.accumulate = residual_add;
    if (plan.norm_prologue) {
      q.norm_residual = work.residual;
      q.norm_weight = norm_weight;
      q.norm_eps = static_cast<float>(config.norm_eps);
    }
    cuda_ok(kernels::launch_qgemv(q, stream), what);
    return;
  }
  if (plan.schedule == Schedule::kW4A16Mixed) {
    cuda_ok(kernels::launch_gemm_w4a16(w4a16_args(L, m, out), stream), what);
    return;
  }
  kernels::GemmArgs g;
  g.m = m;
  g.n = L.n;
  g.ldout = L.n;
  if (plan.schedule == Schedule::kFp16Gemm) {
    const void* w16 = L.dense16.bytes() ? L.dense16.at<void>(0) : nullptr;
    if (plan.unpack_first) {
      kernels::WeightUnpackArgs u;
      u.rows = L.n;
      u.cols = static_cast<int>(L.k);
      u.bits = L.bits;
      u.values = L.values.at<void>(0);
      u.scales = L.scales.at<float>(0);
      u.group_size = L.group_size;
      u.out = work.expanded;
      u.out_type = ElementType::kF16;
      cuda_ok(kernels::launch_weight_unpack(u, stream), what);
      w16 = work.expanded;
    }
    dense_gemm(ElementType::kF16, work.x16, w16, ElementType::kF32);
    return;
  }
  const int8_t* w8 = L.values.at<int8_t>(0);
  if (plan.schedule == Schedule::kGroupedInt4Packed) {
    kernels::GemmS8GroupedArgs packed = grouped_gemm_args(L, m, w8, x_scale, bias, out, residual_add);
    packed.w_bits = 4;
    cuda_ok(kernels::launch_gemm_s8_grouped(packed, stream), what);
    return;
  }
  if (plan.unpack_first) {
    kernels::WeightUnpackArgs u;
    u.rows = L.n;
    u.cols = static_cast<int>(L.k);
    u.bits = 4;
    u.values = L.values.at<void>(0);
    u.out = work.expanded;
    u.out_type = ElementType::kS8;
    cuda_ok(kernels::launch_weight_unpack(u, stream), what);
    w8 = static_cast<const int8_t*>(work.expanded);
  }
  if (plan.schedule == Schedule::kS8Scaled) {
    cuda_ok(kernels::launch_gemm_s8_scaled(
                integer_gemm_args<kernels::GemmS8ScaledArgs>(L, m, w8, x_scale, bias, out, residual_add), stream),
            what);
    return;
  }
  if (plan.schedule == Schedule::kGrouped) {
    cuda_ok(kernels::launch_gemm_s8_grouped(grouped_gemm_args(L, m, w8, x_scale, bias, out, residual_add), stream),
            what);
    return;
  }
  g.in_type = ElementType::kS8;
  g.out_type = ElementType::kS32;
  g.k = L.group_size;
  g.ldx = L.k;
  g.ldw = L.k;
  g.out = work.int32_acc;
  kernels::ScaleInt32Args s;
  s.m = m;
  s.n = L.n;
  s.acc = work.int32_acc;
  s.ld_acc = L.n;
  s.w_scales = L.scales.at<float>(0);
  s.x_scale = x_scale;
  s.bias = bias;
  s.out = out;
  s.ldout = L.n;
  s.accumulate = residual_add;
  s.groups = L.groups;
  s.chain = work.chain;
  for (int group = 0; group < L.groups; ++group) {
    g.x = work.x_int8 + group * L.group_size;
    g.w = w8 + group * L.group_size;
    gemm->run(g, stream);
    s.group = group;
    cuda_ok(kernels::launch_scale_int32(s, stream), what);
  }
}

void CudaBackend::Impl::enqueue_split_in_proj(const DeviceLayer& d, int64_t m, const kernels::Ssdi8ChunkScanArgs* ssd_tables) const {
  const auto [z_dt, xbc] = split_in_proj_args(d, m);
  cuda_ok(cudaEventRecord(fork_event, stream), "cudaEventRecord");
  cuda_ok(cudaStreamWaitEvent(side_stream, fork_event, 0), "cudaStreamWaitEvent");
  // z|dt first: ChunkCumsum then fills the SMs that the x|B|C GEMM's last round of tiles leaves idle.
  cuda_ok(kernels::launch_gemm_s8_scaled(z_dt, side_stream), "in_proj (z|dt)");
  if (ssd_tables) cuda_ok(kernels::launch_ssdi8_chunk_tables(*ssd_tables, side_stream), "ssdi8 ChunkCumsum");
  cuda_ok(kernels::launch_gemm_s8_scaled(xbc, stream), "in_proj (x|B|C as int8)");
  cuda_ok(cudaEventRecord(join_event, side_stream), "cudaEventRecord");
}

void CudaBackend::Impl::enqueue_layer(const DeviceLayer& d, const LayerPlan& p, int64_t batch, int64_t length,
                   CudaState& state, int64_t l, const DeviceLayer* previous, bool stop_at_out_proj) const {
  const Mamba2Config& c = config;
  const int64_t M = batch * length, D = c.d_model, E = c.d_inner(), in_dim = c.d_in_proj(), conv_dim = c.conv_dim();
  const int64_t H = c.nheads(), P = c.headdim, G = c.ngroups, N = c.d_state, GN = G * N;
  const float eps = static_cast<float>(c.norm_eps);
  using Ssd = LayerPlan::Ssd;

  kernels::Ssdi8ChunkScanArgs ssd;
  if (p.ssd == Ssd::kSsdi8Chunked) ssd = ssdi8_args(d, batch, length, state.ssm(l));
  if (p.in_proj.norm_prologue) {
    enqueue_linear(p.in_proj, d.in_proj, M, d.in_proj_in.scale0, nullptr, work.zxbcdt, "in_proj (with the RMSNorm)",
                   d.norm.at<float>(0));
  } else {
    kernels::AddRmsNormArgs norm;
    norm.rows = M;
    norm.dim = static_cast<int>(D);
    norm.eps = eps;
    norm.residual = work.residual;
    norm.delta = p.pending_delta ? work.out_proj_delta : nullptr;
    norm.delta_bias = p.pending_delta && previous->out_bias.bytes() ? previous->out_bias.at<float>(0) : nullptr;
    norm.weight = d.norm.at<float>(0);
    // The norm writes what in_proj multiplies: int8 (quantizing for an integer GEMM itself),
    // bf16 (the FP model), or fp32 that the point's format then copies to fp16.
    const bool int8_input = d.in_proj.int8_input();
    norm.out = int8_input ? static_cast<void*>(work.x_int8) : p.bf16 ? static_cast<void*>(work.x16) : work.normed;
    norm.out_type = int8_input ? ElementType::kS8 : p.bf16 ? ElementType::kBF16 : ElementType::kF32;
    norm.out_scale = d.in_proj_in.scale0;
    cuda_ok(kernels::launch_add_rmsnorm(norm, stream), "rmsnorm");
    if (!int8_input && !p.bf16) {
      enqueue_format(d.in_proj_in, work.normed, M, D, D, reader_of(d.in_proj), "in_proj input");
      observe(l, ActivationPoint::kInProjIn, work.normed, M, D, D);
    }
    if (p.split_in_proj) {
      enqueue_split_in_proj(d, M, p.tables_early ? &ssd : nullptr);
      ssd.tables_ready = p.tables_early;
    } else {
      enqueue_linear(p.in_proj, d.in_proj, M, d.in_proj_in.scale0, nullptr, work.zxbcdt, "in_proj", nullptr, nullptr,
                     work.normed);
    }
  }
  observe(l, ActivationPoint::kConvIn, work.zxbcdt + d.xbc_at, M, conv_dim, in_dim);

  kernels::CausalConv1dArgs conv = conv_args(d, batch, length, state.conv(l), p.split_in_proj);
  if (p.window && state.window.replaying) add_window_replay(conv, state, l);
  if (p.ssd == Ssd::kSsdi8Chunked) {  // the SSDi8 kernel's operands: fp16 x (ssd.x's format), int8 B|C rows
    conv.out = nullptr;
    conv.part_count = 2;
    conv.parts[0] = {work.x16, 0, E, ElementType::kF16};
    conv.parts[1] = {work.ssdi8_bc, static_cast<int>(E), 2 * GN, ElementType::kS8};
  } else if (p.ssd == Ssd::kFloatChunked && !p.bf16) {  // the chunked scan's operands: x|B|C formatted, then rounded to fp16
    conv.out = nullptr;
    conv.part_count = 1;
    conv.parts[0] = {work.conv_out, 0, conv_dim, ElementType::kF16};
  }
  if (p.ssd != Ssd::kConvStep)
    cuda_ok(kernels::launch_causal_conv1d(conv, stream), "causal_conv1d (with the x|B|C formats)");
  if (p.split_in_proj) cuda_ok(cudaStreamWaitEvent(stream, join_event, 0), "cudaStreamWaitEvent");  // z|dt written
  if (p.dt_format_pass) enqueue_format(d.ssd_dt, work.zxbcdt + d.dt_at, M, H, in_dim, Reader::kFloat32, "ssd dt");
  if (options.observer) {  // the conv wrote fp32 x|B|C (the recurrence's inputs) under fp32_float_math
    observe(l, ActivationPoint::kSsdX, work.conv_out, M, E, conv_dim);
    observe(l, ActivationPoint::kSsdB, work.conv_out + E, M, GN, conv_dim);
    observe(l, ActivationPoint::kSsdC, work.conv_out + E + GN, M, GN, conv_dim);
    observe(l, ActivationPoint::kSsdDt, work.zxbcdt + d.dt_at, M, H, in_dim);
    if (length > 1 && options.observer->watches_ssd_inputs()) observe_ssd_inputs(d, batch, length, state, l);
  }

  switch (p.ssd) {
    case Ssd::kSsdi8Chunked:
      cuda_ok(kernels::launch_ssdi8_chunk_scan(ssd, stream), "ssdi8_chunk_scan");
      break;
    case Ssd::kFloatChunked:
      cuda_ok(kernels::launch_ssd_chunk_scan(float_ssd_args(d, batch, length, state.ssm(l)), stream),
              "ssd_chunk_scan (float SSD)");
      break;
    case Ssd::kConvStep: {
      kernels::SsdConvStepArgs conv_step;
      conv_step.conv = conv;
      conv_step.step = state_update_args(d, batch, length, state.ssm(l));
      conv_step.arrivals = work.arrivals;
      cuda_ok(kernels::launch_ssd_conv_step(conv_step, stream), "causal_conv1d + ssd_state_update");
      break;
    }
    case Ssd::kRecurrence: {
      kernels::SsdStateUpdateArgs step = state_update_args(d, batch, length, state.ssm(l), p.window);
      if (p.window && state.window.replaying) add_window_replay(step, state, l);
      cuda_ok(kernels::launch_ssd_state_update(step, stream), "ssd_state_update");
      break;
    }
  }
  if (p.state_format_pass)
    enqueue_format(d.state_format, static_cast<float*>(state.ssm(l)), batch * H * P, N, N, Reader::kFloat32, "ssd state");

  observe(l, ActivationPoint::kSsdY, work.y, M, E, E);
  enqueue_gated_norm(d, p, M, l);
  if (p.gated_out == LayerPlan::GatedOut::kFp32ThenFormat) observe(l, ActivationPoint::kOutProjIn, work.gated, M, E, E);
  if (stop_at_out_proj) return;
  kernels::L2Prefetch next_weights[kernels::kL2PrefetchRanges];
  if (p.prefetch_next_in_proj) next_in_proj_prefetch(layers[l + 1], next_weights);
  const float* bias = d.out_bias.bytes() ? d.out_bias.at<float>(0) : nullptr;
  float* out = p.out_proj.residual_add ? work.residual : p.all_reduce.empty() ? work.out_proj_delta : tp_partial(M, l);
  enqueue_linear(p.out_proj, d.out_proj, M, d.out_proj_in.scale0, p.all_reduce.empty() ? bias : nullptr, out,
                 "out_proj", p.out_proj.gated_norm_prologue ? d.gated_norm.at<float>(0) : nullptr,
                 p.prefetch_next_in_proj ? next_weights : nullptr, work.gated);
  if (!p.out_proj.residual_add) observe(l, ActivationPoint::kOutProjOut, out, M, D, D);
  if (p.all_reduce.empty()) return;
  kernels::TpReduceArgs sum;
  sum.rows = M;
  sum.width = D;
  sum.residual = work.residual;
  sum.bias = bias;
  sum.folded_norm = options.folded_norm_width > 0;
  sum.norm_width = static_cast<float>(options.folded_norm_width);
  sum.eps = eps;
  options.communicator->sum_into_residual(sum, out, stream);
}

void CudaBackend::Impl::observe(int64_t layer, ActivationPoint point, const float* data, int64_t rows, int64_t width,
                                int64_t stride) const {
  if (options.observer && options.observer->watches(point))
    options.observer->on_activation(layer, point, data, rows, width, stride, stream);
}

void CudaBackend::Impl::observe_ssd_inputs(const DeviceLayer& d, int64_t batch, int64_t length, CudaState& state,
                                           int64_t l) const {
  const Mamba2Config& c = config;
  const int64_t E = c.d_inner(), GN = c.ngroups * c.d_state;
  DeviceSsdInputs in;
  in.batch = batch;
  in.length = length;
  in.chunk = c.chunk_size;
  in.x = work.conv_out;
  in.x_stride = c.conv_dim();
  in.B = work.conv_out + E;
  in.C = work.conv_out + E + GN;
  in.bc_stride = c.conv_dim();
  in.dt_raw = work.zxbcdt + d.dt_at;
  in.dt_stride = c.d_in_proj();
  in.dt_bias = d.dt_bias.at<float>(0);
  in.A = d.A.at<float>(0);
  in.dt_min = static_cast<float>(c.dt_min);
  in.dt_max = static_cast<float>(std::min<double>(c.dt_max, 3e38));
  in.initial_state = static_cast<const float*>(state.ssm(l));
  options.observer->on_ssd_inputs(l, in, stream);
}

float* CudaBackend::Impl::tp_partial(int64_t M, int64_t l) const {
  return options.communicator->partial_buffer(tp_message_floats(M), exchange_slot(l, false), work.out_proj_delta);
}

void CudaBackend::Impl::enqueue_gated_norm_parts(const DeviceLayer& d, int64_t M, int64_t l) const {
  const Mamba2Config& c = config;
  const int64_t E = c.d_inner();
  kernels::GatedNormPartsArgs a;
  a.rows = M;
  a.width = static_cast<int>(E);
  a.y = work.y;
  a.z = work.zxbcdt;
  a.z_stride = c.d_in_proj();
  a.groups = static_cast<int>(norm_groups());
  a.first_group = static_cast<int>(options.norm_first_group);
  a.group_size = static_cast<int>(shared_norm() ? options.norm_group_size : E / c.ngroups);
  a.local_group_size = static_cast<int>(std::min<int64_t>(E, a.group_size));
  a.eps = static_cast<float>(c.norm_eps);
  a.weight = d.gated_norm.at<float>(0);
  a.sums_count = norm_sums_floats(M);
  a.out = work.y;
  if (!shared_norm()) {
    a.sums = work.norm_sums;
    cuda_ok(kernels::launch_gated_sum_squares(a, stream), "gated norm: sums of squares");
  } else {
    // The rank's sums, zero in the other ranks' groups, summed over the ranks into work.norm_sums.
    a.sums = options.communicator->partial_buffer(a.sums_count, exchange_slot(l, true), work.norm_partial);
    cuda_ok(kernels::launch_gated_sum_squares(a, stream), "gated norm: this rank's sums of squares");
    kernels::TpReduceArgs sum;
    sum.rows = 1;
    sum.width = a.sums_count;
    sum.residual = work.norm_sums;
    sum.assign = true;
    options.communicator->sum_into_residual(sum, a.sums, stream);
    a.sums = work.norm_sums;
  }
  cuda_ok(kernels::launch_gated_norm_scale(a, stream), "gated norm: scale");
}

void CudaBackend::Impl::enqueue_gated_norm(const DeviceLayer& d, const LayerPlan& p, int64_t M, int64_t l) const {
  const Mamba2Config& c = config;
  const int64_t E = c.d_inner(), in_dim = c.d_in_proj(), G = c.ngroups;
  const float eps = static_cast<float>(c.norm_eps);
  if (p.gated_out == LayerPlan::GatedOut::kInOutProjPrologue) return;
  if (p.gated_out == LayerPlan::GatedOut::kBf16) {
    kernels::GatedRmsNormArgs g;
    g.rows = M;
    g.width = static_cast<int>(E);
    g.group_size = static_cast<int>(E / G);
    g.eps = eps;
    g.y = reinterpret_cast<const bf16*>(work.y);
    g.z = reinterpret_cast<const bf16*>(work.zxbcdt);
    g.z_stride = in_dim;
    g.weight = d.gated_norm.at<float>(0);
    g.out = reinterpret_cast<bf16*>(work.x16);
    if (!p.all_reduce.empty() && options.folded_norm_width) g.sum_squares = tp_partial(M, l) + M * c.d_model;
    cuda_ok(kernels::launch_gated_rmsnorm(g, stream), "gated_rmsnorm");
    return;
  }
  kernels::HadamardQuantArgs gated;
  gated.rows = M;
  gated.n = static_cast<int>(E);
  gated.y = work.y;
  gated.ldy = E;
  gated.z = work.zxbcdt;
  gated.z_stride = in_dim;
  gated.z_before_previous_grid = true;  // in_proj wrote z, and the SSD ran since
  gated.norm_weight = d.gated_norm.at<float>(0);
  gated.group_size = static_cast<int>(E / G);
  gated.eps = eps;
  if (norm_in_parts(d)) {
    // y normalised in place first; then the rotation (in blocks: M·B rows of E/B) and the format.
    enqueue_gated_norm_parts(d, M, l);
    gated.z = nullptr;
    gated.z_before_previous_grid = false;
    gated.rows = M * d.hadamard_blocks;
    gated.n = static_cast<int>(E / d.hadamard_blocks);
    gated.ldy = gated.n;
  }
  gated.rotate = d.online_hadamard;
  if (d.online_hadamard) {
    gated.base_order = hadamard_order;
    gated.base_matrix = hadamard_order > 1 ? hadamard_base.at<int8_t>(0) : nullptr;
    gated.base_matrix_host = hadamard_order > 1 ? hadamard_base_host.data() : nullptr;
    gated.normalize = static_cast<float>(1.0 / std::sqrt(static_cast<double>(gated.n)));
  }
  switch (p.gated_out) {
    case LayerPlan::GatedOut::kInt8:
      gated.out = work.x_int8;
      gated.out_type = ElementType::kS8;
      gated.out_scale = d.out_proj_in.scale0;
      cuda_ok(kernels::launch_hadamard_quant(gated, stream), "gated norm + Hadamard + int8");
      break;
    case LayerPlan::GatedOut::kFp16:
      gated.out = work.x16;
      gated.out_type = ElementType::kF16;
      cuda_ok(kernels::launch_hadamard_quant(gated, stream), "gated norm + Hadamard");
      break;
    case LayerPlan::GatedOut::kFp32ThenFormat:
      gated.out = work.gated;
      gated.out_type = ElementType::kF32;
      cuda_ok(kernels::launch_hadamard_quant(gated, stream), "gated norm + Hadamard");
      enqueue_format(d.out_proj_in, work.gated, M, E, E, reader_of(d.out_proj), "out_proj input");
      break;
    default:
      fail("internal: gated norm output {} is the FP model's", static_cast<int>(p.gated_out));
  }
}

void CudaBackend::Impl::enqueue_body(int64_t batch, int64_t length, CudaState& state, bool window) const {
  const Mamba2Config& c = config;
  const int64_t M = batch * length, D = c.d_model;
  const ForwardPlan& plan = forward_plan(batch, length, state, window);
  if (window && state.window.replaying)  // the replay's counts, copied inside the window's graph as the tokens are
    cuda_ok(cudaMemcpyAsync(state.window.steps, state.window.host_steps.get(CudaState::Window::steps_entries(batch)),
                            CudaState::Window::steps_entries(batch) * 4,
                            cudaMemcpyHostToDevice, stream),
            "copy replay counts");
  kernels::EmbeddingArgs e;
  e.rows = M;
  e.dim = static_cast<int>(D);
  e.tokens = work.tokens;
  e.table = embedding.at<void>(0);
  e.table_type = embedding_table;
  e.row_scales = embedding_scales.bytes() ? embedding_scales.at<float>(0) : nullptr;
  e.out = work.residual;
  cuda_ok(kernels::launch_embedding(e, stream), "embedding");
  {
    // A window's layers write in_proj's and the conv's outputs to the state's window buffers.
    WorkRedirect redirect(work);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      if (window) redirect.to(state.window_zxbcdt(l, state.window.next_set()), state.window_conv_out(l, state.window.next_set()));
      enqueue_layer(layers[l], plan.layers[l], batch, length, state, l, l > 0 ? &layers[l - 1] : nullptr);
    }
  }
  const DeviceLayer& last = layers.back();
  kernels::AddRmsNormArgs norm;
  norm.rows = M;
  norm.dim = static_cast<int>(D);
  norm.eps = static_cast<float>(c.norm_eps);
  norm.residual = work.residual;
  norm.delta = plan.final_pending_delta ? work.out_proj_delta : nullptr;
  norm.delta_bias = plan.final_pending_delta && last.out_bias.bytes() ? last.out_bias.at<float>(0) : nullptr;
  norm.weight = norm_f.at<float>(0);
  if (bf16_model) {  // the bf16 head's input
    norm.out = work.x16;
    norm.out_type = ElementType::kBF16;
    cuda_ok(kernels::launch_add_rmsnorm(norm, stream), "final rmsnorm");
    return;
  }
  norm.out = work.normed;
  norm.out_type = ElementType::kF32;
  cuda_ok(kernels::launch_add_rmsnorm(norm, stream), "final rmsnorm");
  enqueue_format(DeviceFormat{}, work.normed, M, D, D, Reader::kFloat16, "lm_head input");
}

void CudaBackend::Impl::enqueue_head_gather(int64_t rows) const {
  if (!options.head_rows) return;
  const int64_t slice = options.head_rows;
  const int ranks = options.communicator->size();
  options.communicator->all_gather(work.head_slice, work.gathered, rows * slice, stream);
  if (!writes_outputs()) return;
  for (int q = 0; q < ranks; ++q)  // rank q's [rows, slice] into columns [q · slice, (q + 1) · slice)
    cuda_ok(cudaMemcpy2DAsync(work.logits + q * slice, config.vocab_size * 4, work.gathered + q * rows * slice,
                              slice * 4, slice * 4, rows, cudaMemcpyDeviceToDevice, stream),
            "lay out the gathered logits");
}

bool CudaBackend::Impl::enqueue_head_gemv(const uint16_t* x, int64_t ldx, int64_t rows) const {
  if (!head_q.bytes()) {
    // CudaBackendOptions::rows_alone: the FP model's head at decode's few rows by the bf16 GEMV,
    // each row as it is alone (as the layers' projections), where cuBLASLt's order of sums would
    // depend on the rows.
    const auto [weights, type] = head_weights();
    if (!options.rows_alone || type != ElementType::kBF16 || rows > kernels::kGemvMaxRows) return false;
    kernels::GemvArgs g;
    g.m = static_cast<int>(rows);
    g.n = static_cast<int>(head_vocab());
    g.k = static_cast<int>(config.d_model);
    g.x = reinterpret_cast<const __nv_bfloat16*>(x);
    g.ldx = ldx;
    g.w = static_cast<const __nv_bfloat16*>(weights);
    g.out = head_out();
    g.ldout = head_vocab();
    g.out_type = ElementType::kF32;
    if (!kernels::gemv_supported(g)) return false;
    cuda_ok(kernels::launch_gemv(g, stream), "lm_head (bf16 GEMV)");
    return true;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += kernels::kQgemvMaxRows) {
    kernels::QgemvArgs q = head_gemv_args(reinterpret_cast<const __half*>(x) + r0 * ldx, ldx);
    q.m = static_cast<int>(std::min<int64_t>(kernels::kQgemvMaxRows, rows - r0));
    q.out = head_out() + r0 * head_vocab();
    cuda_ok(kernels::launch_qgemv(q, stream), "lm_head (quantized)");
  }
  return true;
}

}  // namespace ssdq
