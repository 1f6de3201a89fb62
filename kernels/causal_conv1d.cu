#include "kernels/causal_conv1d.h"

#include <type_traits>

#include "kernels/element_type.h"
#include "kernels/programmatic_launch.cuh"
#include "kernels/quant_epilogue.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kChannels = 128;  // threads per block, one channel each
constexpr int kMaxTile = 64;    // tokens per thread (CausalConv1dArgs::tile_tokens: 64, 32 or 16)
constexpr int kLoadBatch = 8;   // prefill tokens whose inputs a thread loads before computing any

__device__ inline float load_input(float v, float) { return v; }
__device__ inline float load_input(__nv_bfloat16 v, float) { return __bfloat162float(v); }
__device__ inline float load_input(int8_t q, float scale) { return __fmul_rn(static_cast<float>(q), scale); }

// A channel's activation format (apply_format_code) with the reciprocal of its int8 scale.
struct ChannelFormat {
  float code = 0.f, inv_code = 0.f;
  __device__ ChannelFormat(const float* codes, int c) {
    if (codes) code = codes[c];
    if (code > 0.f) inv_code = __frcp_rn(code);
  }
  __device__ float apply(float v) const { return apply_format_code_fast(v, code, inv_code); }
};

// fp32 inputs take their point's format as read (the state then holds formatted values).
template <typename In>
__device__ inline In format_input(In raw, const ChannelFormat& format) {
  if constexpr (std::is_same_v<In, float>) {
    return format.apply(raw);
  } else {
    return raw;
  }
}

// The output of one thread's channel when the conv writes parts (CausalConv1dOutputPart).
struct PartWriter {
  char* base = nullptr;  // the channel's element of row 0 of the sequence
  int64_t stride = 0;    // elements between rows
  ElementType type = ElementType::kF32;

  PartWriter() = default;
  __device__ PartWriter(const CausalConv1dArgs& a, int c, int b) {
    int i = 0;
    while (i + 1 < a.part_count && c >= a.parts[i + 1].first_channel) ++i;
    const CausalConv1dOutputPart& part = a.parts[i];
    type = part.type;
    stride = part.stride;
    const int size = type == ElementType::kS8 ? 1 : type == ElementType::kF16 ? 2 : 4;
    base = static_cast<char*>(part.out) + (static_cast<int64_t>(b) * a.seqlen * stride + (c - part.first_channel)) * size;
  }
  __device__ void store(int t, float y, const ChannelFormat& format) const {
    const int64_t at = static_cast<int64_t>(t) * stride;
    switch (type) {
      case ElementType::kS8: reinterpret_cast<int8_t*>(base)[at] = quantize_int8_fast(y, format.code, format.inv_code); break;
      case ElementType::kF16: reinterpret_cast<__half*>(base)[at] = __float2half_rn(format.apply(y)); break;
      default: reinterpret_cast<float*>(base)[at] = format.apply(y);
    }
  }
};

template <typename Out>
__device__ inline Out store_output(float v, float scale) {
  if constexpr (std::is_same_v<Out, int8_t>) {
    return quantize_int8(v, scale);
  } else {
    return from_float<Out>(v);
  }
}

