// The CUDA engine's weights: the FP model uploaded in bf16 or filled with random values on the
// device, an artifact uploaded in its stored widths (runtime/cuda_engine.h).
#include "runtime/cuda_engine.h"

namespace ssdq {
namespace {

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

// `row_order` (int8 per-channel weights only): device row r holds the weight row row_order[r].
DeviceLinear upload_linear(const WeightMatrix& w, const ActQuant& input, MemoryCounter* counter,
                           const std::string& what, bool fp32, const std::vector<int64_t>& row_order = {}) {
  DeviceLinear d;
  d.n = w.rows;
  d.k = w.cols;
  if (!w.is_quantized() && fp32) {
    d.path = DeviceLinear::Path::kFp32;
    d.dense32 = device_copy(w.dense, counter, "float projection weights");
    return d;
  }
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

void CudaBackend::Impl::allocate_bf16_model() {
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
  if (!c.tie_embeddings) head16 = block(head_vocab() * c.d_model, 2, "lm_head");
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

void CudaBackend::Impl::upload_bf16_model(const ModelWeights& w) {
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

void CudaBackend::Impl::fill_random_bf16_model(uint64_t seed) {
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

void CudaBackend::Impl::upload_quantized_model() {
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
    d.in_proj = upload_linear(q.in_proj, q.in_proj_in, &counter, at + " in_proj", options.fp32_float_math,
                              d.split_in_proj ? split_in_proj_order(c) : std::vector<int64_t>{});
    d.xbc_at = d.split_in_proj ? E + H : E;
    d.dt_at = d.split_in_proj ? E : E + c.conv_dim();
    any_split_in_proj = any_split_in_proj || d.split_in_proj;
    d.out_proj = upload_linear(q.out_proj, q.out_proj_in, &counter, at + " out_proj", options.fp32_float_math);
    expand_bytes = std::max({expand_bytes, d.in_proj.expand_bytes(), d.out_proj.expand_bytes()});
    for (const DeviceLinear* L : {&d.in_proj, &d.out_proj}) {
      integer_gemm = integer_gemm || L->int8_input();
      grouped_gemm = grouped_gemm || (L->int8_input() && L->groups > 1);
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
    d.hadamard_blocks = q.hadamard_blocks;
    any_norm_in_parts = any_norm_in_parts || norm_in_parts(d);
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
    d.fp16_chunked_ssd = !d.ssdi8 && !options.fp32_float_math && fp16_chunked_ssd_fits(q, c);
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
  int64_t rotated = 0;  // the channels one rotation spans: the same in every rotated layer (one H_K uploaded)
  for (const QuantizedLayer& q : m.layers) {
    if (!q.online_hadamard) continue;
    if (rotated && rotated != E / q.hadamard_blocks)
      fail("artifact: layers rotate out_proj's input in blocks of {} and of {} channels; the CUDA engine takes one size",
           rotated, E / q.hadamard_blocks);
    rotated = E / q.hadamard_blocks;
  }
  if (rotated) {
    if (!hadamard_size_supported(rotated)) fail("artifact: no Hadamard transform of size {}", rotated);
    hadamard_order = static_cast<int>(hadamard_base_order(rotated));
    if (hadamard_order > 1) {
      hadamard_base_host = hadamard_matrix(hadamard_order);
      hadamard_base = device_copy(hadamard_base_host, &counter, "Hadamard matrix");
    }
  }
  weight_bytes = counter.live - before;
}

void CudaBackend::Impl::upload_quantized_head(const WeightMatrix& head) {
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

}  // namespace ssdq
