// What the CUDA engine runs for one forward shape, decided once per (batch, length) and printed
// by `ssdq bench --show-plan`: a plan per projection (which schedule), per layer (where the norm
// and the residual add happen, which SSD kernel, which format passes) and per forward.
// runtime/cuda_backend.cc makes them (plan_layer, plan_bf16_layer) and executes them
// (enqueue_layer); docs/ARCHITECTURE.md describes them.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ssdq {

// How one projection runs at a forward's rows, decided once per (batch, length) by plan_linear.
struct LinearPlan {
  enum class Schedule {
    kQgemv,              // kernels/qgemv: decode rows, weights read as stored
    kW4A16Mixed,         // kernels/gemm_w4a16: int4 dequantized in the GEMM's registers (sm_90)
    kFp16Gemm,           // cuBLASLt fp16 (float weights, or quantized ones expanded to fp16 first)
    kGroupedInt4Packed,  // kernels/gemm_s8_grouped reading int4 packed (few rows)
    kS8Scaled,           // kernels/gemm_s8_scaled: int8 GEMM with the per-channel scaling fused (sm_90)
    kGrouped,            // kernels/gemm_s8_grouped: the fp32 chain over weight groups in registers
    kImmaPerGroup,       // a cuBLASLt int8 GEMM per weight group + kernels/scale_int32
    kBf16Gemv,           // kernels/gemv: the FP model's decode row
    kBf16Gemm,           // cuBLASLt bf16: the FP model's other shapes
    kFp32Gemm,           // cuBLASLt fp32 (CudaBackendOptions::fp32_float_math)
  } schedule = Schedule::kFp16Gemm;
  bool unpack_first = false;   // int4 weights unpacked (to int8, or expanded to fp16) into the workspace first
  bool residual_add = false;   // the epilogue adds output + bias into the fp32 residual
  bool norm_prologue = false;  // the GEMV builds its input from the residual's RMSNorm
  bool gated_norm_prologue = false;  // the GEMV builds its input from y and z's gated RMSNorm
  int weight_bits = 0, groups = 1;
  bool int8_input = false;
  bool bf16 = false;  // bf16 weights and input (the FP model)
  bool fp32 = false;  // fp32 weights and input
  bool tf32 = false;  // fp32 operands multiplied in TF32
  bool partial_out = false;  // fp32 partial rows for the tensor-parallel all-reduce

  std::string describe() const {
    static const char* const names[] = {"qgemv",          "gemm_w4a16 (mixed input)",
                                        "cuBLASLt fp16",  "gemm_s8_grouped (int4 packed)",
                                        "gemm_s8_scaled", "gemm_s8_grouped",
                                        "cuBLASLt int8 per group + scale_int32", "gemv",
                                        "cuBLASLt bf16",  "cuBLASLt fp32"};
    std::string weights = bf16 ? "bf16 weights" : fp32 ? "fp32 weights" : weight_bits == 0 ? "fp16 weights" : fmt::format("int{} weights", weight_bits);
    if (groups > 1) weights += fmt::format(" in {} groups", groups);
    const std::string name = schedule == Schedule::kImmaPerGroup && groups == 1 ? "cuBLASLt int8 + scale_int32"
                                                                                : names[static_cast<int>(schedule)];
    std::string text = fmt::format("{} ({}, {} input)", name, weights,
                                   bf16 ? "bf16" : fp32 ? "fp32" : int8_input ? "int8" : "fp16");
    if (tf32) text += ", TF32 math";
    if (unpack_first) text += ", unpacked first";
    if (norm_prologue) text += ", RMSNorm in its prologue";
    if (gated_norm_prologue) text += ", gated RMSNorm in its prologue";
    if (residual_add) text += ", adds into the residual";
    if (partial_out) text += ", this rank's partial rows in fp32";
    return text;
  }
};

