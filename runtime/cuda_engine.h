// The CUDA engine's inside (runtime/cuda_backend.h is its interface), shared by the files that
// make it up: the weights as the kernels read them (DeviceLinear, DeviceFormat, DeviceLayer), the
// per-sequence state (CudaState) and CudaBackend::Impl, whose members are defined by
//   cuda_weights.cc      uploads: the FP model in bf16 (or random on the device), an artifact as stored
//   cuda_plan.cc         what each step of a layer runs for one (batch, length): plan_layer, plan_bf16_layer
//   cuda_kernel_args.cc  the kernels' argument structs for a layer's buffers and weights
//   cuda_layer.cc        the workspace and the executor: enqueue_layer's steps, the body, the head
//   cuda_backend.cc      the Backend interface
// Only those files include it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include <fmt/format.h>

#include "formats/dtype.h"
#include "formats/error.h"
#include "kernels/activation_format.h"
#include "kernels/add_rmsnorm.h"
#include "kernels/causal_conv1d.h"
#include "kernels/conv_state_replay.h"
#include "kernels/embedding.h"
#include "kernels/fill_random.h"
#include "kernels/gated_rmsnorm.h"
#include "kernels/gemm.h"
#include "kernels/gemm_s8_grouped.h"
#include "kernels/gemm_s8_scaled.h"
#include "kernels/gemm_w4a16.h"
#include "kernels/gemv.h"
#include "kernels/hadamard_quant.h"
#include "kernels/qgemv.h"
#include "kernels/scale_int32.h"
#include "kernels/ssd_chunk_scan.h"
#include "runtime/cuda_observer.h"
#include "kernels/ssd_conv_step.h"
#include "kernels/ssd_state_update.h"
#include "kernels/ssdi8_chunk_scan.h"
#include "kernels/weight_unpack.h"
#include "model/hadamard.h"
#include "model/quantizer.h"
#include "runtime/cuda_forward.h"
#include "runtime/cuda_plan.h"
#include "runtime/cuda_resources.h"
#include "runtime/quantized_ssd.h"
#include "runtime/cuda_backend.h"
#include "runtime/cuda_communicator.h"

namespace ssdq {

using bf16 = __nv_bfloat16;
using kernels::ElementType;
using Format = kernels::ActivationFormatArgs::Format;

// A projection's weights in the form its CUDA path reads.
//   kBf16:           bf16 x · bf16 w (the FP model): the GEMV for a decode row, else cuBLASLt.
//   kInt8PerChannel: int8 x · int8 w per output channel (W8A8).
//   kInt8Grouped:    int8 x · int4 (or int8) w with group scales (W4A8): qgemv up to 4 rows, else
//                    the grouped int8 GEMM (int4 read packed up to 64 rows, else unpacked first).
//   kFp16Input:      fp16 x · fp16 w (float weights, or int4 weights with an fp16 input:
//                    W4A16: qgemv up to 16 rows, else CUTLASS's mixed-input GEMM on sm_90
//                    (kernels/gemm_w4a16.h), else expanded to fp16 first).
//   kFp32:           fp32 x · fp32 w in fp32 (float weights under CudaBackendOptions::fp32_float_math).
struct DeviceLinear {
  enum class Path { kInt8PerChannel, kInt8Grouped, kFp16Input, kBf16, kFp32 } path = Path::kFp16Input;
  int64_t n = 0, k = 0;
  int bits = 0;  // 8 or 4 for quantized weights, 0 for float ones
  int group_size = 0, groups = 1;
  DeviceBlock values, scales;
  DeviceBlock dense16;  // float weights in 16 bits: fp16 (kFp16Input) or bf16 (kBf16)
  DeviceBlock dense32;  // float weights in fp32 (kFp32)