// Each thread runs one channel over a tile of `tile` tokens, starting from the W-1 inputs
// before the tile (from the input, or from the conv state before t = 0). Out = PartWriter: fp32
// in, the output in parts.
template <int W, typename In, typename Out>
__global__ void __launch_bounds__(kChannels)
    causal_conv1d_kernel(CausalConv1dArgs a, int tile, bool update_state) {
  wait_for_previous_grid();
  allow_next_grid();
  const int c = blockIdx.x * kChannels + threadIdx.x;
  const int t0 = blockIdx.y * tile, b = blockIdx.z;
  if (c >= a.channels) return;
  const In* in = static_cast<const In*>(a.in) + static_cast<int64_t>(b) * a.seqlen * a.in_stride + c;
  In* state = static_cast<In*>(a.state) + (static_cast<int64_t>(b) * a.channels + c) * (W - 1);
  const float in_scale = a.in_scales ? a.in_scales[c] : 1.f, out_scale = a.out_scales ? a.out_scales[c] : 1.f;
  const ChannelFormat in_format(a.in_formats, c), out_format(a.out_formats, c);
  In raw[W];  // the window's inputs as stored (the state keeps them unchanged)
  float w[W], window[W];
#pragma unroll
  for (int k = 0; k < W; ++k) w[k] = a.weight[c * W + k];
  const float bias = a.bias[c];
#pragma unroll
  for (int k = 0; k < W - 1; ++k) {
    const int t = t0 - (W - 1) + k;
    raw[k] = t >= 0 ? format_input(in[static_cast<int64_t>(t) * a.in_stride], in_format) : state[W - 1 + t];
    window[k] = load_input(raw[k], in_scale);
  }
  const int t_end = min(t0 + tile, a.seqlen);
  constexpr bool kParts = std::is_same_v<Out, PartWriter>;
  using Stored = std::conditional_t<kParts, float, Out>;
  Stored* out = kParts ? nullptr : static_cast<Stored*>(a.out) + static_cast<int64_t>(b) * a.seqlen * a.channels + c;
  const PartWriter parts = kParts ? PartWriter(a, c, b) : PartWriter{};
  auto step = [&](In value, int t) {
    raw[W - 1] = format_input(value, in_format);
    window[W - 1] = load_input(raw[W - 1], in_scale);
    float acc = bias;
#pragma unroll
    for (int k = 0; k < W; ++k) acc = __fmaf_rn(w[k], window[k], acc);  // the CPU's order
    float y = silu(acc);
    if constexpr (kParts) {
      parts.store(t, y, out_format);
    } else {
      if constexpr (std::is_same_v<Out, float>) y = out_format.apply(y);
      out[static_cast<int64_t>(t) * a.channels] = store_output<Out>(y, out_scale);
    }
#pragma unroll
    for (int k = 0; k < W - 1; ++k) window[k] = window[k + 1], raw[k] = raw[k + 1];
  };
  if (t_end - t0 < kLoadBatch) {  // decode: the plain loop has the shortest latency
    for (int t = t0; t < t_end; ++t) step(in[static_cast<int64_t>(t) * a.in_stride], t);
  } else {
    // Prefill: kLoadBatch tokens' inputs are loaded before any of their outputs is stored (the
    // stores would otherwise hold each load behind the previous token's store); 2.7b W8A8 conv of
    // 2,048 tokens 102 → 74 µs (kernels_bench, H100).
    for (int tb = t0; tb < t_end; tb += kLoadBatch) {
      In next[kLoadBatch];
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) next[u] = tb + u < t_end ? in[static_cast<int64_t>(tb + u) * a.in_stride] : In{};
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u)
        if (tb + u < t_end) step(next[u], tb + u);
    }
  }
  // Only when this thread is the single reader of the old state may it write the new one.
  if (update_state && t_end == a.seqlen) {
#pragma unroll
    for (int k = 0; k < W - 1; ++k) state[k] = raw[k];
  }
}

// The new state when the conv ran in several tiles: the last W-1 inputs (seqlen ≥ W-1 here
// because seqlen > tile ≥ 16).
template <int W, typename In>
__global__ void conv_state_update_kernel(CausalConv1dArgs a) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (c >= a.channels) return;
  const In* in = static_cast<const In*>(a.in) + static_cast<int64_t>(b) * a.seqlen * a.in_stride + c;
  In* state = static_cast<In*>(a.state) + (static_cast<int64_t>(b) * a.channels + c) * (W - 1);
  const ChannelFormat in_format(a.in_formats, c);
#pragma unroll
  for (int k = 0; k < W - 1; ++k)
    state[k] = format_input(in[static_cast<int64_t>(a.seqlen - (W - 1) + k) * a.in_stride], in_format);
}

// Tokens per thread: the largest tile (fewest window re-reads) that still gives ~4 waves of
// blocks (a grid of 1.1 waves ran its tail alone; docs/kernels/elementwise.md).
int tile_tokens(const CausalConv1dArgs& a) {
  if (a.tile_tokens) return a.tile_tokens;
  const int64_t target = 4 * 8 * int64_t(current_device_attribute(cudaDevAttrMultiProcessorCount));
  int tile = kMaxTile;
  while (tile > 16 && int64_t((a.channels + kChannels - 1) / kChannels) * ((a.seqlen + tile - 1) / tile) * a.batch < target)
    tile /= 2;
  return tile;
}

