#include "runtime/cuda_backend.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "formats/dtype.h"
#include "formats/error.h"
#include "kernels/activation_format.h"
#include "kernels/add_rmsnorm.h"
#include "kernels/causal_conv1d.h"
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

namespace ssdq {
namespace {

using bf16 = __nv_bfloat16;
using kernels::ElementType;
using Format = kernels::ActivationFormatArgs::Format;

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

// Kernels that apply an activation point's format per channel read one float a channel
// (kernels/quant_epilogue.cuh apply_format_code): the int8 scale when positive, else one of these.
constexpr float kFormatCodeFp32 = 0.f;   // the value as it is
constexpr float kFormatCodeFp16 = -1.f;  // rounded to fp16

std::vector<uint16_t> to_fp16_bits(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_half(values[i]);
  return bits;
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bf16(values[i]);
  return bits;
}

template <typename T>
DeviceBlock device_copy(const std::vector<T>& values, MemoryCounter* counter, const char* what) {
  DeviceBlock block(std::max<size_t>(values.size() * sizeof(T), 1), what, counter);
  upload(block.at<T>(0), values, what);
  return block;
}

// A projection's weights in the form its CUDA path reads.
//   kBf16:           bf16 x · bf16 w (the FP model): the GEMV for a decode row, else cuBLASLt.
//   kInt8PerChannel: int8 x · int8 w per output channel (W8A8).
//   kInt8Grouped:    int8 x · int4 (or int8) w with group scales (W4A8): qgemv up to 4 rows, else
//                    the grouped int8 GEMM (int4 read packed up to 64 rows, else unpacked first).
//   kFp16Input:      fp16 x · fp16 w (float weights, or int4 weights with an fp16 input:
//                    W4A16: qgemv up to 16 rows, else CUTLASS's mixed-input GEMM on sm_90
//                    (kernels/gemm_w4a16.h), else expanded to fp16 first).
struct DeviceLinear {
  enum class Path { kInt8PerChannel, kInt8Grouped, kFp16Input, kBf16 } path = Path::kFp16Input;
  int64_t n = 0, k = 0;
  int bits = 0;  // 8 or 4 for quantized weights, 0 for float ones
  int group_size = 0, groups = 1;
  DeviceBlock values, scales;
  DeviceBlock dense16;  // float weights in 16 bits: fp16 (kFp16Input) or bf16 (kBf16)

  bool int8_input() const { return path == Path::kInt8PerChannel || path == Path::kInt8Grouped; }
  bool folds_bias() const { return int8_input(); }
  // Scratch bytes the prefill path needs to expand the weights (0 when it reads them as stored).
  size_t expand_bytes() const {
    if (path == Path::kInt8Grouped && bits == 4) return n * k;
    if (path == Path::kFp16Input && bits != 0) return n * k * 2;
    return 0;
  }
};

// `row_order` (int8 per-channel weights only): device row r holds the weight row row_order[r].
DeviceLinear upload_linear(const WeightMatrix& w, const ActQuant& input, MemoryCounter* counter,
                           const std::string& what, const std::vector<int64_t>& row_order = {}) {
  DeviceLinear d;
  d.n = w.rows;
  d.k = w.cols;
  if (!w.is_quantized()) {
    d.dense16 = device_copy(to_fp16_bits(w.dense), counter, "float projection weights");
    return d;
  }
  const QuantizedMatrix& q = w.quantized;
  d.bits = q.bits == QuantBits::kInt4 ? 4 : 8;
  d.group_size = static_cast<int>(q.group_size);
  d.groups = static_cast<int>(q.groups_per_row());
  if (q.cols % q.group_size != 0 || q.group_size % 4 != 0)
    fail("{}: weight groups of {} over {} columns have no CUDA path (groups must divide the row, a multiple of 4)",
         what, q.group_size, q.cols);
  if (input.is_int8()) d.path = d.groups == 1 && d.bits == 8 ? DeviceLinear::Path::kInt8PerChannel : DeviceLinear::Path::kInt8Grouped;
  if (!row_order.empty()) {
    if (d.path != DeviceLinear::Path::kInt8PerChannel || static_cast<int64_t>(row_order.size()) != q.rows)
      fail("internal: {}: rows reordered only for int8 per-channel weights", what);
    std::vector<int8_t> values(q.values.size());
    std::vector<float> scales(q.rows);
    for (int64_t r = 0; r < q.rows; ++r) {
      std::copy_n(q.values.data() + row_order[r] * q.cols, q.cols, values.data() + r * q.cols);
      scales[r] = q.scales[row_order[r]];
    }
    d.values = device_copy(values, counter, "int8 projection weights");
    d.scales = device_copy(scales, counter, "projection weight scales");
    return d;
  }
  if (d.bits == 4) {
    d.values = device_copy(pack_int4(q.values.data(), static_cast<int64_t>(q.values.size())), counter,
                           "int4 projection weights");
  } else {
    d.values = device_copy(q.values, counter, "int8 projection weights");
  }
  d.scales = device_copy(q.scales, counter, "projection weight scales");
  return d;
}

// An activation point's format on the device.
struct DeviceFormat {
  Format format = Format::kFloat32;
  DeviceBlock scales, index;
  float scale0 = 1.f;  // the per-tensor scale (integer GEMM inputs)
};

DeviceFormat upload_format(const ActQuant& a, MemoryCounter* counter) {
  DeviceFormat d;
  if (a.format == ActFormat::kFloat16) d.format = Format::kFloat16;
  if (!a.is_int8()) return d;
  d.format = Format::kInt8;
  d.scales = device_copy(a.scales, counter, "activation scales");
  if (!a.index.empty()) d.index = device_copy(a.index, counter, "activation scale index");
  d.scale0 = a.scales[0];
  return d;
}

// One scale per channel c (ActQuant::scale(c)), for kernels that take expanded scales.
std::vector<float> expand_scales(const ActQuant& a, int64_t channels, int64_t stride = 1) {
  std::vector<float> out(channels);
  for (int64_t c = 0; c < channels; ++c) out[c] = a.scale(c * stride);
  return out;
}

struct DeviceLayer {
  DeviceBlock norm, conv_weight, conv_bias, dt_bias, A, D, gated_norm, out_bias;
  DeviceLinear in_proj, out_proj;
  DeviceFormat in_proj_in, ssd_dt, out_proj_in, state_format;
  float dt_code = 0.f;  // ssd.dt's format as one code (format_code), when it has one scale
  // Whether the SSD kernels apply dt's format as they read dt (one code for every head); otherwise
  // a format pass runs on dt_raw first.
  bool dt_format_in_kernel() const { return ssd_dt.index.bytes() == 0; }
  bool online_hadamard = false;
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

// Whether a layer's in_proj may split (DeviceLayer::split_in_proj): int8 per-channel weights,
// conv.in int8 on every channel, and rows the two GEMMs can address.
bool splits_in_proj(const QuantizedLayer& q, const Mamba2Config& c) {
  const WeightMatrix& w = q.in_proj;
  return w.is_quantized() && w.quantized.bits == QuantBits::kInt8 && w.quantized.groups_per_row() == 1 &&
         q.in_proj_in.is_int8() && q.conv_in.is_int8() && c.conv_dim() % 16 == 0 && (c.d_inner() + c.nheads()) % 4 == 0;
}

// The split layer's in_proj row order: z, dt, then x|B|C.
std::vector<int64_t> split_in_proj_order(const Mamba2Config& c) {
  const int64_t E = c.d_inner(), H = c.nheads(), conv_dim = c.conv_dim();
  std::vector<int64_t> order;
  for (int64_t r = 0; r < E; ++r) order.push_back(r);
  for (int64_t h = 0; h < H; ++h) order.push_back(E + conv_dim + h);
  for (int64_t ch = 0; ch < conv_dim; ++ch) order.push_back(E + ch);
  return order;
}

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

// Whether a float-SSD layer's prefill may run the chunked scan, which holds C·Bᵀ (before the decay
// weights) and the state entering each chunk in fp16 (kernels/ssd_chunk_scan.h). Where the
// layer's formats bound them — int8 B and C (|C·Bᵀ| ≤ d_state · 127·s_C · 127·s_B per group), an
// int8 state (|S| ≤ 127·s_s) — a bound past half of fp16's 65,504 sends the layer to the fp32
// recurrence instead. fp16 and fp32 formats carry no bound (mamba_ssm's fp16 kernels take the same
// risk).
bool fp16_chunked_ssd_fits(const QuantizedLayer& q, const Mamba2Config& c) {
  constexpr double kLimit = 65504.0 / 2;
  const int64_t G = c.ngroups, N = c.d_state;
  if (q.ssd_B.is_int8() && q.ssd_C.is_int8()) {
    for (int64_t g = 0; g < G; ++g) {
      double max_b = 0, max_c = 0;
      for (int64_t n = 0; n < N; ++n) {
        max_b = std::max(max_b, double(q.ssd_B.scale(g * N + n)));
        max_c = std::max(max_c, double(q.ssd_C.scale(g * N + n)));
      }
      if (double(N) * 127 * max_b * 127 * max_c > kLimit) return false;
    }
  }
  if (q.ssm_state.is_int8()) {
    for (float s : q.ssm_state.scales)
      if (127.0 * s > kLimit) return false;
  }
  return true;
}

// A point's format on channel c as its format code (kFormatCodeFp32 / kFormatCodeFp16 / the scale).
float format_code(const ActQuant& a, int64_t c) {
  return a.is_int8() ? a.scale(c) : a.format == ActFormat::kFloat16 ? kFormatCodeFp16 : kFormatCodeFp32;
}

void append_format_codes(const ActQuant& a, int64_t channels, std::vector<float>& codes) {
  for (int64_t c = 0; c < channels; ++c) codes.push_back(format_code(a, c));
}

DeviceBlock format_codes(std::vector<float> codes, MemoryCounter* counter) {
  if (std::all_of(codes.begin(), codes.end(), [](float v) { return v == kFormatCodeFp32; })) return DeviceBlock();
  return device_copy(codes, counter, "activation formats");
}

}  // namespace

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
    float* out_proj_delta;  // out_proj's output where the next norm adds it to the residual
    float *chain, *logits, *nll;
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
  // Plans by (batch, length), valid for the workspace generation they were made in.
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