  bool int8_input() const { return path == Path::kInt8PerChannel || path == Path::kInt8Grouped; }
  bool folds_bias() const { return int8_input(); }
  // Scratch bytes the prefill path needs to expand the weights (0 when it reads them as stored).
  size_t expand_bytes() const {
    if (path == Path::kInt8Grouped && bits == 4) return n * k;
    if (path == Path::kFp16Input && bits != 0) return n * k * 2;
    return 0;
  }
};

// An activation point's format on the device.
struct DeviceFormat {
  Format format = Format::kFloat32;
  DeviceBlock scales, index;
  float scale0 = 1.f;  // the per-tensor scale (integer GEMM inputs)
};

struct DeviceLayer {
  DeviceBlock norm, conv_weight, conv_bias, dt_bias, A, D, gated_norm, out_bias;
  DeviceLinear in_proj, out_proj;
  DeviceFormat in_proj_in, ssd_dt, out_proj_in, state_format;
  float dt_code = 0.f;  // ssd.dt's format as one code (format_code), when it has one scale
  // Whether the SSD kernels apply dt's format as they read dt (one code for every head); otherwise
  // a format pass runs on dt_raw first.
  bool dt_format_in_kernel() const { return ssd_dt.index.bytes() == 0; }
  bool online_hadamard = false;
  int64_t hadamard_blocks = 1;  // the rotation I_B ⊗ H_{E/B} (QuantizedLayer::hadamard_blocks)
  bool ssdi8 = false;
  bool fp16_chunked_ssd = false;  // a float-SSD layer whose prefill may run the chunked scan
  bool int8_state = false;
  // int8 states: the scale row of each channel c = h·P + p, and the scales [rows, inner].
  DeviceBlock state_index, state_scales;
  int state_inner = 1;
  // SSDi8 scales, expanded: s_B[g], s_C[g], s_xs[h·P + p], s_s[h·P + p], s_cb[g].
  DeviceBlock s_B, s_C, s_xs, s_s, s_cb;
  // The conv's input format (conv.in) and output formats (ssd.x | ssd.B | ssd.C) coded per
  // channel for causal_conv1d (empty when every channel stays as it is).
  DeviceBlock conv_in_codes, conv_out_codes;
  // Where in_proj's output row holds x|B|C and dt (z is at 0). A split layer's rows are z | dt |
  // x|B|C (its in_proj weights reordered at upload), so that prefill runs in_proj as two fused
  // GEMMs: z|dt in fp32 and x|B|C as the int8 codes of conv.in (split_in_proj_args).
  int64_t xbc_at = 0, dt_at = 0;
  bool split_in_proj = false;
};

// A layer's int8 state on the arguments of an SSD kernel (SsdChunkScanArgs, SsdStateUpdateArgs);
// an fp32 state leaves them as they are.
template <typename SsdArgs>
void set_state_scales(const DeviceLayer& d, SsdArgs& a) {
  if (!d.int8_state) return;
  a.state_type = ElementType::kS8;
  a.state_scales = d.state_scales.at<float>(0);
  a.state_scale_index = d.state_index.at<int32_t>(0);
  a.state_scale_inner = d.state_inner;
}

// Buffers per layer: conv state [batch, conv_dim, d_conv - 1] in the type of the conv's input
// (bf16 for the FP model, fp32 conv.in values for an artifact), SSM state [batch, H, P, N] as the
// layer stores it (int8 codes or fp32). `bytes_per_sequence`: Impl::state_bytes.
class CudaState : public DeviceState {
 public:
  CudaState(const std::vector<size_t>& bytes_per_sequence, int64_t batch, cudaStream_t stream, MemoryCounter* counter,
            const void* owner)
      : DeviceState(batch, bytes_per_sequence, stream, counter, owner) {}
  void* conv(int64_t layer) const { return buffer<void>(2 * layer); }
  void* ssm(int64_t layer) const { return buffer<void>(2 * layer + 1); }

