// The kernels' argument structs for a layer's weights and the workspace's buffers, shared by the
// planner (which checks them) and the executor (which launches them).
#include "runtime/cuda_engine.h"

namespace ssdq {

kernels::SsdChunkScanArgs CudaBackend::Impl::float_ssd_args(const DeviceLayer& d, int64_t batch, int64_t length, void* ssm) const {
  const Mamba2Config& c = config;
  const int64_t E = c.d_inner(), GN = c.ngroups * c.d_state, conv_dim = c.conv_dim();
  kernels::SsdChunkScanArgs a = ssd_chunk_shape(config, batch, length);
  // 16-bit operands in both cases: the artifact's conv writes fp16 over conv_out's bytes.
  const auto* xbc = reinterpret_cast<const uint16_t*>(work.conv_out);
  a.operand_type = bf16_model ? ElementType::kBF16 : ElementType::kF16;
  a.x = xbc;
  a.x_row_stride = conv_dim;
  a.B = xbc + E;
  a.C = xbc + E + GN;
  a.bc_row_stride = conv_dim;
  a.dt_raw = act_at(work.zxbcdt, d.dt_at);
  a.dt_row_stride = c.d_in_proj();
  a.dt_type = act_type();
  if (d.dt_format_in_kernel()) a.dt_format = d.dt_code;
  a.dt_bias = d.dt_bias.at<float>(0);
  a.A = d.A.at<float>(0);
  a.D = d.D.at<float>(0);
  a.dt_min = static_cast<float>(c.dt_min);
  a.dt_max = static_cast<float>(std::min<double>(c.dt_max, 3e38));
  a.state = ssm;
  set_state_scales(d, a);
  a.y = work.y;
  a.y_type = act_type();
  a.workspace = work.chunk_scan_workspace;
  return a;
}

kernels::GemmS8GroupedArgs CudaBackend::Impl::grouped_gemm_args(const DeviceLinear& L, int64_t m, const int8_t* w8, float x_scale,
                                             const float* bias, float* out, bool residual_add) const {
  auto f = integer_gemm_args<kernels::GemmS8GroupedArgs>(L, m, w8, x_scale, bias, out, residual_add);
  f.group_size = L.group_size;
  return f;
}

kernels::QgemvArgs CudaBackend::Impl::qgemv_args(const DeviceLinear& L, int64_t m, float x_scale) const {
  using Path = DeviceLinear::Path;
  kernels::QgemvArgs q;
  q.kind = L.path == Path::kInt8PerChannel ? kernels::QgemvKind::kW8A8
           : L.path == Path::kInt8Grouped  ? kernels::QgemvKind::kW4A8
                                           : kernels::QgemvKind::kW4A16;
  q.m = static_cast<int>(m);
  q.n = static_cast<int>(L.n);
  q.k = static_cast<int>(L.k);
  q.x_int8 = work.x_int8;
  q.x_f16 = work.x16;
  q.ldx = L.k;
  q.x_scale = x_scale;
  q.w = L.values.at<void>(0);
  q.w_scales = L.scales.at<float>(0);
  q.group_size = L.group_size;
  q.out = work.out_proj_delta;  // the caller's output; the check only needs one
  q.ldout = L.n;
  return q;
}

kernels::GemvArgs CudaBackend::Impl::bf16_gemv_args(const DeviceLinear& L, int64_t m, void* out, GemvOutput output,
                                 const float* norm_weight, GemvPrologue prologue) const {
  const Mamba2Config& c = config;
  kernels::GemvArgs g;
  g.m = static_cast<int>(m);
  g.n = static_cast<int>(L.n);
  g.k = static_cast<int>(L.k);
  g.x = reinterpret_cast<const bf16*>(work.x16);
  g.ldx = L.k;
  g.w = L.dense16.at<bf16>(0);
  g.out = out;
  g.ldout = L.n;
  g.out_type = output == GemvOutput::kBf16 ? ElementType::kBF16 : ElementType::kF32;
  g.accumulate = output == GemvOutput::kResidualAdd;
  g.eps = static_cast<float>(c.norm_eps);
  g.norm_weight = norm_weight;
  // A window's rows (more than 4) have their norms built once into x16, free while a prologue
  // builds the input (the normalised rows go nowhere else).
  if (prologue != GemvPrologue::kNone) g.staged = reinterpret_cast<bf16*>(work.x16);
  if (prologue == GemvPrologue::kRmsNorm) {
    g.input = kernels::GemvInput::kRmsNorm;
    g.residual = work.residual;
  } else if (prologue == GemvPrologue::kGatedRmsNorm) {
    g.input = kernels::GemvInput::kGatedRmsNorm;
    g.y = reinterpret_cast<const bf16*>(work.y);
    g.z = reinterpret_cast<const bf16*>(work.zxbcdt);
    g.z_stride = c.d_in_proj();
    g.group_size = static_cast<int>(c.d_inner() / c.ngroups);
    if (output == GemvOutput::kTpPartial && options.folded_norm_width)
      g.sum_squares = static_cast<float*>(out) + m * L.n;
  }
  return g;
}

kernels::GemmW4A16Args CudaBackend::Impl::w4a16_args(const DeviceLinear& L, int64_t m, float* out) const {
  kernels::GemmW4A16Args mixed;
  mixed.m = m;
  mixed.n = L.n;
  mixed.k = L.k;
  mixed.x = work.x16;
  mixed.ldx = L.k;
  mixed.w = L.values.at<void>(0);
  mixed.w_scales = L.scales.at<float>(0);
  mixed.group_size = L.group_size;
  mixed.out = out;
  mixed.ldout = L.n;
  mixed.workspace = work.expanded;
  return mixed;
}

std::pair<kernels::GemmS8ScaledArgs, kernels::GemmS8ScaledArgs> CudaBackend::Impl::split_in_proj_args(const DeviceLayer& d,
                                                                                  int64_t m) const {
  const Mamba2Config& c = config;
  const DeviceLinear& L = d.in_proj;
  auto z_dt = integer_gemm_args<kernels::GemmS8ScaledArgs>(L, m, L.values.at<int8_t>(0), d.in_proj_in.scale0, nullptr,
                                                            work.zxbcdt, /*residual_add=*/false);
  z_dt.n = d.xbc_at;
  kernels::GemmS8ScaledArgs xbc = z_dt;
  xbc.n = c.conv_dim();
  xbc.w = L.values.at<int8_t>(0) + d.xbc_at * L.k;
  xbc.w_scales = L.scales.at<float>(0) + d.xbc_at;
  xbc.out = work.xbc_int8;
  xbc.ldout = c.conv_dim();
  xbc.out_type = ElementType::kS8;
  xbc.out_scales = d.conv_in_codes.at<float>(0);
  return {z_dt, xbc};
}

kernels::Ssdi8ChunkScanArgs CudaBackend::Impl::ssdi8_args(const DeviceLayer& d, int64_t batch, int64_t length, void* ssm_state) const {
  const Mamba2Config& c = config;
  const int64_t E = c.d_inner(), H = c.nheads(), P = c.headdim, G = c.ngroups, N = c.d_state, GN = G * N;
  kernels::Ssdi8ChunkScanArgs s;
  s.batch = static_cast<int>(batch);
  s.seqlen = static_cast<int>(length);
  s.heads = static_cast<int>(H);
  s.headdim = static_cast<int>(P);
  s.groups = static_cast<int>(G);
  s.dstate = static_cast<int>(N);
  s.chunk = static_cast<int>(c.chunk_size);
  s.x = work.x16;
  s.x_stride = E;
  s.Bq = work.ssdi8_bc;
  s.Cq = work.ssdi8_bc + GN;
  s.bc_stride = 2 * GN;
  s.dt_raw = work.zxbcdt + d.dt_at;
  s.dt_stride = c.d_in_proj();
  s.dt_bias = d.dt_bias.at<float>(0);
  s.dt_min = static_cast<float>(c.dt_min);
  s.dt_max = static_cast<float>(std::min<double>(c.dt_max, 3e38));
  if (d.dt_format_in_kernel()) s.dt_format = d.dt_code;
  s.A = d.A.at<float>(0);
  s.D = d.D.at<float>(0);
  s.B_scales = d.s_B.at<float>(0);
  s.C_scales = d.s_C.at<float>(0);
  s.x_scaled_scales = d.s_xs.at<float>(0);
  s.state_scales = d.s_s.at<float>(0);
  s.cb_scales = d.s_cb.at<float>(0);
  s.state = static_cast<int8_t*>(ssm_state);
  s.y = work.y;
  s.y_stride = E;
  s.workspace = work.ssdi8_workspace;
  if (!kernels::ssdi8_chunk_scan_supported(s))
    fail("CUDA: the SSDi8 kernel does not support heads {} × headdim {}, d_state {}, chunk {} on this device", H, P,
         N, c.chunk_size);
  return s;
}

kernels::SsdStateUpdateArgs CudaBackend::Impl::state_update_args(const DeviceLayer& d, int64_t batch, int64_t length, void* ssm_state,
                                                               bool window) const {
  const Mamba2Config& c = config;
  const int64_t E = c.d_inner(), H = c.nheads(), P = c.headdim, G = c.ngroups, N = c.d_state, GN = G * N;
  const int64_t conv_dim = c.conv_dim();
  kernels::SsdStateUpdateArgs step;
  step.batch = static_cast<int>(batch);
  step.heads = static_cast<int>(H);
  step.headdim = static_cast<int>(P);
  step.groups = static_cast<int>(G);
  step.dstate = static_cast<int>(N);
  step.steps = static_cast<int>(length);
  step.round_every_step = window;
  step.io_type = act_type();
  step.x = work.conv_out;
  step.x_stride = conv_dim;
  step.B = act_at(work.conv_out, E);
  step.C = act_at(work.conv_out, E + GN);
  step.bc_stride = conv_dim;
  step.dt = act_at(work.zxbcdt, d.dt_at);
  step.dt_stride = c.d_in_proj();
  if (d.dt_format_in_kernel()) step.dt_format = d.dt_code;
  step.dt_bias = d.dt_bias.at<float>(0);
  step.dt_min = static_cast<float>(c.dt_min);
  step.dt_max = static_cast<float>(std::min<double>(c.dt_max, 3e38));
  step.A = d.A.at<float>(0);
  step.D = d.D.at<float>(0);
  step.state = ssm_state;
  set_state_scales(d, step);
  step.state_fp16_values = !d.int8_state && d.state_format.format == Format::kFloat16;
  step.y = work.y;
  step.y_stride = E;
  return step;
}

void CudaBackend::Impl::next_in_proj_prefetch(const DeviceLayer& next, kernels::L2Prefetch (&to)[kernels::kL2PrefetchRanges]) const {
  const auto range = [](const DeviceBlock& b, size_t limit) {
    kernels::L2Prefetch r;
    r.p = b.bytes() ? b.at<void>(0) : nullptr;
    r.bytes = static_cast<long long>(std::min(b.bytes(), limit) / 16 * 16);
    return r;
  };
  to[0] = range(next.in_proj.values, static_cast<size_t>(kL2PrefetchL2Share * device.l2_cache_bytes));
  to[1] = range(next.in_proj.scales, next.in_proj.scales.bytes());
}

kernels::CausalConv1dArgs CudaBackend::Impl::conv_args(const DeviceLayer& d, int64_t batch, int64_t length, void* conv_state,
                                    bool xbc_int8) const {
  const Mamba2Config& c = config;
  kernels::CausalConv1dArgs conv;
  conv.batch = static_cast<int>(batch);
  conv.seqlen = static_cast<int>(length);
  conv.channels = static_cast<int>(c.conv_dim());
  conv.width = static_cast<int>(c.d_conv);
  conv.in = act_at(work.zxbcdt, d.xbc_at);
  conv.in_stride = c.d_in_proj();
  if (xbc_int8) {  // x|B|C as conv.in's int8 codes
    conv.in = work.xbc_int8;
    conv.in_stride = c.conv_dim();
  }
  conv.weight = d.conv_weight.at<float>(0);
  conv.bias = d.conv_bias.at<float>(0);
  conv.state = conv_state;
  conv.out = work.conv_out;
  conv.in_type = xbc_int8 ? ElementType::kS8 : act_type();
  conv.out_type = act_type();
  conv.in_formats = d.conv_in_codes.bytes() ? d.conv_in_codes.at<float>(0) : nullptr;
  conv.out_formats = d.conv_out_codes.bytes() ? d.conv_out_codes.at<float>(0) : nullptr;
  return conv;
}

kernels::QgemvArgs CudaBackend::Impl::head_gemv_args(const __half* x, int64_t ldx) const {
  kernels::QgemvArgs q;
  q.kind = head_q_kind;
  q.m = 1;
  q.n = static_cast<int>(head_vocab());
  q.k = static_cast<int>(config.d_model);
  q.x_f16 = x;
  q.ldx = ldx;
  q.w = head_q.bytes() ? head_q.at<void>(0) : nullptr;
  q.w_scales = head_q_scales.bytes() ? head_q_scales.at<float>(0) : nullptr;
  q.w_mma_layout = head_q_mma;
  q.group_size = head_q_group;
  q.out = head_out();
  q.ldout = head_vocab();
  q.out_type = ElementType::kF32;
  return q;
}

}  // namespace ssdq