  // The FP model's weights in the kernels' types (bf16 projections and tables, fp32 vectors),
  // filled by upload_bf16_model or fill_random_bf16_model.
  void allocate_bf16_model() {
    const Mamba2Config& c = config;
    bf16_model = true;
    const size_t before = counter.live;
    const auto block = [&](int64_t elements, size_t element_bytes, const char* what) {
      return DeviceBlock(elements * element_bytes, what, &counter);
    };
    const auto linear = [&](int64_t n, int64_t k) {
      DeviceLinear L;
      L.path = DeviceLinear::Path::kBf16;
      L.n = n;
      L.k = k;
      L.dense16 = block(n * k, 2, "projection weights");
      return L;
    };
    embedding_table = kernels::EmbeddingArgs::Table::kBf16;
    embedding = block(c.vocab_size * c.d_model, 2, "embedding");
    if (!c.tie_embeddings) head16 = block(c.vocab_size * c.d_model, 2, "lm_head");
    head_type = ElementType::kBF16;
    norm_f = block(c.d_model, 4, "norm_f");
    for (int64_t l = 0; l < c.n_layer; ++l) {
      DeviceLayer d;
      d.in_proj = linear(c.d_in_proj(), c.d_model);
      d.out_proj = linear(c.d_model, c.d_inner());
      d.norm = block(c.d_model, 4, "norm");
      d.conv_weight = block(c.conv_dim() * c.d_conv, 4, "conv weight");
      d.conv_bias = block(c.conv_dim(), 4, "conv bias");
      d.dt_bias = block(c.nheads(), 4, "dt_bias");
      d.A = block(c.nheads(), 4, "A");
      d.D = block(c.nheads(), 4, "D");
      d.gated_norm = block(c.d_inner(), 4, "gated norm");
      d.xbc_at = c.d_inner();
      d.dt_at = c.d_inner() + c.conv_dim();
      layers.push_back(std::move(d));
      state_bytes.push_back(c.conv_dim() * (c.d_conv - 1) * 2);
      state_bytes.push_back(c.nheads() * c.headdim * c.d_state * 4);
    }
    any_float_ssd = true;
    weight_bytes = counter.live - before;
  }

  void upload_bf16_model(const ModelWeights& w) {
    allocate_bf16_model();
    const auto upload16 = [](DeviceBlock& dst, const std::vector<float>& src) {
      upload(dst.at<uint16_t>(0), to_bf16_bits(src), "upload weights");
    };
    upload16(embedding, w.embedding);
    if (!config.tie_embeddings) upload16(head16, w.lm_head);
    upload(norm_f.at<float>(0), w.norm_f, "upload weights");
    for (int64_t l = 0; l < config.n_layer; ++l) {
      const LayerWeights& src = w.layers[l];
      DeviceLayer& dst = layers[l];
      upload16(dst.in_proj.dense16, src.in_proj);
      upload16(dst.out_proj.dense16, src.out_proj);
      const std::pair<DeviceBlock*, const std::vector<float>*> vectors[] = {
          {&dst.norm, &src.norm}, {&dst.conv_weight, &src.conv_weight}, {&dst.conv_bias, &src.conv_bias},
          {&dst.dt_bias, &src.dt_bias}, {&dst.A, &src.A}, {&dst.D, &src.D}, {&dst.gated_norm, &src.gated_norm}};
      for (const auto& [block, values] : vectors) upload(block->at<float>(0), *values, "upload weights");
    }
  }