  // A verify window's kept activations (CudaBackend::forward_window): per layer, in_proj's output
  // rows and the conv's output rows of the window's tokens, which the window's layers write in
  // place of the workspace's and replay_window reads back (Activation Replay). Two sets, used in
  // turn: a window that replays the previous one's tokens first (replay_then_window) reads that
  // window's set while it writes the other.
  struct Window {
    DeviceBlock block;
    int64_t capacity = 0;                    // tokens a sequence the block holds
    int64_t length = 0;                      // tokens of the last window (0: nothing to replay)
    int set = 0;                             // the set the last window wrote
    int64_t layers = 0;                      // layers a set holds
    int next_set() const { return 1 - set; }  // the set the next window writes
    // The captured window of `length` tokens the next window runs.
    int64_t graph_key(int64_t length) const { return length * 4 + next_set() * 2 + (replaying ? 1 : 0); }
    size_t zxbcdt_bytes = 0, layer_bytes = 0;  // per layer: in_proj's rows, then the conv's
    // Device [2 · batch + 1]: each sequence's tokens to replay, the rows a sequence of the window
    // they come from (the kernels' replay_steps), then the sequence whose kept rows each replays
    // (replay_rows: its own, or the accepted draft of its sequence).
    int32_t* steps = nullptr;
    static int64_t steps_entries(int64_t batch) { return 2 * batch + 1; }
    int32_t* replay_rows(int64_t batch) const { return steps + batch + 1; }
    // Their pinned sources: a window's (copied inside its graph, which the forward waits for) and a
    // replay's apart (not waited for: a window between two replays is).
    PinnedBuffer<int32_t> host_steps, host_replay_steps;
    // While a replay_then_window is enqueued: the layers' kernels replay the last window's set.
    bool replaying = false;
    // By (length, set written, replaying first); cleared with the buffers they were captured on.
    std::map<int64_t, std::unique_ptr<DecodeGraph>> forward_graphs, replay_graphs;
  };
  Window window;
  // Layer `layer`'s kept activations in set `set`.
  float* window_zxbcdt(int64_t layer, int set) const {
    return window.block.at<float>((set * window.layers + layer) * window.layer_bytes);
  }
  float* window_conv_out(int64_t layer, int set) const {
    return window.block.at<float>((set * window.layers + layer) * window.layer_bytes + window.zxbcdt_bytes);
  }
};

struct CudaBackend::Impl : CudaEngineCore {
  Mamba2Config config;
  CudaBackendOptions options;
  std::shared_ptr<const QuantizedModel> model;  // an artifact's; null for the FP model
  // The FP model: bf16 weights and activations between the steps (LayerPlan::bf16).
  bool bf16_model = false;
  std::vector<size_t> state_bytes;  // per layer: conv state, SSM state, for one sequence
  // A split in_proj's z|dt GEMM runs on side_stream, forked after the norm and joined before the
  // SSD, so that its tiles fill the SMs the x|B|C GEMM's last wave leaves idle.
  cudaStream_t side_stream = nullptr;
  cudaEvent_t fork_event = nullptr, join_event = nullptr;
  size_t weight_bytes = 0;

  DeviceBlock embedding, embedding_scales, norm_f, head16, hadamard_base;
  ElementType head_type = ElementType::kF16;  // of head16 (or of the tied embedding it stands for)
  DeviceBlock head_q, head_q_scales;  // upload_quantized_head
  kernels::QgemvKind head_q_kind = kernels::QgemvKind::kW8A16;
  bool head_q_mma = false;  // head_q in kernels::pack_w8a16_mma_layout's / pack_w4a16_mma_layout's order
  int head_q_group = 0;
  std::vector<int8_t> hadamard_base_host;  // the launcher passes H_K in the kernel's parameters
  kernels::EmbeddingArgs::Table embedding_table = kernels::EmbeddingArgs::Table::kF32;
  std::vector<DeviceLayer> layers;
  int hadamard_order = 1;
  size_t expand_bytes = 0;
  // Whether any projection runs an integer GEMM for prefill (then the int32 accumulators are
  // reserved) and whether any has several weight groups (then the fp32 chain too).
  bool integer_gemm = false, grouped_gemm = false;
  bool any_ssdi8 = false;       // a layer runs the SSDi8 prefill kernel (its workspace is reserved)
  bool any_float_ssd = false;   // a layer's SSD is in floating point (the chunked scan's workspace is reserved)
  bool any_split_in_proj = false;  // a layer's prefill in_proj may write int8 x|B|C (work.xbc_int8 is reserved)
  // A layer's gated norm runs in two steps (norm_in_parts): its sums of squares are reserved.
  bool any_norm_in_parts = false;

