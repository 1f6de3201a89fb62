// What each step of a layer runs for one (batch, length), decided once into a LayerPlan
// (runtime/cuda_plan.h) by capability checks on the arguments it will be launched with.
#include "runtime/cuda_engine.h"

namespace ssdq {
namespace {

// Where one schedule takes over from another, each set by measurement; the per-shape timings
// behind every threshold are in docs/kernels/gemm.md, "Schedule thresholds".
// Rows up to which a W8A8 projection runs the GEMV rather than the int8 GEMM + scaling pass.
constexpr int64_t kW8A8GemvMaxRows = 4;
// W4A8 likewise (the grouped GEMM with the int4 → int8 unpack wins from 8 rows).
constexpr int64_t kW4A8GemvMaxRows = 4;
// Rows up to which the grouped GEMM reads int4 weights packed (its 32 × 64 mma.sync tiles); above,
// unpacking them to int8 first and running the large tiles is faster.
constexpr int64_t kGroupedInt4MaxRows = 64;
// Where a W4A16 projection at prefill (above kGemmW4A16FewRows rows) expands its int4 weights to
// fp16 for cuBLASLt rather than running CUTLASS's mixed-input GEMM: into fewer columns than this,
// and above this many rows, the expansion's fixed cost is paid off by cuBLASLt's faster GEMM.
constexpr int64_t kW4A16ExpandBelowColumns = 4096;
constexpr int64_t kW4A16ExpandAboveRows = 4096;
// Batches up to which a decode step runs the conv inside the state update's launch
// (kernels/ssd_conv_step.h): every block repeats its group's B|C convolutions, which pays while
// the step waits on latency, not at full occupancy.
constexpr int64_t kConvStepMaxBatch = 8;
// Rows from which a per-channel int8 projection runs the fused sm_90 GEMM (kernels/gemm_s8_scaled.h)
// rather than cuBLASLt + the scaling pass (slower for decode batches).
constexpr int64_t kFusedS8GemmMinRows = 64;

}  // namespace

bool CudaBackend::Impl::decode_gemv(const DeviceLinear& L, int64_t m, float x_scale, kernels::QgemvArgs& q) const {
  using Path = DeviceLinear::Path;
  // The integer GEMVs do not scale with rows: above kW8A8GemvMaxRows (W8A8) and
  // kW4A8GemvMaxRows (W4A8, where the grouped GEMM runs) the GEMM wins.
  const bool grouped_gemm =
      L.path == Path::kInt8Grouped &&
      kernels::gemm_s8_grouped_supported(grouped_gemm_args(L, m, work.x_int8, x_scale, nullptr, work.out_proj_delta, false));
  const int64_t max_rows = L.path == Path::kInt8PerChannel ? kW8A8GemvMaxRows
                           : grouped_gemm                  ? kW4A8GemvMaxRows
                                                           : kernels::kQgemvMaxRows;
  if (m > max_rows || L.path == Path::kFp32 || (L.path == Path::kFp16Input && L.bits != 4) ||
      (L.path == Path::kInt8Grouped && L.bits == 8))
    return false;
  q = qgemv_args(L, m, x_scale);
  return kernels::qgemv_supported(q);
}

bool CudaBackend::Impl::adds_into_residual(const DeviceLinear& L, int64_t m) const {
  kernels::QgemvArgs q;
  return L.int8_input() || decode_gemv(L, m, 1.f, q);
}

bool CudaBackend::Impl::norm_in_gemv(const DeviceLayer& d, int64_t m) const {
  kernels::QgemvArgs q;
  if (m != 1 && !options.rows_alone) return false;  // rows_alone: each row normalised as at one row
  if (!d.in_proj.int8_input() || !decode_gemv(d.in_proj, m, d.in_proj_in.scale0, q)) return false;
  q.norm_residual = work.residual;
  q.norm_weight = d.norm.at<float>(0);
  return kernels::qgemv_supported(q);
}

LinearPlan CudaBackend::Impl::plan_linear(const DeviceLinear& L, int64_t m, float x_scale, const float* bias, float* out,
                       bool residual_add, const float* norm_weight) const {
  using Path = DeviceLinear::Path;
  using Schedule = LinearPlan::Schedule;
  LinearPlan p;
  p.residual_add = residual_add;
  p.norm_prologue = norm_weight != nullptr;
  p.weight_bits = L.bits;
  p.int8_input = L.int8_input();
  p.groups = L.groups;
  if (L.path == Path::kBf16) fail("internal: bf16 projections are planned by plan_bf16_layer");
  if (L.path == Path::kFp32) {
    if (norm_weight || residual_add) fail("internal: an fp32 projection cannot fuse the norm or the residual add");
    p.schedule = Schedule::kFp32Gemm;
    p.fp32 = true;
    p.tf32 = options.tf32_gemms;
    return p;
  }
  kernels::QgemvArgs q;
  if (decode_gemv(L, m, x_scale, q)) {
    p.schedule = Schedule::kQgemv;
    return p;
  }
  if (norm_weight || (residual_add && L.path == Path::kFp16Input))
    fail("internal: a projection at {} rows cannot fuse the norm or the residual add", m);
  if (L.path == Path::kFp16Input) {
    const bool w16 = L.dense16.bytes() != 0;
    // W4A16: the int4 weights dequantized in the GEMM's registers, except where expanding them
    // for cuBLASLt measured faster (kW4A16ExpandBelowColumns, kW4A16ExpandAboveRows).
    const bool expand_first =
        m > kW4A16ExpandAboveRows || (m > kernels::kGemmW4A16FewRows && L.n < kW4A16ExpandBelowColumns);
    if (!w16 && L.bits == 4 && !expand_first) {
      const kernels::GemmW4A16Args mixed = w4a16_args(L, m, out);
      if (kernels::gemm_w4a16_workspace_bytes(mixed) <= expand_bytes && kernels::gemm_w4a16_supported(mixed)) {
        p.schedule = Schedule::kW4A16Mixed;
        return p;
      }
    }
    p.schedule = Schedule::kFp16Gemm;
    p.unpack_first = !w16;
    return p;
  }
  const int8_t* w8 = L.values.at<int8_t>(0);
  if (L.bits == 4 && L.groups > 1 && m <= kGroupedInt4MaxRows) {  // int4 read packed, no unpack pass
    kernels::GemmS8GroupedArgs packed = grouped_gemm_args(L, m, w8, x_scale, bias, out, residual_add);
    packed.w_bits = 4;
    if (kernels::gemm_s8_grouped_supported(packed)) {
      p.schedule = Schedule::kGroupedInt4Packed;
      return p;
    }
  }
  p.unpack_first = L.bits == 4;
  if (p.unpack_first) w8 = static_cast<const int8_t*>(work.expanded);
  if (L.groups == 1 && m >= kFusedS8GemmMinRows) {  // sm_90: the scaling in the GEMM's epilogue
    if (kernels::gemm_s8_scaled_supported(
            integer_gemm_args<kernels::GemmS8ScaledArgs>(L, m, w8, x_scale, bias, out, residual_add))) {
      p.schedule = Schedule::kS8Scaled;
      return p;
    }
  }
  if (L.groups > 1 && kernels::gemm_s8_grouped_supported(grouped_gemm_args(L, m, w8, x_scale, bias, out, residual_add))) {
    p.schedule = Schedule::kGrouped;  // the group chain in the GEMM's registers
    return p;
  }
  p.schedule = Schedule::kImmaPerGroup;  // one cuBLASLt GEMM per weight group, the chain through memory
  return p;
}

bool CudaBackend::Impl::runs_split_in_proj(const DeviceLayer& d, int64_t m) const {
  if (!d.split_in_proj || m < kFusedS8GemmMinRows) return false;
  const auto [z_dt, xbc] = split_in_proj_args(d, m);
  return kernels::gemm_s8_scaled_supported(z_dt) && kernels::gemm_s8_scaled_supported(xbc);
}

LayerPlan CudaBackend::Impl::plan_layer(const DeviceLayer& d, int64_t batch, int64_t length, CudaState& state, int64_t l,
                     const LayerPlan* previous, bool window) const {
  if (bf16_model) return plan_bf16_layer(d, batch, length, state, l, window);
  const Mamba2Config& c = config;
  const int64_t M = batch * length, H = c.nheads(), P = c.headdim, G = c.ngroups, N = c.d_state;
  LayerPlan p;
  p.window = window;
  // (A tensor-parallel layer's out_proj reaches the residual through the all-reduce.)
  p.pending_delta = previous && !previous->out_proj.residual_add && previous->all_reduce.empty();
  // Several tokens a sequence run the prefill kernels, except in a verify window, which runs
  // decode's recurrence over its tokens (reading the conv's output from memory).
  const bool prefill = length > 1 && !window;
  const bool ssdi8_prefill = d.ssdi8 && prefill;
  if (!p.pending_delta && norm_in_gemv(d, M)) {
    p.in_proj = plan_linear(d.in_proj, M, d.in_proj_in.scale0, nullptr, work.zxbcdt, false, d.norm.at<float>(0));
  } else {
    // Prefill only: in a decode step the two streams cost more than the conv saves
    // (docs/kernels/gemm.md).
    p.split_in_proj = prefill && runs_split_in_proj(d, M);
    // With dt's format applied in the SSDi8 kernels, its ChunkCumsum follows dt on the second stream.
    p.tables_early = p.split_in_proj && ssdi8_prefill && d.dt_format_in_kernel();
    if (!p.split_in_proj) p.in_proj = plan_linear(d.in_proj, M, d.in_proj_in.scale0, nullptr, work.zxbcdt, false, nullptr);
  }
  if (ssdi8_prefill) ssdi8_args(d, batch, length, state.ssm(l));  // fails when the kernel does not take the shape
  const kernels::SsdChunkScanArgs chunked = float_ssd_args(d, batch, length, state.ssm(l));
  const bool float_chunked = d.fp16_chunked_ssd && prefill && kernels::ssd_chunk_scan_supported(chunked);
  // Decode, and shapes the chunked scans do not take: the recurrence over every token, exact for
  // any length; one decode token a sequence runs the conv inside the state update's launch where
  // that kernel takes the shape.
  const bool recurrence = !ssdi8_prefill && !float_chunked;
  kernels::SsdConvStepArgs conv_step;
  conv_step.conv = conv_args(d, batch, length, state.conv(l), p.split_in_proj);
  if (recurrence) conv_step.step = state_update_args(d, batch, length, state.ssm(l), window);
  conv_step.arrivals = work.arrivals;
  if (ssdi8_prefill) {
    p.ssd = LayerPlan::Ssd::kSsdi8Chunked;
  } else if (float_chunked) {
    p.ssd = LayerPlan::Ssd::kFloatChunked;
  } else if (length == 1 && !window && batch <= kConvStepMaxBatch && !options.observer &&
             kernels::ssd_conv_step_supported(conv_step)) {  // (an observer reads the conv's output rows)
    p.ssd = LayerPlan::Ssd::kConvStep;
  } else {
    if (!kernels::ssd_state_update_supported(conv_step.step))
      fail("CUDA: no SSD kernel supports heads {} × headdim {}, ngroups {}, d_state {}", H, P, G, N);
    p.ssd = LayerPlan::Ssd::kRecurrence;
  }
  p.dt_format_pass = !d.dt_format_in_kernel();
  // A float state takes its point's format (fp16 rounding, if any) once the SSD has written it: the
  // recurrence's kernels store it rounded to fp16 themselves, the chunked scans leave it to a pass
  // over the state; an int8 state (every SSDi8 layer's) is stored quantized by the kernel.
  p.state_format_pass = !d.int8_state && !(recurrence && conv_step.step.state_fp16_values) &&
                        d.state_format.format != Format::kFloat32;
  // The rotated input goes straight to the type its projection multiplies: int8 for an integer
  // GEMM (the point's per-tensor scale), fp16 for an fp16 one (an fp16 or fp32 point). Only an
  // int8 point before float weights takes the fp32 detour through the format kernel.
  p.gated_out = reader_of(d.out_proj) == Reader::kInt8                                                ? LayerPlan::GatedOut::kInt8
                : d.out_proj_in.format != Format::kInt8 && reader_of(d.out_proj) == Reader::kFloat16 ? LayerPlan::GatedOut::kFp16
                                                                                                      : LayerPlan::GatedOut::kFp32ThenFormat;
  // A tensor-parallel rank's out_proj writes fp32 partial rows; the all-reduce adds their sum and
  // the bias (once) into the residual.
  const bool tp = options.communicator != nullptr;
  // An observer of out_proj's output reads it apart from the residual.
  const bool output_watched = options.observer && options.observer->watches(ActivationPoint::kOutProjOut);
  const bool residual_add = !tp && !output_watched && adds_into_residual(d.out_proj, M);
  const float* bias = d.out_bias.bytes() && !tp ? d.out_bias.at<float>(0) : nullptr;
  p.out_proj = plan_linear(d.out_proj, M, d.out_proj_in.scale0, bias,
                           tp ? tp_partial(M, l) : residual_add ? work.residual : work.out_proj_delta, residual_add,
                           nullptr);
  p.out_proj.partial_out = tp;
  if (tp) p.all_reduce = options.communicator->route(tp_message_floats(M));
  if (norm_in_parts(d))
    p.norm_parts = shared_norm() ? fmt::format("sums of squares all-reduced ({})",
                                               options.communicator->route(norm_sums_floats(M)))
                                 : std::string("sums of squares");
  p.hadamard_blocks = d.online_hadamard ? d.hadamard_blocks : 0;
  p.prefetch_next_in_proj = M == 1 && l + 1 < static_cast<int64_t>(layers.size()) &&
                            p.out_proj.schedule == LinearPlan::Schedule::kQgemv;
  return p;
}

LayerPlan CudaBackend::Impl::plan_bf16_layer(const DeviceLayer& d, int64_t batch, int64_t length, CudaState& state, int64_t l,
                                              bool window) const {
  const Mamba2Config& c = config;
  const int64_t M = batch * length;
  LayerPlan p;
  p.bf16 = true;
  p.window = window;
  // A tensor-parallel rank's out_proj writes fp32 partial rows that the all-reduce adds into the
  // residual (the folded norm's sums of squares, from the norm or out_proj's GEMV prologue, after them).
  const bool tp = options.communicator != nullptr;
  // rows_alone: up to the GEMV's rows every row is computed as it is alone (CudaBackendOptions).
  const bool gemv =
      (M == 1 || (options.rows_alone && M <= kernels::kGemvMaxRows)) &&
      kernels::gemv_supported(bf16_gemv_args(d.in_proj, M, work.zxbcdt, GemvOutput::kBf16, d.norm.at<float>(0),
                                             GemvPrologue::kRmsNorm)) &&
      kernels::gemv_supported(bf16_gemv_args(d.out_proj, M, tp ? tp_partial(M, l) : work.residual,
                                             tp ? GemvOutput::kTpPartial : GemvOutput::kResidualAdd,
                                             d.gated_norm.at<float>(0), GemvPrologue::kGatedRmsNorm));
  for (LinearPlan* L : {&p.in_proj, &p.out_proj}) {
    L->bf16 = true;
    L->schedule = gemv ? LinearPlan::Schedule::kBf16Gemv : LinearPlan::Schedule::kBf16Gemm;
  }
  p.in_proj.norm_prologue = gemv;
  p.out_proj.gated_norm_prologue = gemv;
  p.out_proj.residual_add = !tp;
  p.out_proj.partial_out = tp;
  if (tp) p.all_reduce = options.communicator->route(tp_message_floats(M));
  p.gated_out = p.out_proj.gated_norm_prologue ? LayerPlan::GatedOut::kInOutProjPrologue : LayerPlan::GatedOut::kBf16;
  const bool chunked =
      length > 1 && !window && kernels::ssd_chunk_scan_supported(float_ssd_args(d, batch, length, state.ssm(l)));
  p.ssd = chunked ? LayerPlan::Ssd::kFloatChunked : LayerPlan::Ssd::kRecurrence;
  if (!chunked && !kernels::ssd_state_update_supported(state_update_args(d, batch, length, state.ssm(l))))
    fail("CUDA: no SSD kernel supports heads {} × headdim {}, ngroups {}, d_state {}", c.nheads(), c.headdim,
         c.ngroups, c.d_state);
  return p;
}

const ForwardPlan& CudaBackend::Impl::forward_plan(int64_t batch, int64_t length, CudaState& state, bool window) const {
  if (plans_generation != work_generation) {
    plans.clear();
    plans_generation = work_generation;
  }
  auto found = plans.find({batch, window ? -length : length});
  if (found != plans.end()) return found->second;
  ForwardPlan plan;
  plan.batch = batch;
  plan.length = length;
  plan.window = window;
  plan.work_generation = work_generation;
  for (int64_t l = 0; l < config.n_layer; ++l)
    plan.layers.push_back(
        plan_layer(layers[l], batch, length, state, l, l > 0 ? &plan.layers[l - 1] : nullptr, window));
  plan.final_pending_delta = !plan.layers.back().out_proj.residual_add && plan.layers.back().all_reduce.empty();
  return plans.emplace(std::make_pair(batch, window ? -length : length), std::move(plan)).first->second;
}

}  // namespace ssdq
