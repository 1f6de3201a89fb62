#include "kernels/causal_conv1d.h"

#include <type_traits>

#include "kernels/causal_conv1d_step.cuh"
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

// fp32 inputs take their point's format as read (the state then holds formatted values).
template <typename In>
__device__ inline In format_input(In raw, const ChannelFormat& format) {
  if constexpr (std::is_same_v<In, float>) {
    return format.apply(raw);
  } else {
    return raw;
  }
}

// How a thread formats and stores its fp32-input channel, fixed for the whole tile. The
// specialized plans spell the quantized backend's cases without a branch per element (an int8
// conv.in, then the SSDi8 prefill's fp16 x or int8 B|C, or int8-formatted fp32 or fp16); kAny dispatches
// on the channel's codes and part type for every element. Each plan gives the same bits.
enum class Plan { kAny, kInt8ToF16, kInt8ToS8, kInt8ToF32Int8, kInt8ToF16Int8 };

// The output part holding fp32-input channel c (a plain fp32 output is one part).
__device__ inline CausalConv1dOutputPart part_of(const CausalConv1dArgs& a, int c) {
  if (a.part_count == 0) return CausalConv1dOutputPart{a.out, 0, a.channels, ElementType::kF32};
  int i = 0;
  while (i + 1 < a.part_count && c >= a.parts[i + 1].first_channel) ++i;
  return a.parts[i];
}

// The output of one thread's fp32-input channel, in its part. `at` walks the rows: advance()
// moves it to the next token.
struct PartWriter {
  char* at = nullptr;
  int64_t row_bytes = 0;
  ElementType type = ElementType::kF32;