  // The activations of up to work_batch × work_length rows (one block, laid out by reserve()).
  // zxbcdt, conv_out and y hold fp32 for an artifact and bf16 for the FP model (act_at());
  // normed, gated and out_proj_delta are an artifact's only.
  struct Work {
    int32_t *tokens, *targets, *argmax;
    int32_t* int32_acc;  // an integer GEMM's accumulators, before scale_int32
    int32_t* arrivals;   // [batch · ngroups] the fused conv + state update's counters, zero between launches
    float *residual, *normed;
    float* zxbcdt;    // in_proj's output rows z | x|B|C | dt (a split layer's: z | dt | x|B|C)
    float* conv_out;  // the conv's output x|B|C in fp32; the chunked float scan's fp16 operands over its bytes
    float *y, *gated;
    float* out_proj_delta;  // out_proj's output where the next norm adds it to the residual (or the all-reduce sums it)
    float *chain, *logits, *nll;
    float *head_slice, *gathered;  // a vocab-parallel head's logits slice and the ranks' gathered slices
    float *norm_partial, *norm_sums;  // a gated norm in parts: its sums of squares (before, after the all-reduce)
    int8_t* x_int8;    // a projection's int8 input (the format pass or the norm writes it)
    int8_t* ssdi8_bc;  // the SSDi8 kernel's int8 B|C rows
    int8_t* xbc_int8;  // a split in_proj's x|B|C as conv.in's int8 codes
    void* ssdi8_workspace;
    void* chunk_scan_workspace;  // the chunked float SSD's
    __half* x16;  // a projection's 16-bit input: fp16 (an artifact) or bf16 (the FP model)
    void* expanded;   // int4 weights unpacked (int8) or expanded (fp16) for a GEMM
    int64_t logits_rows;
  };
  mutable Work work{};
  // Plans by (batch, length; −length for a verify window), valid for the workspace generation
  // they were made in.
  mutable std::map<std::pair<int64_t, int64_t>, ForwardPlan> plans;
  mutable uint64_t plans_generation = 0;