  // Random weights with the standard deviations of random_weights() (uniform, so ±√3 σ).
  void fill_random_bf16_model(uint64_t seed) {
    allocate_bf16_model();
    const Mamba2Config& c = config;
    uint64_t tensor = 0;
    const auto fill = [&](DeviceBlock& block, ElementType type, float center, float spread) {
      kernels::FillRandomArgs a;
      a.count = static_cast<int64_t>(block.bytes() / (type == ElementType::kBF16 ? 2 : 4));
      a.seed = seed * 1000003 + tensor++;
      a.center = center;
      a.spread = spread;
      a.type = type;
      a.out = block.at<void>(0);
      cuda_ok(kernels::launch_fill_random(a, stream), "fill random weights");
    };
    const float sqrt3 = std::sqrt(3.0f);
    fill(embedding, ElementType::kBF16, 0.f, 0.02f * sqrt3);
    if (!c.tie_embeddings) fill(head16, ElementType::kBF16, 0.f, 0.02f * sqrt3);
    fill(norm_f, ElementType::kF32, 1.f, 0.1f);
    for (DeviceLayer& l : layers) {
      fill(l.in_proj.dense16, ElementType::kBF16, 0.f, sqrt3 / std::sqrt(float(c.d_model)));
      fill(l.out_proj.dense16, ElementType::kBF16, 0.f, sqrt3 / std::sqrt(float(c.d_inner())));
      fill(l.norm, ElementType::kF32, 1.f, 0.1f);
      fill(l.conv_weight, ElementType::kF32, 0.f, 0.3f * sqrt3);
      fill(l.conv_bias, ElementType::kF32, 0.f, 0.1f * sqrt3);
      fill(l.dt_bias, ElementType::kF32, -4.f, 1.f);
      fill(l.A, ElementType::kF32, -8.5f, 7.5f);
      fill(l.D, ElementType::kF32, 1.f, 0.1f);
      fill(l.gated_norm, ElementType::kF32, 1.f, 0.1f);
    }
    cuda_ok(cudaStreamSynchronize(stream), "fill random weights");
  }

  void upload_quantized_model() {
    const QuantizedModel& m = *model;
    const Mamba2Config& c = config;
    const size_t before = counter.live;
    if (m.embedding.is_quantized()) {
      const QuantizedMatrix& q = m.embedding.quantized;
      if (q.group_size != q.cols) fail("artifact: an embedding quantized per group has no CUDA path (per row only)");
      embedding_table = q.bits == QuantBits::kInt4 ? kernels::EmbeddingArgs::Table::kInt4Rows
                                                   : kernels::EmbeddingArgs::Table::kInt8Rows;
      embedding = q.bits == QuantBits::kInt4
                      ? device_copy(pack_int4(q.values.data(), static_cast<int64_t>(q.values.size())), &counter, "embedding")
                      : device_copy(q.values, &counter, "embedding");
      embedding_scales = device_copy(q.scales, &counter, "embedding scales");
    } else if (m.embedding.kind == WeightMatrix::Kind::kFloat16) {  // fp16-exact: kept in fp16
      embedding_table = kernels::EmbeddingArgs::Table::kF16;
      embedding = device_copy(to_fp16_bits(m.embedding.dense), &counter, "embedding");
    } else {
      embedding = device_copy(m.embedding.dense, &counter, "embedding");
    }
    norm_f = device_copy(m.norm_f, &counter, "norm_f");
    // A quantized head stays quantized where the GEMV takes it; a tied fp16 table is the lm_head
    // too; otherwise the head is dequantized to fp16.
    upload_quantized_head(m.head());
    if (!head_q.bytes() && !(m.lm_head.empty() && embedding_table == kernels::EmbeddingArgs::Table::kF16))
      head16 = device_copy(to_fp16_bits(m.head().to_float()), &counter, "lm_head");

    const int64_t H = c.nheads(), P = c.headdim, G = c.ngroups, N = c.d_state, E = c.d_inner();
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const QuantizedLayer& q = m.layers[l];
      const std::string at = "artifact: layer " + std::to_string(l);
      DeviceLayer d;
      d.norm = device_copy(q.norm, &counter, "norm");
      d.conv_weight = device_copy(q.conv_weight, &counter, "conv weight");
      d.conv_bias = device_copy(q.conv_bias, &counter, "conv bias");
      d.dt_bias = device_copy(q.dt_bias, &counter, "dt_bias");
      d.A = device_copy(q.A, &counter, "A");
      d.D = device_copy(q.D, &counter, "D");
      d.gated_norm = device_copy(q.gated_norm, &counter, "gated norm");
      if (!q.out_bias.empty()) d.out_bias = device_copy(q.out_bias, &counter, "out_proj bias");
      d.split_in_proj = splits_in_proj(q, c);
      d.in_proj = upload_linear(q.in_proj, q.in_proj_in, &counter, at + " in_proj",
                                d.split_in_proj ? split_in_proj_order(c) : std::vector<int64_t>{});
      d.xbc_at = d.split_in_proj ? E + H : E;
      d.dt_at = d.split_in_proj ? E : E + c.conv_dim();
      any_split_in_proj = any_split_in_proj || d.split_in_proj;
      d.out_proj = upload_linear(q.out_proj, q.out_proj_in, &counter, at + " out_proj");
      expand_bytes = std::max({expand_bytes, d.in_proj.expand_bytes(), d.out_proj.expand_bytes()});
      for (const DeviceLinear* L : {&d.in_proj, &d.out_proj}) {
        integer_gemm = integer_gemm || L->path != DeviceLinear::Path::kFp16Input;
        grouped_gemm = grouped_gemm || (L->path != DeviceLinear::Path::kFp16Input && L->groups > 1);
      }
      d.in_proj_in = upload_format(q.in_proj_in, &counter);
      std::vector<float> in_codes, out_codes;
      append_format_codes(q.conv_in, c.conv_dim(), in_codes);
      append_format_codes(q.ssd_x, E, out_codes);
      append_format_codes(q.ssd_B, G * N, out_codes);
      append_format_codes(q.ssd_C, G * N, out_codes);
      d.conv_in_codes = format_codes(std::move(in_codes), &counter);
      d.conv_out_codes = format_codes(std::move(out_codes), &counter);
      d.ssd_dt = upload_format(q.ssd_dt, &counter);
      d.dt_code = format_code(q.ssd_dt, 0);
      d.out_proj_in = upload_format(q.out_proj_in, &counter);
      d.online_hadamard = q.online_hadamard;
      d.int8_state = q.ssm_state.is_int8();
      if (d.int8_state) {
        std::vector<int32_t> index(H * P);
        for (int64_t ch = 0; ch < H * P; ++ch)
          index[ch] = q.ssm_state.index.empty() ? (q.ssm_state.inner == 1 ? 0 : static_cast<int32_t>(ch))
                                                : q.ssm_state.index[ch];
        d.state_index = device_copy(index, &counter, "state scale index");
        d.state_scales = device_copy(q.ssm_state.scales, &counter, "state scales");
        d.state_inner = static_cast<int>(q.ssm_state.inner);
      } else {
        d.state_format = upload_format(q.ssm_state, &counter);
      }
      state_bytes.push_back(c.conv_dim() * (c.d_conv - 1) * 4);
      state_bytes.push_back(H * P * N * (d.int8_state ? 1 : 4));
      d.ssdi8 = q.ssd_mode == SsdMode::kSsdi8;
      d.fp16_chunked_ssd = !d.ssdi8 && fp16_chunked_ssd_fits(q, c);
      any_ssdi8 = any_ssdi8 || d.ssdi8;
      any_float_ssd = any_float_ssd || !d.ssdi8;
      if (d.ssdi8) {
        const Ssdi8Scales scales{q.ssd_B, q.ssd_C, q.x_scaled, q.ssm_state, q.cb};
        if (!ssdi8_all_int8(scales))
          fail("{}: SSDi8 with operands kept in floating point (an ablation) runs on --device cpu only", at);
        if (q.ssd_x.format != ActFormat::kFloat16)
          fail("{}: the SSDi8 kernel reads ssd.x in fp16, but this artifact gives it another format", at);
        d.s_B = device_copy(expand_scales(q.ssd_B, G, N), &counter, "SSDi8 scales");
        d.s_C = device_copy(expand_scales(q.ssd_C, G, N), &counter, "SSDi8 scales");
        d.s_xs = device_copy(expand_scales(q.x_scaled, H * P), &counter, "SSDi8 scales");
        d.s_s = device_copy(expand_scales(q.ssm_state, H * P), &counter, "SSDi8 scales");
        d.s_cb = device_copy(expand_scales(q.cb, G), &counter, "SSDi8 scales");
      }
      layers.push_back(std::move(d));
    }
    if (std::any_of(m.layers.begin(), m.layers.end(), [](const QuantizedLayer& q) { return q.online_hadamard; })) {
      if (!hadamard_size_supported(E)) fail("artifact: no Hadamard transform of size {}", E);
      hadamard_order = static_cast<int>(hadamard_base_order(E));
      if (hadamard_order > 1) {
        hadamard_base_host = hadamard_matrix(hadamard_order);
        hadamard_base = device_copy(hadamard_base_host, &counter, "Hadamard matrix");
      }
    }
    weight_bytes = counter.live - before;
  }