  __device__ PartWriter(const CausalConv1dArgs& a, int c, int b, int t) {
    const CausalConv1dOutputPart part = part_of(a, c);
    type = part.type;
    const int size = type == ElementType::kS8 ? 1 : type == ElementType::kF16 ? 2 : 4;
    row_bytes = part.stride * size;
    at = static_cast<char*>(part.out) + ((static_cast<int64_t>(b) * a.seqlen + t) * part.stride + (c - part.first_channel)) * size;
  }
  __device__ void store(float y, const ChannelFormat& format) const {
    switch (type) {
      case ElementType::kS8: *reinterpret_cast<int8_t*>(at) = quantize_int8_fast(y, format.code, format.inv_code); break;
      case ElementType::kF16: *reinterpret_cast<__half*>(at) = __float2half_rn(format.apply(y)); break;
      default: *reinterpret_cast<float*>(at) = format.apply(y);
    }
  }
  // N consecutive rows, advancing past them; the int8 plans quantize all N with one fallback branch.
  template <Plan kPlan, int N>
  __device__ void store_rows(const float (&y)[N], const ChannelFormat& format) {
    if constexpr (kPlan == Plan::kInt8ToF16) {  // the fp16 format: rounding y once is the same half
#pragma unroll
      for (int i = 0; i < N; ++i, at += row_bytes) *reinterpret_cast<__half*>(at) = __float2half_rn(y[i]);
    } else if constexpr (kPlan == Plan::kInt8ToS8 || kPlan == Plan::kInt8ToF32Int8 || kPlan == Plan::kInt8ToF16Int8) {
      float q[N];
      quantize_int8_to_float(y, format.code, format.inv_code, q);
#pragma unroll
      for (int i = 0; i < N; ++i, at += row_bytes) {
        if constexpr (kPlan == Plan::kInt8ToS8) {
          *reinterpret_cast<int8_t*>(at) = int8_byte(q[i]);
        } else if constexpr (kPlan == Plan::kInt8ToF16Int8) {
          *reinterpret_cast<__half*>(at) = __float2half_rn(dequantize_int8_float(q[i], format.code));
        } else {
          *reinterpret_cast<float*>(at) = dequantize_int8_float(q[i], format.code);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i, advance()) store(y[i], format);
    }
  }
  __device__ void advance() { at += row_bytes; }
};

// The output of an int8 or bf16-input conv: one tensor [batch * seqlen, channels].
template <typename Out>
struct PlainWriter {
  Out* at;
  int64_t stride;
  float scale;
  __device__ PlainWriter(const CausalConv1dArgs& a, int c, int b, int t)
      : at(static_cast<Out*>(a.out) + (static_cast<int64_t>(b) * a.seqlen + t) * a.channels + c),
        stride(a.channels),
        scale(a.out_scales ? a.out_scales[c] : 1.f) {}
  __device__ void store(float y, const ChannelFormat&) const {
    if constexpr (std::is_same_v<Out, int8_t>) {
      *at = quantize_int8(y, scale);
    } else {
      *at = from_float<Out>(y);
    }
  }
  template <Plan kPlan, int N>
  __device__ void store_rows(const float (&y)[N], const ChannelFormat& format) {
#pragma unroll
    for (int i = 0; i < N; ++i, advance()) store(y[i], format);
  }
  __device__ void advance() { at += stride; }
};

template <typename In, Plan kPlan>
__device__ inline In format_input(In raw, const ChannelFormat& format) {
  if constexpr (kPlan == Plan::kAny) {
    return format_input(raw, format);
  } else {
    return fake_quantize_int8_fast(raw, format.code, format.inv_code);
  }
}

// An input as the window and the state hold it (In) from its type in memory (Src): the same, or
// for an int8-coded input of the fp32 path (its codes under conv.in's int8 format) the formatted
// value q·code, which is what formatting the fp32 value gives.
template <typename In, Plan kPlan, typename Src>
__device__ inline In read_input(Src raw, const ChannelFormat& format) {
  if constexpr (std::is_same_v<Src, In>) {
    return format_input<In, kPlan>(raw, format);
  } else {
    static_assert(std::is_same_v<Src, int8_t> && std::is_same_v<In, float>);
    return dequantize_int8_float(static_cast<float>(raw), format.code);
  }
}

// One thread's channel over tokens [t0, t_end), starting from the W-1 inputs before t0 (from the
// input, or from the conv state before t = 0). Src: the input's type in memory; In: the state's.
template <int W, typename Src, typename In, typename Writer, Plan kPlan>
__device__ void conv_channel(const CausalConv1dArgs& a, int c, int b, int t0, int t_end) {
  const Src* in = static_cast<const Src*>(a.in) + static_cast<int64_t>(b) * a.seqlen * a.in_stride + c;
  In* state = static_cast<In*>(a.state) + (static_cast<int64_t>(b) * a.channels + c) * (W - 1);
  const float in_scale = a.in_scales ? a.in_scales[c] : 1.f;
  const ChannelFormat in_format(a.in_formats, c), out_format(a.out_formats, c);
  In raw[W];  // the window's inputs as stored (the state keeps them unchanged)
  float w[W], window[W];
#pragma unroll
  for (int k = 0; k < W; ++k) w[k] = a.weight[c * W + k];
  const float bias = a.bias[c];
  // The W-1 inputs before t = 0: the state's, or, after a replay (CausalConv1dArgs::replay_steps),
  // the last W-1 of the state's followed by the replayed rows.
  // Later tiles read their own rows instead.
  In before[W - 1];
  const int replayed = a.replay_steps && t0 == 0 ? a.replay_steps[b] : 0;
  const Src* rows = replayed > 0 ? static_cast<const Src*>(a.replay_in) +
                                       static_cast<int64_t>(a.replay_rows ? a.replay_rows[b] : b) *
                                           a.replay_steps[a.batch] * a.in_stride +
                                       c
                                 : nullptr;
#pragma unroll
  for (int k = 0; k < W - 1; ++k) {
    const int i = replayed + k;  // position in (state ++ replayed rows)
    before[k] = t0 != 0     ? In{}
                : i < W - 1 ? state[i]
                            : read_input<In, kPlan>(rows[static_cast<int64_t>(i - (W - 1)) * a.in_stride], in_format);
  }
#pragma unroll
  for (int k = 0; k < W - 1; ++k) {
    const int t = t0 - (W - 1) + k;
    raw[k] = t >= 0 ? read_input<In, kPlan>(in[static_cast<int64_t>(t) * a.in_stride], in_format) : before[W - 1 + t];
    window[k] = load_input(raw[k], in_scale);
  }
  Writer out(a, c, b, t0);
  const Src* next_in = in + static_cast<int64_t>(t0) * a.in_stride;
  // The next output from the next (formatted) input.
  auto convolve = [&](In formatted) {
    raw[W - 1] = formatted;
    window[W - 1] = load_input(formatted, in_scale);
    const float y = conv_silu<W>(w, window, bias);
#pragma unroll
    for (int k = 0; k < W - 1; ++k) window[k] = window[k + 1], raw[k] = raw[k + 1];
    return y;
  };
  int t = t0;
  // Prefill: kLoadBatch tokens' inputs are loaded before any of their outputs is stored (the
  // stores would otherwise hold each load behind the previous token's store; 2.7b W8A8 conv of
  // 2,048 tokens 102 → 74 µs, kernels_bench, H100), formatted and stored as a batch.
  for (; t + kLoadBatch <= t_end; t += kLoadBatch) {
    Src next[kLoadBatch];
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u) next[u] = next_in[u * a.in_stride];
    next_in += kLoadBatch * a.in_stride;
    float y[kLoadBatch];
    if constexpr (kPlan == Plan::kAny) {
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) y[u] = convolve(read_input<In, kPlan>(next[u], in_format));
    } else {
      float q[kLoadBatch];
      if constexpr (std::is_same_v<Src, int8_t>) {
#pragma unroll
        for (int u = 0; u < kLoadBatch; ++u) q[u] = static_cast<float>(next[u]);
      } else {
        quantize_int8_to_float(next, in_format.code, in_format.inv_code, q);
      }
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) y[u] = convolve(dequantize_int8_float(q[u], in_format.code));
    }
    out.template store_rows<kPlan>(y, out_format);
  }
  for (; t < t_end; ++t, next_in += a.in_stride) {  // decode steps and a tile's last tokens
    const float y[1] = {convolve(read_input<In, kPlan>(*next_in, in_format))};
    out.template store_rows<kPlan>(y, out_format);
  }
  // The new state: the last W-1 inputs as stored. Only the first tile reads the old state, so its
  // thread writes the new one, once it has read the old (a tile that ends the sequence has them in
  // its window; others load them).
  if (t0 == 0) {
    if (!a.store_final) {
      if (replayed > 0) {
#pragma unroll
        for (int k = 0; k < W - 1; ++k) state[k] = before[k];
      }
    } else if (t_end == a.seqlen) {
#pragma unroll
      for (int k = 0; k < W - 1; ++k) state[k] = raw[k];
    } else {  // seqlen > tile ≥ 16 > W - 1
#pragma unroll
      for (int k = 0; k < W - 1; ++k)
        state[k] = read_input<In, kPlan>(in[static_cast<int64_t>(a.seqlen - (W - 1) + k) * a.in_stride], in_format);
    }
  }
}