  Impl(const Mamba2Config& c, const CudaBackendOptions& o) : CudaEngineCore(o.device), config(c), options(o) {
    cuda_ok(cudaStreamCreateWithFlags(&side_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_ok(cudaEventCreateWithFlags(&fork_event, cudaEventDisableTiming), "cudaEventCreate");
    cuda_ok(cudaEventCreateWithFlags(&join_event, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~Impl() {
    if (fork_event) cudaEventDestroy(fork_event);
    if (join_event) cudaEventDestroy(join_event);
    if (side_stream) cudaStreamDestroy(side_stream);
  }

  // Element `offset` of an activation buffer of Work: fp32 for an artifact, bf16 for the FP model.
  void* act_at(float* buffer, int64_t offset) const {
    return bf16_model ? static_cast<void*>(reinterpret_cast<bf16*>(buffer) + offset) : buffer + offset;
  }
  ElementType act_type() const { return bf16_model ? ElementType::kBF16 : ElementType::kF32; }

  // What reads a formatted point: another fp32 op, an integer GEMM (the int8 values in work.x_int8)
  // or an fp16 GEMM (the values in work.x16), row stride `width` in both.
  enum class Reader { kFloat32, kInt8, kFloat16 };
  static Reader reader_of(const DeviceLinear& linear) {
    return linear.int8_input()                         ? Reader::kInt8
           : linear.path == DeviceLinear::Path::kFp32 ? Reader::kFloat32
                                                       : Reader::kFloat16;
  }

  // The FP model's GEMV: one decode row of bf16 input (work.x16), or the input built in its
  // prologue — in_proj's RMSNorm of the residual, or out_proj's gated RMSNorm of y and z.
  enum class GemvPrologue { kNone, kRmsNorm, kGatedRmsNorm };

  // What a decode row's out_proj fetches into L2 before it waits: the next layer's in_proj weights
  // (their first kL2PrefetchL2Share of L2) and scales, so that DRAM streams them while the gated
  // norm, out_proj's tail and in_proj's norm prologue wait on latency (28–40 MB of an H100's 50 MB
  // measured best; docs/kernels/quantized_projections.md).
  static constexpr double kL2PrefetchL2Share = 0.6;

  // ---- cuda_weights.cc: uploads ----

  // The FP model's weights in the kernels' types (bf16 projections and tables, fp32 vectors),
  // filled by upload_bf16_model or fill_random_bf16_model.
  void allocate_bf16_model();
  void upload_bf16_model(const ModelWeights& w);

  // Random weights with the standard deviations of random_weights() (uniform, so ±√3 σ).
  void fill_random_bf16_model(uint64_t seed);
  void upload_quantized_model();

  // A quantized (head-to-toe) lm_head in its stored width: qgemv W8A16 or W4A16 read it at 1 or
  // ½ byte a weight, 16 rows a launch, instead of an fp16 copy's 2 bytes (a float summation like
  // the fp16 GEMM's, not bit-identical to the CPU). int8 groups wider than the GEMV takes (a
  // per-row scale: d_model columns) are split into groups of at most 512 columns repeating their
  // scale. Heads the GEMV cannot take are left to the fp16 copy.
  void upload_quantized_head(const WeightMatrix& head);

  // ---- cuda_plan.cc: the plans ----

  // Whether a projection at m rows runs the decode GEMV (then `q` holds its arguments).
  bool decode_gemv(const DeviceLinear& L, int64_t m, float x_scale, kernels::QgemvArgs& q) const;

  // Whether the projection's epilogue (qgemv or scale_int32) can add bias and output into the fp32
  // residual itself — the residual add of the next norm, with the same roundings.
  bool adds_into_residual(const DeviceLinear& L, int64_t m) const;

  // Whether in_proj's GEMV builds its int8 input from the residual itself (the norm prologue):
  // one decode row only, where it saves the norm's launch; every block repeats the norm, which
  // measured slower than the separate kernel from 4 rows (docs/kernels/quantized_projections.md).
  bool norm_in_gemv(const DeviceLayer& d, int64_t m) const;

  // How a projection runs at m rows: which schedule (LinearPlan::Schedule) takes it, decided by
  // the kernels' capability predicates on the arguments it will be launched with. `out`, `bias`,
  // `residual_add` and `norm_weight` as enqueue_linear receives them.
  LinearPlan plan_linear(const DeviceLinear& L, int64_t m, float x_scale, const float* bias, float* out,
                         bool residual_add, const float* norm_weight) const;

  // Whether a layer's in_proj runs split at m prefill rows (both fused GEMMs take it here).
  bool runs_split_in_proj(const DeviceLayer& d, int64_t m) const;

  // Decides everything layer l runs for (batch, length) rows. `previous`: the plan of layer l - 1.
  // The capability checks read the state's buffers of layer l; every state's buffers are 256-byte
  // aligned device memory, so the plan holds for any state of this batch.
  // `window`: a verify window (ForwardPlan::window).
  LayerPlan plan_layer(const DeviceLayer& d, int64_t batch, int64_t length, CudaState& state, int64_t l,
                       const LayerPlan* previous, bool window) const;

  // The FP model's layer: one decode row runs both projections as GEMVs with the norms in their
  // prologues (4 launches a layer, not 6: docs/kernels/gemm.md, "gemv"); more rows run
  // cuBLASLt's bf16 GEMMs, out_proj accumulating into the fp32 residual. Prefill runs the chunked
  // scan where it takes the shape, else (and for decode) the recurrence, exact for any length.
  LayerPlan plan_bf16_layer(const DeviceLayer& d, int64_t batch, int64_t length, CudaState& state, int64_t l,
                            bool window) const;

  // The plan of a forward of (batch, length), made on first use and kept; a resized workspace
  // (new buffer addresses) makes them again.
  const ForwardPlan& forward_plan(int64_t batch, int64_t length, CudaState& state, bool window = false) const;

  // ---- cuda_window.cc: verify windows and their replay ----

  // Whether every layer's state takes its format inside the recurrence's kernel (int8 codes, fp16
  // values or fp32), so that a window's steps round it as single steps do.
  bool runs_window() const;
  bool exact_window(int64_t batch, int64_t length) const;
  // The state's window buffers for `length` tokens a sequence (grown, never shrunk).
  void reserve_window(CudaState& state, int64_t length) const;
  // Replays the first state.window.steps[b] kept tokens of every sequence, layer by layer: the conv
  // state (kernels/conv_state_replay) and the state update from the kept conv outputs and dt.
  void enqueue_replay(CudaState& state) const;
  // In a replay_then_window's launches: layer l's conv and state update first take in the last
  // window's replayed tokens (kernels' replay_steps), and leave their states there.
  void add_window_replay(kernels::CausalConv1dArgs& conv, const CudaState& state, int64_t l) const;
  void add_window_replay(kernels::SsdStateUpdateArgs& step, const CudaState& state, int64_t l) const;
  // Runs a window over tokens (the state's set of kept activations reserved), replaying first.
  void run_window(const int32_t* tokens, int64_t length, CudaState& state, const ForwardOutputs& outputs,
                  bool replaying) const;

  // ---- cuda_kernel_args.cc: kernel arguments for the layer's buffers and weights ----

  // The chunked scan of a float-SSD layer's prefill (cpu::ssd_chunked on tensor cores). An
  // artifact's (Quamba2's fp16 math): x|B|C in fp16 as the conv writes them over work.conv_out's
  // bytes, dt_raw fp32 with its format, y fp32 into work.y, the layer's state fp32 or int8. The FP
  // model's: x|B|C, dt_raw and y in bf16, the state fp32.
  kernels::SsdChunkScanArgs float_ssd_args(const DeviceLayer& d, int64_t batch, int64_t length, void* ssm) const;

  // An integer GEMM's arguments (GemmS8GroupedArgs, GemmS8ScaledArgs) for a projection over all its
  // rows (w8: its int8 weights, int4 ones unpacked).
  template <typename Args>
  Args integer_gemm_args(const DeviceLinear& L, int64_t m, const int8_t* w8, float x_scale, const float* bias,
                         float* out, bool residual_add) const {
    Args f;
    f.m = m;
    f.n = L.n;
    f.k = L.k;
    f.x = work.x_int8;
    f.ldx = L.k;
    f.w = w8;
    f.ldw = L.k;
    f.w_scales = L.scales.at<float>(0);
    f.x_scale = x_scale;
    f.bias = bias;
    f.out = out;
    f.ldout = L.n;
    f.accumulate = residual_add;
    return f;
  }

  // The grouped int8 GEMM's arguments for a projection with weight groups.
  kernels::GemmS8GroupedArgs grouped_gemm_args(const DeviceLinear& L, int64_t m, const int8_t* w8, float x_scale,
                                               const float* bias, float* out, bool residual_add) const;

  // The decode GEMV's arguments for a projection at m rows (output and epilogue left to the caller).
  kernels::QgemvArgs qgemv_args(const DeviceLinear& L, int64_t m, float x_scale) const;
  // Where the FP model's GEMV writes: bf16 rows, fp32 added into the residual, or a tensor-parallel
  // rank's fp32 partial rows (with the folded norm's sums of squares after them when its prologue
  // computes the gated norm).
  enum class GemvOutput { kBf16, kResidualAdd, kTpPartial };
  kernels::GemvArgs bf16_gemv_args(const DeviceLinear& L, int64_t m, void* out, GemvOutput output,
                                   const float* norm_weight, GemvPrologue prologue) const;
  kernels::GemmW4A16Args w4a16_args(const DeviceLinear& L, int64_t m, float* out) const;

  // A split layer's in_proj (DeviceLayer::split_in_proj) over m prefill rows as two fused sm_90 GEMMs, when
  // both run here: z|dt into work.zxbcdt in fp32, x|B|C into work.xbc_int8 as conv.in's int8 codes (a
  // quarter of the bytes written and read back by the conv). Each reads its rows of the weights as
  // reordered at upload.
  std::pair<kernels::GemmS8ScaledArgs, kernels::GemmS8ScaledArgs> split_in_proj_args(const DeviceLayer& d,
                                                                                    int64_t m) const;
  kernels::Ssdi8ChunkScanArgs ssdi8_args(const DeviceLayer& d, int64_t batch, int64_t length, void* ssm_state) const;

  // The decode recurrence's arguments (the state update over every token of the rows), reading the
  // conv's output in work.conv_out and dt from in_proj's output.
  // `window`: the state rounded after every token (SsdStateUpdateArgs::round_every_step).
  kernels::SsdStateUpdateArgs state_update_args(const DeviceLayer& d, int64_t batch, int64_t length, void* ssm_state,
                                                bool window = false) const;
  void next_in_proj_prefetch(const DeviceLayer& next, kernels::L2Prefetch (&to)[kernels::kL2PrefetchRanges]) const;

  // The conv's arguments for layer l (its x|B|C input as in_proj left it, its fp32 output), before
  // the plan routes the output to the SSD kernel's operand buffers.
  kernels::CausalConv1dArgs conv_args(const DeviceLayer& d, int64_t batch, int64_t length, void* conv_state,
                                      bool xbc_int8) const;

  // The quantized head's GEMV over one row of x (row stride ldx) into work.logits.
  kernels::QgemvArgs head_gemv_args(const __half* x, int64_t ldx) const;

  // ---- cuda_layer.cc: the workspace and the executor ----
  void reserve(int64_t batch, int64_t length) const;

  // Applies a point's format to fp32 rows in place, and writes the copy its reader multiplies.
  void enqueue_format(const DeviceFormat& f, float* data, int64_t rows, int64_t width, int64_t stride, Reader reader,
                      const char* what) const;

  // Runs a projection as its plan says: out[m, n] = x · wᵀ (+ bias[n] on the integer paths), x as
  // enqueue_format left it; with plan.residual_add out is the fp32 residual and out += x · wᵀ +
  // bias; with plan.norm_prologue in_proj's input is the RMSNorm of the residual, built inside
  // the GEMV from `norm_weight`. An fp32 GEMM reads its input from `x32` (work.normed, work.gated).
  void enqueue_linear(const LinearPlan& plan, const DeviceLinear& L, int64_t m, float x_scale, const float* bias,
                      float* out, const char* what, const float* norm_weight = nullptr,
                      const kernels::L2Prefetch* prefetch = nullptr, const float* x32 = nullptr) const;
  // The observer's view of a point or of the SSD's inputs (no-ops without one).
  void observe(int64_t layer, ActivationPoint point, const float* data, int64_t rows, int64_t width,
               int64_t stride) const;
  void observe_ssd_inputs(const DeviceLayer& d, int64_t batch, int64_t length, CudaState& state, int64_t l) const;

  // `ssd_tables`: the SSDi8 scan's ChunkCumsum, run on the second stream right after dt is written.
  void enqueue_split_in_proj(const DeviceLayer& d, int64_t m, const kernels::Ssdi8ChunkScanArgs* ssd_tables) const;
  // `stop_at_out_proj`: the layer up to out_proj's input (formatted and observed), without out_proj
  // itself or the residual's update (forward_layer when nothing reads its output).
  void enqueue_layer(const DeviceLayer& d, const LayerPlan& p, int64_t batch, int64_t length,
                     CudaState& state, int64_t l, const DeviceLayer* previous, bool stop_at_out_proj = false) const;

  // The gated RMSNorm of y by silu(z), written as out_proj reads it (LayerPlan::GatedOut): an
  // artifact's through kernels/hadamard_quant (with the online rotation, if any), the FP model's
  // through kernels/gated_rmsnorm in bf16, or nothing when out_proj's GEMV builds it itself.
  void enqueue_gated_norm(const DeviceLayer& d, const LayerPlan& p, int64_t M, int64_t l) const;
  // An artifact's gated norm of work.y in place in two steps (norm_in_parts), its sums of squares
  // all-reduced between them where the groups span ranks.
  void enqueue_gated_norm_parts(const DeviceLayer& d, int64_t M, int64_t l) const;
  // Tensor parallelism: where layer l's out_proj writes its M partial rows (then the folded norm's
  // M sums of squares) for the all-reduce (DeviceCommunicator::partial_buffer).
  float* tp_partial(int64_t M, int64_t l) const;
  // Floats of M rows' all-reduce message: the partial rows, then the folded norm's sums.
  int64_t tp_message_floats(int64_t M) const { return M * (config.d_model + (options.folded_norm_width ? 1 : 0)); }
  // An artifact's gated norm in two steps (sums of squares, then the scale; kernels/gated_rmsnorm.h):
  // when its groups span tensor-parallel ranks (the sums all-reduced between the steps) or when the
  // rotation after it runs in blocks. Else one hadamard_quant launch does the norm and the rotation.
  bool shared_norm() const { return options.norm_groups > 0; }
  bool norm_in_parts(const DeviceLayer& d) const { return shared_norm() || d.hadamard_blocks > 1; }
  int64_t norm_groups() const { return shared_norm() ? options.norm_groups : config.ngroups; }
  // Floats of M rows' sums of squares (a multiple of 4, as the all-reduce moves float4s).
  int64_t norm_sums_floats(int64_t M) const { return (M * norm_groups() + 3) / 4 * 4; }
  // Which of the communicator's alternating partial buffers an exchange uses: one a layer, or two
  // (the norm's sums, then out_proj's rows) where the norm is shared, so consecutive exchanges alternate.
  int64_t exchange_slot(int64_t l, bool norm) const { return shared_norm() ? 2 * l + (norm ? 0 : 1) : l; }
  // `window`: a verify window's forward (ForwardPlan::window), each layer's in_proj and conv
  // outputs written to the state's window buffers.
  void enqueue_body(int64_t batch, int64_t length, CudaState& state, bool window = false) const;

  // cuda_forward.h's hook: the logits of `rows` rows from the quantized head, kQgemvMaxRows rows a
  // launch, when there is one. False: the caller runs the fp16 GEMM.
  bool enqueue_head_gemv(const uint16_t* x, int64_t ldx, int64_t rows) const;

  // Rows of the lm_head this engine multiplies: the vocabulary, or a vocab-parallel rank's slice.
  int64_t head_vocab() const { return options.head_rows ? options.head_rows : config.vocab_size; }
  // Whether this engine writes a forward's outputs (NLL, argmax, logits to the host): every engine
  // but a tensor-parallel rank other than 0, which runs the same head (its slice) and no outputs.
  bool writes_outputs() const { return !options.communicator || options.communicator->rank() == 0; }
  // Where the head's GEMM writes its logits [rows, head_vocab()].
  float* head_out() const { return options.head_rows ? work.head_slice : work.logits; }
  // A vocab-parallel head: the ranks' slices gathered (work.gathered, [ranks][rows][slice]) and laid
  // out as whole rows in work.logits; nothing for a whole head.
  void enqueue_head_gather(int64_t rows) const;

  // lm_head in 16 bits (bf16 for the FP model, fp16 for an artifact: its dequantized head), fp32 logits.
  std::pair<const void*, ElementType> head_weights() const {
    return {head16.bytes() ? head16.at<void>(0) : embedding.at<void>(0), head_type};
  }

  // The rows of the final norm's output (16-bit values of head_weights' type in work.x16) that feed lm_head.
  std::pair<const uint16_t*, int64_t> head_input(int64_t length, bool last_position_only) const {
    const int64_t D = config.d_model;
    const auto* x = reinterpret_cast<const uint16_t*>(work.x16);
    if (last_position_only) return {x + (length - 1) * D, length * D};
    return {x, D};
  }
};

// Points the workspace's in_proj and conv output buffers elsewhere (a verify window's kept
// activations) until it goes out of scope, also when a launch throws.
class WorkRedirect {
 public:
  explicit WorkRedirect(CudaBackend::Impl::Work& work) : work_(work), zxbcdt_(work.zxbcdt), conv_out_(work.conv_out) {}
  ~WorkRedirect() { to(zxbcdt_, conv_out_); }
  WorkRedirect(const WorkRedirect&) = delete;
  WorkRedirect& operator=(const WorkRedirect&) = delete;
  void to(float* zxbcdt, float* conv_out) {
    work_.zxbcdt = zxbcdt;
    work_.conv_out = conv_out;
  }

 private:
  CudaBackend::Impl::Work& work_;
  float *zxbcdt_, *conv_out_;
};

}  // namespace ssdq