  // The chunked scan of a float-SSD layer's prefill (cpu::ssd_chunked on tensor cores). An
  // artifact's (Quamba2's fp16 math): x|B|C in fp16 as the conv writes them over work.conv_out's
  // bytes, dt_raw fp32 with its format, y fp32 into work.y, the layer's state fp32 or int8. The FP
  // model's: x|B|C, dt_raw and y in bf16, the state fp32.
  kernels::SsdChunkScanArgs float_ssd_args(const DeviceLayer& d, int64_t batch, int64_t length, void* ssm) const {
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

  void reserve(int64_t batch, int64_t length) const {
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
                 proj = layout.add(artifact * M * D * 4), chain = layout.add(grouped_gemm ? M * widest_out * 4 : 0),
                 logits = layout.add(logits_rows * c.vocab_size * 4), nll = layout.add(M * 4);
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
            b.at<float>(logits),   b.at<float>(nll),       b.at<int8_t>(x8),       b.at<int8_t>(ssdi8_bc),
            b.at<int8_t>(xbc_int8), b.at<void>(ssdi8_workspace), b.at<void>(chunk_scan_workspace),
            b.at<__half>(x16),     b.at<void>(expanded),   logits_rows};
    cuda_ok(cudaMemsetAsync(work.arrivals, 0, batch * c.ngroups * 4, stream), "cudaMemsetAsync");
    work_batch = batch;
    work_length = length;
    ++work_generation;
  }

  // What reads a formatted point: another fp32 op, an integer GEMM (the int8 values in work.x_int8)
  // or an fp16 GEMM (the values in work.x16), row stride `width` in both.
  enum class Reader { kFloat32, kInt8, kFloat16 };
  static Reader reader_of(const DeviceLinear& linear) { return linear.int8_input() ? Reader::kInt8 : Reader::kFloat16; }

  // Applies a point's format to fp32 rows in place, and writes the copy its reader multiplies.
  void enqueue_format(const DeviceFormat& f, float* data, int64_t rows, int64_t width, int64_t stride, Reader reader,
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
                                               const float* bias, float* out, bool residual_add) const {
    auto f = integer_gemm_args<kernels::GemmS8GroupedArgs>(L, m, w8, x_scale, bias, out, residual_add);
    f.group_size = L.group_size;
    return f;
  }