// The plan of an fp32-input channel (see Plan).
__device__ inline Plan plan_of(const CausalConv1dArgs& a, int c) {
  if (!a.specialize || !a.in_formats || !a.out_formats || !(a.in_formats[c] > 0.f)) return Plan::kAny;
  const ElementType type = part_of(a, c).type;
  const float out_code = a.out_formats[c];
  if (type == ElementType::kF16 && out_code < 0.f) return Plan::kInt8ToF16;
  if (type == ElementType::kS8 && out_code > 0.f) return Plan::kInt8ToS8;
  if (type == ElementType::kF32 && out_code > 0.f) return Plan::kInt8ToF32Int8;
  if (type == ElementType::kF16 && out_code > 0.f) return Plan::kInt8ToF16Int8;
  return Plan::kAny;
}

// Each thread runs one channel over a tile of `tile` tokens. The fp32 path (fp32 output, from fp32
// or int8-coded inputs, an fp32 state) writes through PartWriter (parts, or the one fp32 output),
// the others through PlainWriter<Out> with the state in the input's type.
template <int W, typename Src, typename Out>
__global__ void __launch_bounds__(kChannels)
    causal_conv1d_kernel(CausalConv1dArgs a, int tile) {
  wait_for_previous_grid();
  allow_next_grid();
  const int c = blockIdx.x * kChannels + threadIdx.x;
  const int t0 = blockIdx.y * tile, b = blockIdx.z;
  if (c >= a.channels) return;
  const int t_end = min(t0 + tile, a.seqlen);
  if constexpr (std::is_same_v<Out, float>) {
    using In = float;
    switch (plan_of(a, c)) {
      case Plan::kInt8ToF16: return conv_channel<W, Src, In, PartWriter, Plan::kInt8ToF16>(a, c, b, t0, t_end);
      case Plan::kInt8ToS8: return conv_channel<W, Src, In, PartWriter, Plan::kInt8ToS8>(a, c, b, t0, t_end);
      case Plan::kInt8ToF32Int8:
        return conv_channel<W, Src, In, PartWriter, Plan::kInt8ToF32Int8>(a, c, b, t0, t_end);
      case Plan::kInt8ToF16Int8:
        return conv_channel<W, Src, In, PartWriter, Plan::kInt8ToF16Int8>(a, c, b, t0, t_end);
      default: return conv_channel<W, Src, In, PartWriter, Plan::kAny>(a, c, b, t0, t_end);
    }
  } else {
    conv_channel<W, Src, Src, PlainWriter<Out>, Plan::kAny>(a, c, b, t0, t_end);
  }
}