// What a layer runs for one forward shape: the projections' plans and every choice between
// kernels and fusions, decided once by plan_layer so the layer loop only executes.
struct LayerPlan {
  LinearPlan in_proj, out_proj;
  bool pending_delta = false;   // the previous out_proj left its output in work.proj; this norm adds it
  bool split_in_proj = false;   // in_proj as two fused GEMMs: z|dt fp32, x|B|C as conv.in's int8 codes
  bool tables_early = false;    // SSDi8's ChunkCumsum on the second stream, right after dt
  enum class Ssd {
    kSsdi8Chunked,  // kernels/ssdi8_chunk_scan (integer SSD, int8 state)
    kFloatChunked,  // kernels/ssd_chunk_scan with 16-bit operands (fp16; bf16 for the FP model)
    kConvStep,      // kernels/ssd_conv_step: the conv and the recurrence in one launch
    kRecurrence,    // kernels/causal_conv1d then kernels/ssd_state_update
  } ssd = Ssd::kRecurrence;
  bool dt_format_pass = false;     // dt's format applied by a pass before the SSD (several scales)
  bool state_format_pass = false;  // a pass puts the fp32 state in its fp16 format after the SSD
  // Where the gated norm's output goes: kernels/hadamard_quant's int8 / fp16 / fp32 (then the
  // point's format), or for the FP model kernels/gated_rmsnorm's bf16 or out_proj's GEMV prologue.
  enum class GatedOut { kInt8, kFp16, kFp32ThenFormat, kBf16, kInOutProjPrologue } gated_out = GatedOut::kFp16;
  bool prefetch_next_in_proj = false;  // out_proj's GEMV brings the next layer's in_proj into L2
  bool bf16 = false;  // the FP model's layer: bf16 activations between the steps, fp32 residual and state
  // A speculative verify window: the recurrence token by token with the state rounded after each
  // (the bits single steps store), in_proj's and the conv's outputs kept for the replay.
  bool window = false;
  // Tensor parallelism: out_proj's partial rows (and the folded gated norm's sums of squares)
  // summed across the ranks into the residual, by this route ("one-shot (peer)" or "NCCL").
  std::string all_reduce;
  // An artifact's gated norm in two steps (CudaBackend::Impl::norm_in_parts), said in words; empty:
  // one launch. hadamard_blocks: the rotation's blocks (0: no rotation).
  std::string norm_parts;
  int64_t hadamard_blocks = 0;

  std::string describe() const {
    const char* const ssd_names[] = {"ssdi8_chunk_scan",
                                            bf16 ? "ssd_chunk_scan (bf16 operands)" : "ssd_chunk_scan (fp16 operands)",
                                            "ssd_conv_step (conv + state update, one launch)",
                                            "causal_conv1d, ssd_state_update"};
    static const char* const gated_names[] = {"hadamard_quant → int8", "hadamard_quant → fp16",
                                              "hadamard_quant → fp32, then its format", "gated_rmsnorm → bf16",
                                              "in out_proj's prologue"};
    std::string text;
    text += fmt::format("  norm        {}\n", in_proj.norm_prologue ? "in in_proj's prologue"
                                                : pending_delta        ? "add_rmsnorm (adds the previous out_proj)"
                                                                       : "add_rmsnorm");
    text += fmt::format("  in_proj     {}\n", split_in_proj ? std::string("two gemm_s8_scaled on two streams (z|dt fp32, "
                                                                        "x|B|C int8 codes)")
                                                            : in_proj.describe());
    text += fmt::format("  ssd         {}{}{}{}\n", ssd_names[static_cast<int>(ssd)],
                        window ? " (token by token, the state rounded after each; inputs kept for replay)" : "",
                        dt_format_pass ? "; dt format pass first" : "", state_format_pass ? "; state format pass" : "");
    text += fmt::format("  gated norm  {}{}{}\n",
                        norm_parts.empty() ? "" : "gated_sum_squares, " + norm_parts + ", gated_norm_scale; then ",
                        gated_names[static_cast<int>(gated_out)],
                        hadamard_blocks > 1 ? fmt::format(" (the rotation in {} blocks)", hadamard_blocks) : "");
    text += fmt::format("  out_proj    {}{}\n", out_proj.describe(),
                        prefetch_next_in_proj ? ", prefetches the next in_proj into L2" : "");
    if (!all_reduce.empty()) text += fmt::format("  all-reduce  {} into the residual\n", all_reduce);
    return text;
  }
  bool operator==(const LayerPlan& o) const { return describe() == o.describe(); }
};

// Every layer's plan for one (batch, length), and the final norm's.
struct ForwardPlan {
  int64_t batch = 0, length = 0;
  bool window = false;  // a speculative verify window (LayerPlan::window)
  uint64_t work_generation = 0;
  std::vector<LayerPlan> layers;
  bool final_pending_delta = false;

  // Layers with the same plan printed once ("layers 1-63").
  std::string describe() const {
    std::string text = fmt::format("plan for {}batch {} x {} token{} ({} rows)\n", window ? "a verify window, " : "",
                                   batch, length, length == 1 ? "" : "s", batch * length);
    for (size_t l = 0; l < layers.size();) {
      size_t last = l;
      while (last + 1 < layers.size() && layers[last + 1] == layers[l]) ++last;
      text += last == l ? fmt::format("layer {}\n", l) : fmt::format("layers {}-{}\n", l, last);
      text += layers[l].describe();
      l = last + 1;
    }
    text += fmt::format("final norm  add_rmsnorm{}\n", final_pending_delta ? " (adds the last out_proj)" : "");
    return text;
  }
};


}  // namespace ssdq