template <int W, typename In, typename Out>
cudaError_t launch_types(const CausalConv1dArgs& a, cudaStream_t stream) {
  const int tile = tile_tokens(a), tiles = (a.seqlen + tile - 1) / tile;
  const dim3 grid((a.channels + kChannels - 1) / kChannels, tiles, a.batch);
  const cudaError_t status =
      launch_kernel(causal_conv1d_kernel<W, In, Out>, LaunchShape{grid, dim3(kChannels)}, stream, a, tile, tiles == 1);
  if (status != cudaSuccess) return status;
  if (tiles > 1) conv_state_update_kernel<W, In><<<dim3((a.channels + 127) / 128, a.batch), 128, 0, stream>>>(a);
  return cudaGetLastError();
}

template <int W>
cudaError_t launch_width(const CausalConv1dArgs& a, cudaStream_t stream) {
  if (a.in_type == ElementType::kF32)
    return a.part_count > 0 ? launch_types<W, float, PartWriter>(a, stream) : launch_types<W, float, float>(a, stream);
  if (a.in_type == ElementType::kBF16) return launch_types<W, __nv_bfloat16, __nv_bfloat16>(a, stream);
  if (a.out_type == ElementType::kS8) return launch_types<W, int8_t, int8_t>(a, stream);
  return launch_types<W, int8_t, __half>(a, stream);
}

bool output_parts_supported(const CausalConv1dArgs& a) {
  if (a.part_count == 0) return a.out != nullptr;
  if (a.part_count < 0) return false;
  if (a.part_count > CausalConv1dArgs::kMaxParts || a.out || a.in_type != ElementType::kF32) return false;
  for (int i = 0; i < a.part_count; ++i) {
    const CausalConv1dOutputPart& p = a.parts[i];
    const int end = i + 1 < a.part_count ? a.parts[i + 1].first_channel : a.channels;
    if (!p.out || (i == 0 && p.first_channel != 0) || end <= p.first_channel || p.stride < end - p.first_channel)
      return false;
    if (p.type != ElementType::kF32 && p.type != ElementType::kF16 && p.type != ElementType::kS8) return false;
    if (p.type == ElementType::kS8 && !a.out_formats) return false;  // the scales are the int8 format codes
  }
  return true;
}

}  // namespace

bool causal_conv1d_supported(const CausalConv1dArgs& a) {
  const bool types = (a.in_type == ElementType::kF32 && a.out_type == ElementType::kF32) ||
                     (a.in_type == ElementType::kBF16 && a.out_type == ElementType::kBF16 && !a.in_formats &&
                      !a.out_formats) ||
                     (a.in_type == ElementType::kS8 && a.in_scales && !a.in_formats && !a.out_formats &&
                      (a.out_type == ElementType::kF16 || (a.out_type == ElementType::kS8 && a.out_scales)));
  const bool tile = a.tile_tokens == 0 || a.tile_tokens == 16 || a.tile_tokens == 32 || a.tile_tokens == kMaxTile;
  return types && tile && a.batch > 0 && a.batch <= 65535 && a.seqlen > 0 && a.channels > 0 && a.width >= 2 &&
         a.width <= 8 && (a.seqlen + 15) / 16 <= 65535 && a.in && a.weight && a.bias && a.state && output_parts_supported(a);
}

cudaError_t launch_causal_conv1d(const CausalConv1dArgs& a, cudaStream_t stream) {
  if (!causal_conv1d_supported(a)) return cudaErrorInvalidValue;
  switch (a.width) {
    case 2: return launch_width<2>(a, stream);
    case 3: return launch_width<3>(a, stream);
    case 4: return launch_width<4>(a, stream);
    case 5: return launch_width<5>(a, stream);
    case 6: return launch_width<6>(a, stream);
    case 7: return launch_width<7>(a, stream);
    case 8: return launch_width<8>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ssdq::kernels