// Tokens per thread: the largest tile (fewest window re-reads) that still gives 16 blocks an SM
// (2.7b SSDi8 conv of 2,048 tokens on an H100: 2,688 blocks of 32 tokens 38.5 µs, 1,344 of 64
// 42.5 µs, 5,376 of 16 41.7 µs; docs/kernels/elementwise.md).
int tile_tokens(const CausalConv1dArgs& a) {
  if (a.tile_tokens) return a.tile_tokens;
  const int64_t target = 2 * 8 * int64_t(current_device_attribute(cudaDevAttrMultiProcessorCount));
  int tile = kMaxTile;
  while (tile > 16 && int64_t((a.channels + kChannels - 1) / kChannels) * ((a.seqlen + tile - 1) / tile) * a.batch < target)
    tile /= 2;
  return tile;
}

template <int W, typename Src, typename Out>
cudaError_t launch_types(const CausalConv1dArgs& a, cudaStream_t stream) {
  const int tile = tile_tokens(a), tiles = (a.seqlen + tile - 1) / tile;
  const dim3 grid((a.channels + kChannels - 1) / kChannels, tiles, a.batch);
  return launch_kernel(causal_conv1d_kernel<W, Src, Out>, LaunchShape{grid, dim3(kChannels)}, stream, a, tile);
}

template <int W>
cudaError_t launch_width(const CausalConv1dArgs& a, cudaStream_t stream) {
  if (a.in_type == ElementType::kF32) return launch_types<W, float, float>(a, stream);
  if (a.in_type == ElementType::kS8 && a.out_type == ElementType::kF32) return launch_types<W, int8_t, float>(a, stream);
  if (a.in_type == ElementType::kBF16) return launch_types<W, __nv_bfloat16, __nv_bfloat16>(a, stream);
  if (a.out_type == ElementType::kS8) return launch_types<W, int8_t, int8_t>(a, stream);
  return launch_types<W, int8_t, __half>(a, stream);
}

bool output_parts_supported(const CausalConv1dArgs& a) {
  if (a.part_count == 0) return a.out != nullptr;
  if (a.part_count < 0) return false;
  if (a.part_count > CausalConv1dArgs::kMaxParts || a.out || a.out_type != ElementType::kF32) return false;
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
                     (a.in_type == ElementType::kS8 && a.out_type == ElementType::kF32 && a.in_formats && !a.in_scales) ||
                     (a.in_type == ElementType::kBF16 && a.out_type == ElementType::kBF16 && !a.in_formats &&
                      !a.out_formats) ||
                     (a.in_type == ElementType::kS8 && a.in_scales && !a.in_formats && !a.out_formats &&
                      (a.out_type == ElementType::kF16 || (a.out_type == ElementType::kS8 && a.out_scales)));
  const bool tile = a.tile_tokens == 0 || a.tile_tokens == 16 || a.tile_tokens == 32 || a.tile_tokens == kMaxTile;
  const bool replay = (!a.replay_steps || (a.replay_in && a.seqlen <= 16)) && (a.store_final || a.seqlen <= 16);
  return types && tile && replay && a.batch > 0 && a.batch <= 65535 && a.seqlen > 0 && a.channels > 0 && a.width >= 2 &&
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