  // The decode GEMV's arguments for a projection at m rows (output and epilogue left to the caller).
  kernels::QgemvArgs qgemv_args(const DeviceLinear& L, int64_t m, float x_scale) const {
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

  // Whether a projection at m rows runs the decode GEMV (then `q` holds its arguments).
  bool decode_gemv(const DeviceLinear& L, int64_t m, float x_scale, kernels::QgemvArgs& q) const {
    using Path = DeviceLinear::Path;
    // The integer GEMVs do not scale with rows: above kW8A8GemvMaxRows (W8A8) and
    // kW4A8GemvMaxRows (W4A8, where the grouped GEMM runs) the GEMM wins.
    const bool grouped_gemm =
        L.path == Path::kInt8Grouped &&
        kernels::gemm_s8_grouped_supported(grouped_gemm_args(L, m, work.x_int8, x_scale, nullptr, work.out_proj_delta, false));
    const int64_t max_rows = L.path == Path::kInt8PerChannel ? kW8A8GemvMaxRows
                             : grouped_gemm                  ? kW4A8GemvMaxRows
                                                             : kernels::kQgemvMaxRows;
    if (m > max_rows || (L.path == Path::kFp16Input && L.bits != 4) || (L.path == Path::kInt8Grouped && L.bits == 8))
      return false;
    q = qgemv_args(L, m, x_scale);
    return kernels::qgemv_supported(q);
  }

  // Whether the projection's epilogue (qgemv or scale_int32) can add bias and output into the fp32
  // residual itself — the residual add of the next norm, with the same roundings.
  bool adds_into_residual(const DeviceLinear& L, int64_t m) const {
    kernels::QgemvArgs q;
    return L.path != DeviceLinear::Path::kFp16Input || decode_gemv(L, m, 1.f, q);
  }

  // Whether in_proj's GEMV builds its int8 input from the residual itself (the norm prologue):
  // one decode row only, where it saves the norm's launch; every block repeats the norm, which
  // measured slower than the separate kernel from 4 rows (docs/kernels/quantized_projections.md).
  bool norm_in_gemv(const DeviceLayer& d, int64_t m) const {
    kernels::QgemvArgs q;
    if (m != 1 || !d.in_proj.int8_input() || !decode_gemv(d.in_proj, m, d.in_proj_in.scale0, q)) return false;
    q.norm_residual = work.residual;
    q.norm_weight = d.norm.at<float>(0);
    return kernels::qgemv_supported(q);
  }

  // How a projection runs at m rows: which schedule (LinearPlan::Schedule) takes it, decided by
  // the kernels' capability predicates on the arguments it will be launched with. `out`, `bias`,
  // `residual_add` and `norm_weight` as enqueue_linear receives them.
  LinearPlan plan_linear(const DeviceLinear& L, int64_t m, float x_scale, const float* bias, float* out,
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

  // The FP model's GEMV: one decode row of bf16 input (work.x16), or the input built in its
  // prologue — in_proj's RMSNorm of the residual, or out_proj's gated RMSNorm of y and z.
  enum class GemvPrologue { kNone, kRmsNorm, kGatedRmsNorm };
  kernels::GemvArgs bf16_gemv_args(const DeviceLinear& L, int64_t m, void* out, bool residual_add,
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
    g.out_type = residual_add ? ElementType::kF32 : ElementType::kBF16;
    g.accumulate = residual_add;
    g.eps = static_cast<float>(c.norm_eps);
    g.norm_weight = norm_weight;
    if (prologue == GemvPrologue::kRmsNorm) {
      g.input = kernels::GemvInput::kRmsNorm;
      g.residual = work.residual;
    } else if (prologue == GemvPrologue::kGatedRmsNorm) {
      g.input = kernels::GemvInput::kGatedRmsNorm;
      g.y = reinterpret_cast<const bf16*>(work.y);
      g.z = reinterpret_cast<const bf16*>(work.zxbcdt);
      g.z_stride = c.d_in_proj();
      g.group_size = static_cast<int>(c.d_inner() / c.ngroups);
    }
    return g;
  }

  kernels::GemmW4A16Args w4a16_args(const DeviceLinear& L, int64_t m, float* out) const {
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

  // Runs a projection as its plan says: out[m, n] = x · wᵀ (+ bias[n] on the integer paths), x as
  // enqueue_format left it; with plan.residual_add out is the fp32 residual and out += x · wᵀ +
  // bias; with plan.norm_prologue in_proj's input is the RMSNorm of the residual, built inside
  // the GEMV from `norm_weight`.
  void enqueue_linear(const LinearPlan& plan, const DeviceLinear& L, int64_t m, float x_scale, const float* bias,
                      float* out, const char* what, const float* norm_weight = nullptr,
                      const kernels::L2Prefetch* prefetch = nullptr) const {
    using Schedule = LinearPlan::Schedule;
    const bool residual_add = plan.residual_add;
    if (plan.schedule == Schedule::kBf16Gemv) {
      const GemvPrologue prologue = plan.norm_prologue         ? GemvPrologue::kRmsNorm
                                    : plan.gated_norm_prologue ? GemvPrologue::kGatedRmsNorm
                                                               : GemvPrologue::kNone;
      cuda_ok(kernels::launch_gemv(bf16_gemv_args(L, m, out, residual_add, norm_weight, prologue), stream), what);
      return;
    }
    if (plan.schedule == Schedule::kBf16Gemm) {
      kernels::GemmArgs g;
      g.m = m;
      g.n = L.n;
      g.k = L.k;
      g.in_type = ElementType::kBF16;
      g.x = work.x16;
      g.ldx = L.k;
      g.w = L.dense16.at<void>(0);
      g.out = out;
      g.ldout = L.n;
      g.out_type = residual_add ? ElementType::kF32 : ElementType::kBF16;
      g.accumulate = residual_add;
      gemm->run(g, stream);
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
      g.k = L.k;
      g.in_type = ElementType::kF16;
      g.x = work.x16;
      g.ldx = L.k;
      g.w = w16;
      g.out = out;
      g.out_type = ElementType::kF32;
      gemm->run(g, stream);
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

  // A split layer's in_proj (DeviceLayer::split_in_proj) over m prefill rows as two fused sm_90 GEMMs, when
  // both run here: z|dt into work.zxbcdt in fp32, x|B|C into work.xbc_int8 as conv.in's int8 codes (a
  // quarter of the bytes written and read back by the conv). Each reads its rows of the weights as
  // reordered at upload.
  std::pair<kernels::GemmS8ScaledArgs, kernels::GemmS8ScaledArgs> split_in_proj_args(const DeviceLayer& d,
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

  // Whether a layer's in_proj runs split at m prefill rows (both fused GEMMs take it here).
  bool runs_split_in_proj(const DeviceLayer& d, int64_t m) const {
    if (!d.split_in_proj || m < kFusedS8GemmMinRows) return false;
    const auto [z_dt, xbc] = split_in_proj_args(d, m);
    return kernels::gemm_s8_scaled_supported(z_dt) && kernels::gemm_s8_scaled_supported(xbc);
  }

  // `ssd_tables`: the SSDi8 scan's ChunkCumsum, run on the second stream right after dt is written.
  void enqueue_split_in_proj(const DeviceLayer& d, int64_t m, const kernels::Ssdi8ChunkScanArgs* ssd_tables) const {
    const auto [z_dt, xbc] = split_in_proj_args(d, m);
    cuda_ok(cudaEventRecord(fork_event, stream), "cudaEventRecord");
    cuda_ok(cudaStreamWaitEvent(side_stream, fork_event, 0), "cudaStreamWaitEvent");
    // z|dt first: ChunkCumsum then fills the SMs that the x|B|C GEMM's last round of tiles leaves idle.
    cuda_ok(kernels::launch_gemm_s8_scaled(z_dt, side_stream), "in_proj (z|dt)");
    if (ssd_tables) cuda_ok(kernels::launch_ssdi8_chunk_tables(*ssd_tables, side_stream), "ssdi8 ChunkCumsum");
    cuda_ok(kernels::launch_gemm_s8_scaled(xbc, stream), "in_proj (x|B|C as int8)");
    cuda_ok(cudaEventRecord(join_event, side_stream), "cudaEventRecord");
  }

  kernels::Ssdi8ChunkScanArgs ssdi8_args(const DeviceLayer& d, int64_t batch, int64_t length, void* ssm_state) const {
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

  // The decode recurrence's arguments (the state update over every token of the rows), reading the
  // conv's output in work.conv_out and dt from in_proj's output.
  kernels::SsdStateUpdateArgs state_update_args(const DeviceLayer& d, int64_t batch, int64_t length, void* ssm_state) const {
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

  // What a decode row's out_proj fetches into L2 before it waits: the next layer's in_proj weights
  // (their first kL2PrefetchL2Share of L2) and scales, so that DRAM streams them while the gated
  // norm, out_proj's tail and in_proj's norm prologue wait on latency (28–40 MB of an H100's 50 MB
  // measured best; docs/kernels/quantized_projections.md).
  static constexpr double kL2PrefetchL2Share = 0.6;
  void next_in_proj_prefetch(const DeviceLayer& next, kernels::L2Prefetch (&to)[kernels::kL2PrefetchRanges]) const {
    const auto range = [](const DeviceBlock& b, size_t limit) {
      kernels::L2Prefetch r;
      r.p = b.bytes() ? b.at<void>(0) : nullptr;
      r.bytes = static_cast<long long>(std::min(b.bytes(), limit) / 16 * 16);
      return r;
    };
    to[0] = range(next.in_proj.values, static_cast<size_t>(kL2PrefetchL2Share * device.l2_cache_bytes));
    to[1] = range(next.in_proj.scales, next.in_proj.scales.bytes());
  }

  // The conv's arguments for layer l (its x|B|C input as in_proj left it, its fp32 output), before
  // the plan routes the output to the SSD kernel's operand buffers.
  kernels::CausalConv1dArgs conv_args(const DeviceLayer& d, int64_t batch, int64_t length, void* conv_state,
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

  // Decides everything layer l runs for (batch, length) rows. `previous`: the plan of layer l - 1.
  // The capability checks read the state's buffers of layer l; every state's buffers are 256-byte
  // aligned device memory, so the plan holds for any state of this batch.
  LayerPlan plan_layer(const DeviceLayer& d, int64_t batch, int64_t length, CudaState& state, int64_t l,
                       const LayerPlan* previous) const {
    if (bf16_model) return plan_bf16_layer(d, batch, length, state, l);
    const Mamba2Config& c = config;
    const int64_t M = batch * length, H = c.nheads(), P = c.headdim, G = c.ngroups, N = c.d_state;
    LayerPlan p;
    p.pending_delta = previous && !previous->out_proj.residual_add;
    const bool ssdi8_prefill = d.ssdi8 && length > 1;
    if (!p.pending_delta && norm_in_gemv(d, M)) {
      p.in_proj = plan_linear(d.in_proj, M, d.in_proj_in.scale0, nullptr, work.zxbcdt, false, d.norm.at<float>(0));
    } else {
      // Prefill only: in a decode step the two streams cost more than the conv saves
      // (docs/kernels/gemm.md).
      p.split_in_proj = length > 1 && runs_split_in_proj(d, M);
      // With dt's format applied in the SSDi8 kernels, its ChunkCumsum follows dt on the second stream.
      p.tables_early = p.split_in_proj && ssdi8_prefill && d.dt_format_in_kernel();
      if (!p.split_in_proj) p.in_proj = plan_linear(d.in_proj, M, d.in_proj_in.scale0, nullptr, work.zxbcdt, false, nullptr);
    }
    if (ssdi8_prefill) ssdi8_args(d, batch, length, state.ssm(l));  // fails when the kernel does not take the shape
    const kernels::SsdChunkScanArgs chunked = float_ssd_args(d, batch, length, state.ssm(l));
    const bool float_chunked = d.fp16_chunked_ssd && length > 1 && kernels::ssd_chunk_scan_supported(chunked);
    // Decode, and shapes the chunked scans do not take: the recurrence over every token, exact for
    // any length; one decode token a sequence runs the conv inside the state update's launch where
    // that kernel takes the shape.
    const bool recurrence = !ssdi8_prefill && !float_chunked;
    kernels::SsdConvStepArgs conv_step;
    conv_step.conv = conv_args(d, batch, length, state.conv(l), p.split_in_proj);
    if (recurrence) conv_step.step = state_update_args(d, batch, length, state.ssm(l));
    conv_step.arrivals = work.arrivals;
    if (ssdi8_prefill) {
      p.ssd = LayerPlan::Ssd::kSsdi8Chunked;
    } else if (float_chunked) {
      p.ssd = LayerPlan::Ssd::kFloatChunked;
    } else if (length == 1 && batch <= kConvStepMaxBatch && kernels::ssd_conv_step_supported(conv_step)) {
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
    p.gated_out = reader_of(d.out_proj) == Reader::kInt8        ? LayerPlan::GatedOut::kInt8
                  : d.out_proj_in.format != Format::kInt8 ? LayerPlan::GatedOut::kFp16
                                                          : LayerPlan::GatedOut::kFp32ThenFormat;
    const bool residual_add = adds_into_residual(d.out_proj, M);
    const float* bias = d.out_bias.bytes() ? d.out_bias.at<float>(0) : nullptr;
    p.out_proj = plan_linear(d.out_proj, M, d.out_proj_in.scale0, bias, residual_add ? work.residual : work.out_proj_delta,
                             residual_add, nullptr);
    p.prefetch_next_in_proj = M == 1 && l + 1 < static_cast<int64_t>(layers.size()) &&
                              p.out_proj.schedule == LinearPlan::Schedule::kQgemv;
    return p;
  }

  // The FP model's layer: one decode row runs both projections as GEMVs with the norms in their
  // prologues (4 launches a layer, not 6: docs/kernels/gemm.md, "gemv"); more rows run
  // cuBLASLt's bf16 GEMMs, out_proj accumulating into the fp32 residual. Prefill runs the chunked
  // scan where it takes the shape, else (and for decode) the recurrence, exact for any length.
  LayerPlan plan_bf16_layer(const DeviceLayer& d, int64_t batch, int64_t length, CudaState& state, int64_t l) const {
    const Mamba2Config& c = config;
    const int64_t M = batch * length;
    LayerPlan p;
    p.bf16 = true;
    const bool gemv =
        M == 1 &&
        kernels::gemv_supported(
            bf16_gemv_args(d.in_proj, M, work.zxbcdt, false, d.norm.at<float>(0), GemvPrologue::kRmsNorm)) &&
        kernels::gemv_supported(
            bf16_gemv_args(d.out_proj, M, work.residual, true, d.gated_norm.at<float>(0), GemvPrologue::kGatedRmsNorm));
    for (LinearPlan* L : {&p.in_proj, &p.out_proj}) {
      L->bf16 = true;
      L->schedule = gemv ? LinearPlan::Schedule::kBf16Gemv : LinearPlan::Schedule::kBf16Gemm;
    }
    p.in_proj.norm_prologue = gemv;
    p.out_proj.gated_norm_prologue = gemv;
    p.out_proj.residual_add = true;
    p.gated_out = gemv ? LayerPlan::GatedOut::kInOutProjPrologue : LayerPlan::GatedOut::kBf16;
    const bool chunked =
        length > 1 && kernels::ssd_chunk_scan_supported(float_ssd_args(d, batch, length, state.ssm(l)));
    p.ssd = chunked ? LayerPlan::Ssd::kFloatChunked : LayerPlan::Ssd::kRecurrence;
    if (!chunked && !kernels::ssd_state_update_supported(state_update_args(d, batch, length, state.ssm(l))))
      fail("CUDA: no SSD kernel supports heads {} × headdim {}, ngroups {}, d_state {}", c.nheads(), c.headdim,
           c.ngroups, c.d_state);
    return p;
  }

  // The plan of a forward of (batch, length), made on first use and kept; a resized workspace
  // (new buffer addresses) makes them again.
  const ForwardPlan& forward_plan(int64_t batch, int64_t length, CudaState& state) const {
    if (plans_generation != work_generation) {
      plans.clear();
      plans_generation = work_generation;
    }
    auto found = plans.find({batch, length});
    if (found != plans.end()) return found->second;
    ForwardPlan plan;
    plan.batch = batch;
    plan.length = length;
    plan.work_generation = work_generation;
    for (int64_t l = 0; l < config.n_layer; ++l)
      plan.layers.push_back(plan_layer(layers[l], batch, length, state, l, l > 0 ? &plan.layers[l - 1] : nullptr));
    plan.final_pending_delta = !plan.layers.back().out_proj.residual_add;
    return plans.emplace(std::make_pair(batch, length), std::move(plan)).first->second;
  }

  void enqueue_layer(const DeviceLayer& d, const LayerPlan& p, int64_t batch, int64_t length,
                     CudaState& state, int64_t l, const DeviceLayer* previous) const {
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
      if (!int8_input && !p.bf16) enqueue_format(d.in_proj_in, work.normed, M, D, D, Reader::kFloat16, "in_proj input");
      if (p.split_in_proj) {
        enqueue_split_in_proj(d, M, p.tables_early ? &ssd : nullptr);
        ssd.tables_ready = p.tables_early;
      } else {
        enqueue_linear(p.in_proj, d.in_proj, M, d.in_proj_in.scale0, nullptr, work.zxbcdt, "in_proj");
      }
    }

    kernels::CausalConv1dArgs conv = conv_args(d, batch, length, state.conv(l), p.split_in_proj);
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
      case Ssd::kRecurrence:
        cuda_ok(kernels::launch_ssd_state_update(state_update_args(d, batch, length, state.ssm(l)), stream),
                "ssd_state_update");
        break;
    }
    if (p.state_format_pass)
      enqueue_format(d.state_format, static_cast<float*>(state.ssm(l)), batch * H * P, N, N, Reader::kFloat32, "ssd state");

    enqueue_gated_norm(d, p, M);
    kernels::L2Prefetch next_weights[kernels::kL2PrefetchRanges];
    if (p.prefetch_next_in_proj) next_in_proj_prefetch(layers[l + 1], next_weights);
    enqueue_linear(p.out_proj, d.out_proj, M, d.out_proj_in.scale0, d.out_bias.bytes() ? d.out_bias.at<float>(0) : nullptr,
                   p.out_proj.residual_add ? work.residual : work.out_proj_delta, "out_proj",
                   p.out_proj.gated_norm_prologue ? d.gated_norm.at<float>(0) : nullptr,
                   p.prefetch_next_in_proj ? next_weights : nullptr);
  }

  // The gated RMSNorm of y by silu(z), written as out_proj reads it (LayerPlan::GatedOut): an
  // artifact's through kernels/hadamard_quant (with the online rotation, if any), the FP model's
  // through kernels/gated_rmsnorm in bf16, or nothing when out_proj's GEMV builds it itself.
  void enqueue_gated_norm(const DeviceLayer& d, const LayerPlan& p, int64_t M) const {
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
    gated.rotate = d.online_hadamard;
    if (d.online_hadamard) {
      gated.base_order = hadamard_order;
      gated.base_matrix = hadamard_order > 1 ? hadamard_base.at<int8_t>(0) : nullptr;
      gated.base_matrix_host = hadamard_order > 1 ? hadamard_base_host.data() : nullptr;
      gated.normalize = static_cast<float>(1.0 / std::sqrt(static_cast<double>(E)));
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

  void enqueue_body(int64_t batch, int64_t length, CudaState& state) const {
    const Mamba2Config& c = config;
    const int64_t M = batch * length, D = c.d_model;
    const ForwardPlan& plan = forward_plan(batch, length, state);
    kernels::EmbeddingArgs e;
    e.rows = M;
    e.dim = static_cast<int>(D);
    e.tokens = work.tokens;
    e.table = embedding.at<void>(0);
    e.table_type = embedding_table;
    e.row_scales = embedding_scales.bytes() ? embedding_scales.at<float>(0) : nullptr;
    e.out = work.residual;
    cuda_ok(kernels::launch_embedding(e, stream), "embedding");
    for (int64_t l = 0; l < c.n_layer; ++l)
      enqueue_layer(layers[l], plan.layers[l], batch, length, state, l, l > 0 ? &layers[l - 1] : nullptr);
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

  // A quantized (head-to-toe) lm_head in its stored width: qgemv W8A16 or W4A16 read it at 1 or
  // ½ byte a weight, 16 rows a launch, instead of an fp16 copy's 2 bytes (a float summation like
  // the fp16 GEMM's, not bit-identical to the CPU). int8 groups wider than the GEMV takes (a
  // per-row scale: d_model columns) are split into groups of at most 512 columns repeating their
  // scale. Heads the GEMV cannot take are left to the fp16 copy.
  void upload_quantized_head(const WeightMatrix& head) {
    if (!head.is_quantized()) return;
    const QuantizedMatrix& q = head.quantized;
    if (q.granularity == Granularity::kPerTensor) return;
    const bool int4 = q.bits == QuantBits::kInt4;
    int64_t group = q.group_size;
    std::vector<float> scales = q.scales;
    if (!int4) {
      group = 512;  // the widest 16·2^j ≤ 512 dividing the stored group and the row
      while (group >= 16 && (q.group_size % group != 0 || q.cols % group != 0)) group /= 2;
      if (group < 16) return;
      if (group != q.group_size) {
        scales.clear();
        for (int64_t r = 0; r < q.rows; ++r)
          for (int64_t c0 = 0; c0 < q.cols; c0 += group) scales.push_back(q.scales[q.scale_index(r, c0)]);
      }
    }
    head_q_kind = int4 ? kernels::QgemvKind::kW4A16 : kernels::QgemvKind::kW8A16;
    // Heads whose groups the tensor-core GEMV takes (int8: 32 columns or more, int4: 64) go to it, in
    // its layout.
    const int64_t mma_cols = kernels::mma_layout_columns(head_q_kind);
    head_q_mma = group % mma_cols == 0 && q.cols % mma_cols == 0;
    head_q = head_q_mma ? device_copy(int4 ? kernels::pack_w4a16_mma_layout(q.values.data(), q.rows, q.cols)
                                           : kernels::pack_w8a16_mma_layout(q.values.data(), q.rows, q.cols),
                                      &counter, "lm_head")
             : int4 ? device_copy(pack_int4(q.values.data(), static_cast<int64_t>(q.values.size())), &counter, "lm_head")
                    : device_copy(q.values, &counter, "lm_head");
    head_q_scales = device_copy(scales, &counter, "lm_head scales");
    head_q_group = static_cast<int>(group);
    // The head's input rows are work.x16 at offsets of whole rows and its output work.logits:
    // 16-byte aligned when d_model is a multiple of 8, like any cudaMalloc'd address (head_q's own
    // stand in for the check, before the workspace exists).
    kernels::QgemvArgs check = head_gemv_args(head_q.at<__half>(0), config.d_model);
    check.out = head_q.at<void>(0);
    if (config.d_model % 8 != 0 || !kernels::qgemv_supported(check)) {
      head_q = DeviceBlock{};
      head_q_scales = DeviceBlock{};
      head_q_mma = false;
    }
  }

  // The quantized head's GEMV over one row of x (row stride ldx) into work.logits.
  kernels::QgemvArgs head_gemv_args(const __half* x, int64_t ldx) const {
    kernels::QgemvArgs q;
    q.kind = head_q_kind;
    q.m = 1;
    q.n = static_cast<int>(config.vocab_size);
    q.k = static_cast<int>(config.d_model);
    q.x_f16 = x;
    q.ldx = ldx;
    q.w = head_q.bytes() ? head_q.at<void>(0) : nullptr;
    q.w_scales = head_q_scales.bytes() ? head_q_scales.at<float>(0) : nullptr;
    q.w_mma_layout = head_q_mma;
    q.group_size = head_q_group;
    q.out = work.logits;
    q.ldout = config.vocab_size;
    q.out_type = ElementType::kF32;
    return q;
  }

  // cuda_forward.h's hook: the logits of `rows` rows from the quantized head, kQgemvMaxRows rows a
  // launch, when there is one. False: the caller runs the fp16 GEMM.
  bool enqueue_head_gemv(const uint16_t* x, int64_t ldx, int64_t rows) const {
    if (!head_q.bytes()) return false;
    for (int64_t r0 = 0; r0 < rows; r0 += kernels::kQgemvMaxRows) {
      kernels::QgemvArgs q = head_gemv_args(reinterpret_cast<const __half*>(x) + r0 * ldx, ldx);
      q.m = static_cast<int>(std::min<int64_t>(kernels::kQgemvMaxRows, rows - r0));
      q.out = work.logits + r0 * config.vocab_size;
      cuda_ok(kernels::launch_qgemv(q, stream), "lm_head (quantized)");
    }
    return true;
  }

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

CudaBackend::CudaBackend(const ModelWeights& weights, const CudaBackendOptions& options)
    : impl_(std::make_unique<Impl>(weights.config, options)) {
  impl_->upload_bf16_model(weights);
}

CudaBackend::CudaBackend(const Mamba2Config& config, uint64_t seed, const CudaBackendOptions& options) {
  validate_config(config, "synthetic model");
  impl_ = std::make_unique<Impl>(config, options);
  impl_->fill_random_bf16_model(seed);
}

CudaBackend::CudaBackend(std::shared_ptr<const QuantizedModel> model, const CudaBackendOptions& options) {
  if (!model) fail("internal: no quantized model");
  validate_quantized_model(*model, "quantized model");
  impl_ = std::make_unique<Impl>(model->config, options);
  impl_->model = std::move(model);
  impl_->upload_quantized_model();
}

CudaBackend::~CudaBackend() = default;

const Mamba2Config& CudaBackend::config() const { return impl_->config; }

std::unique_ptr<InferenceState> CudaBackend::new_state(int64_t batch) const {
  if (batch <= 0) fail("batch size must be positive, got {}", batch);
  auto state = std::make_unique<CudaState>(impl_->state_bytes, batch, impl_->stream, &impl_->counter, impl_.get());
  impl_->reserve(batch, 1);  // decode steps of this batch allocate nothing
  return state;
}

void CudaBackend::forward(const int32_t* tokens, int64_t length, InferenceState& state,
                          const ForwardOutputs& outputs) const {
  auto* cuda_state = dynamic_cast<CudaState*>(&state);
  if (!cuda_state || cuda_state->owner != impl_.get()) fail("the CUDA backend was given a state it did not make");
  if (length <= 0) return;
  run_cuda_forward(*impl_, tokens, length, *cuda_state, outputs, impl_->options.use_graphs);
}

void CudaBackend::reserve(int64_t batch, int64_t length) const { impl_->reserve(batch, length); }

std::string CudaBackend::describe_plan(int64_t batch, int64_t length) const {
  if (batch <= 0 || length <= 0) fail("plan: batch and length must be positive, got {} x {}", batch, length);
  CudaState state(impl_->state_bytes, batch, impl_->stream, &impl_->counter, impl_.get());
  impl_->reserve(batch, length);
  return impl_->forward_plan(batch, length, state).describe();
}

MemoryReport CudaBackend::memory() const { return impl_->memory(impl_->weight_bytes); }

size_t CudaBackend::state_bytes_per_sequence() const {
  size_t bytes = 0;
  for (size_t b : impl_->state_bytes) bytes += b;
  return bytes;
}

std::string CudaBackend::device_name() const { return impl_->device_name(); }

}  // namespace ssdq
