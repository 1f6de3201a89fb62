// Device helpers of the quantized kernels, each the GPU spelling of one CPU definition:
// - quantize_int8: model/quantizer.h quantize_value at int8 (IEEE division, ties to even,
//   saturation to ±127, NaN → 0); fake_quantize_int8 / round_to_fp16 / apply_format_code: an
//   activation point's format on one value (the _fast / by_reciprocal forms: the same bits with a
//   multiply where it cannot differ);
// - int8x4_to_float: four int8 bytes to exact floats without I2F (the GEMVs' weights, SSDi8's CBq);
// - int4x8_to_int8: a packed int4 word to two int8x4 words (the int4 weight unpack, the grouped GEMM);
// - store_projection (one column) / store_projection_vector (2 or 4 in one access): the float
//   epilogue of an integer projection, shared by the int8 GEMM's scaling kernel, the grouped GEMM
//   and the quantized GEMV: y (already scaled) + bias[col], stored as out_type or added into fp32
//   out, with explicitly rounded operations so the compiler cannot fuse them differently from the CPU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace ssdq::kernels {

// A per-channel int32 accumulator scaled as runtime/quantized_ops.h linear_forward does it:
// fma(float(acc), s_w, 0) (the one-group chain), then · s_x.
__device__ inline float scale_per_channel(int32_t acc, float w_scale, float x_scale) {
  return __fmul_rn(__fmaf_rn(static_cast<float>(acc), w_scale, 0.f), x_scale);
}

__device__ inline int8_t quantize_int8(float value, float scale) {
  const float r = rintf(__fdiv_rn(value, scale));
  return r != r ? 0 : static_cast<int8_t>(fminf(fmaxf(r, -127.f), 127.f));
}

// quantize_int8 bit for bit, with a multiply by inv_scale = __frcp_rn(scale) instead of the
// division where that cannot change the result: r = value·inv_scale is within 3·2⁻²⁴·|value/scale|
// (2.3e-5 below 129) of the rounded quotient, so both round to the same integer unless a
// half-integer lies within 1e-3 of r, i.e. r is more than 0.499 from its nearest integer (r − rint(r)
// is exact). Returns false for those, |r| ≥ 129, NaN and infinities: the caller then takes
// quantize_int8 (batching the rare fallbacks keeps the fast path branch-free). q is the integer as
// a float (−0 where r rounds to zero from below), with no conversion instruction.
__device__ inline bool quantize_int8_by_reciprocal(float value, float inv_scale, float* q) {
  const float r = __fmul_rn(value, inv_scale), nearest = rintf(r);
  *q = fminf(fmaxf(nearest, -127.f), 127.f);
  return fabsf(r) < 129.f && fabsf(__fsub_rn(r, nearest)) < 0.499f;
}
__device__ inline bool quantize_int8_by_reciprocal(float value, float inv_scale, int* q) {
  float f;
  const bool exact = quantize_int8_by_reciprocal(value, inv_scale, &f);
  *q = static_cast<int>(f);
  return exact;
}

// quantize_int8's q as a float, with the fallback inline (for kernels that store it right away).
__device__ inline float quantize_int8_to_float(float value, float scale, float inv_scale) {
  float q;
  if (!quantize_int8_by_reciprocal(value, inv_scale, &q)) q = static_cast<float>(quantize_int8(value, scale));
  return q;
}

// 1.5·2²³ and its bits: for |x| < 2²², x + kIntegerBias rounds x to the nearest integer (ties to
// even) and holds it in the low mantissa bits, two's complement below zero — rint and float ↔ int
// as adds instead of conversion instructions.
constexpr float kIntegerBias = 12582912.f;
constexpr int32_t kIntegerBiasBits = 0x4B400000;

// The byte of an integer-valued float in [−127, 127] (an add instead of a float-to-int conversion).
__device__ inline int8_t int8_byte(float q) {
  return static_cast<int8_t>(__float_as_int(__fadd_rn(q, kIntegerBias)));
}
// rint(x) as an int, for |x| < 2²².
__device__ inline int small_float_to_int(float x) { return __float_as_int(__fadd_rn(x, kIntegerBias)) - kIntegerBiasBits; }
// quantize_int8 of N values as kIntegerBias + q: rint by that add, with no conversion instruction. By the reciprocal as
// quantize_int8_by_reciprocal, with |r| < 127.49 so that no clamp is needed; when any value fails a
// test, all N take quantize_int8 (one branch: a predicate AND a value instead of a mask).
template <int N>
__device__ inline void quantize_int8_biased(const float (&value)[N], float scale, float inv_scale, float (&biased)[N]) {
  bool fast = true;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float r = __fmul_rn(value[i], inv_scale);
    biased[i] = __fadd_rn(r, kIntegerBias);
    const float nearest = __fsub_rn(biased[i], kIntegerBias);
    fast = fast & (fabsf(r) < 127.49f) & (fabsf(__fsub_rn(r, nearest)) < 0.499f);
  }
  if (!fast) {
#pragma unroll
    for (int i = 0; i < N; ++i) biased[i] = __fadd_rn(static_cast<float>(quantize_int8(value[i], scale)), kIntegerBias);
  }
}

// quantize_int8's q of N values as floats (+0 for a zero).
template <int N>
__device__ inline void quantize_int8_to_float(const float (&value)[N], float scale, float inv_scale, float (&q)[N]) {
  quantize_int8_biased(value, scale, inv_scale, q);
#pragma unroll
  for (int i = 0; i < N; ++i) q[i] = __fsub_rn(q[i], kIntegerBias);
}

// The int8 bytes of N values held as kIntegerBias + q (N a multiple of 4) in N/4 words, value 4i + k
// in byte k of word i.
template <int N>
__device__ inline void pack_biased_int8_words(const float (&biased)[N], uint32_t (&word)[N / 4]) {
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    const uint32_t lo = __byte_perm(__float_as_uint(biased[4 * i]), __float_as_uint(biased[4 * i + 1]), 0x0040);
    const uint32_t hi = __byte_perm(__float_as_uint(biased[4 * i + 2]), __float_as_uint(biased[4 * i + 3]), 0x0040);
    word[i] = __byte_perm(lo, hi, 0x5410);
  }
}

// quantize_int8 of N values (N a multiple of 4) as the bytes of N/4 words, value 4i + k in byte k of
// word i.
template <int N>
__device__ inline void quantize_int8_words(const float (&value)[N], float scale, float inv_scale, uint32_t (&word)[N / 4]) {
  float biased[N];
  quantize_int8_biased(value, scale, inv_scale, biased);
  pack_biased_int8_words(biased, word);
}

// An int32 v with |v| ≤ 2²² (e.g. a sum of at most 256 int8 × int8 products: 128²·256 = 2²²) as a
// float without I2F: v added to kIntegerBiasBits is the float kIntegerBias + v (at +2²² the carry
// into the exponent gives 2²⁴, still that sum); the subtraction is exact.
__device__ inline float small_int_to_float(int v) { return __int_as_float(v + kIntegerBiasBits) - kIntegerBias; }

// The four signed bytes of a word as exact floats without I2F (a conversion unit at 1/8 of the FMA
// rate; W4A16's one-row in_proj 12.8 → 12.1 µs): byte b becomes the float 2^23 + (b + 128) by
// placing b ^ 0x80 under the exponent of 2^23, then 2^23 + 128 is subtracted.
__device__ inline void int8x4_to_float(uint32_t word, float (&out)[4]) {
  const uint32_t biased = word ^ 0x80808080u;
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7650 + i)) - 8388736.f;
}

// Offset nibbles to int8: the eight int4 values of a packed word (k 2i in the low nibble of byte i,
// k 2i + 1 in the high one) as two int8x4 words, k 0..3 and k 4..7. n ^ 8 is n + 8 ∈ [0, 15] for a
// two's-complement nibble; + 0x78 ^ 0x80 then gives n back in each byte (no carry leaves a byte).
__device__ inline void int4x8_to_int8(uint32_t word, uint32_t& low_k, uint32_t& high_k) {
  const uint32_t low = word & 0x0F0F0F0Fu, high = (word >> 4) & 0x0F0F0F0Fu;
  low_k = ((__byte_perm(low, high, 0x5140) ^ 0x08080808u) + 0x78787878u) ^ 0x80808080u;
  high_k = ((__byte_perm(low, high, 0x7362) ^ 0x08080808u) + 0x78787878u) ^ 0x80808080u;
}

// An activation point's format applied to one fp32 value (runtime/quantized_ops.h
// apply_activation_format): fp16 rounding, or int8 fake quantization q·s.
__device__ inline float fake_quantize_int8(float value, float scale) {
  return __fmul_rn(static_cast<float>(quantize_int8(value, scale)), scale);
}
__device__ inline float round_to_fp16(float value) { return __half2float(__float2half_rn(value)); }

// The same with the format coded as one float per channel, for kernels that take a point's
// formats channel by channel: code > 0 int8 with scale `code`, code < 0 fp16, 0 as is.
__device__ inline float apply_format_code(float value, float code) {
  return code > 0.f ? fake_quantize_int8(value, code) : code < 0.f ? round_to_fp16(value) : value;
}

// quantize_int8 bit for bit, dividing only where the reciprocal could differ (inv_scale =
// __frcp_rn(scale)); for kernels that quantize many values with one scale.
__device__ inline int8_t quantize_int8_fast(float value, float scale, float inv_scale) {
  return int8_byte(quantize_int8_to_float(value, scale, inv_scale));
}

// q·scale for an integer-valued float q (quantize_int8_to_float's): + 0 turns a −0 q into the +0
// that float(int8) gives, so the product has dequantize's bits.
__device__ inline float dequantize_int8_float(float q, float scale) { return __fmul_rn(__fadd_rn(q, 0.f), scale); }

// fake_quantize_int8 bit for bit with the reciprocal (inv_scale = __frcp_rn(scale)).
__device__ inline float fake_quantize_int8_fast(float value, float scale, float inv_scale) {
  return dequantize_int8_float(quantize_int8_to_float(value, scale, inv_scale), scale);
}

// apply_format_code bit for bit with the reciprocal (inv_code = __frcp_rn(code) when code > 0).
__device__ inline float apply_format_code_fast(float value, float code, float inv_code) {
  if (code > 0.f) return fake_quantize_int8_fast(value, code, inv_code);
  return code < 0.f ? round_to_fp16(value) : value;
}

// The float epilogue of an integer projection for N (1, 2 or 4) consecutive columns col..: bias,
// then the output type, or the fp32 residual add; with N > 1 one vector access each way, the same
// operations per element (`at` and col multiples of N; out and bias aligned to N elements).
template <int N, typename T>
struct alignas(N * sizeof(T)) ProjectionVector {
  T v[N];
};
template <int N>
__device__ inline void store_projection_vector(void* out, ElementType out_type, int64_t at, float (&y)[N],
                                               const float* bias, int64_t col, bool accumulate) {
  static_assert(N == 1 || N == 2 || N == 4, "one, two or four columns");
  if (bias) {
    const ProjectionVector<N, float> b = *reinterpret_cast<const ProjectionVector<N, float>*>(bias + col);
#pragma unroll
    for (int e = 0; e < N; ++e) y[e] = __fadd_rn(y[e], b.v[e]);
  }
  switch (out_type) {
    case ElementType::kBF16: {
      ProjectionVector<N, __nv_bfloat16> o;
#pragma unroll
      for (int e = 0; e < N; ++e) o.v[e] = __float2bfloat16_rn(y[e]);
      *reinterpret_cast<ProjectionVector<N, __nv_bfloat16>*>(static_cast<__nv_bfloat16*>(out) + at) = o;
      break;
    }
    case ElementType::kF16: {
      ProjectionVector<N, __half> o;
#pragma unroll
      for (int e = 0; e < N; ++e) o.v[e] = __float2half_rn(y[e]);
      *reinterpret_cast<ProjectionVector<N, __half>*>(static_cast<__half*>(out) + at) = o;
      break;
    }
    default: {
      auto* o = reinterpret_cast<ProjectionVector<N, float>*>(static_cast<float*>(out) + at);
      ProjectionVector<N, float> v;
      if (accumulate) {
        v = *o;
#pragma unroll
        for (int e = 0; e < N; ++e) v.v[e] = __fadd_rn(v.v[e], y[e]);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) v.v[e] = y[e];
      }
      *o = v;
    }
  }
}

__device__ inline void store_projection(void* out, ElementType out_type, int64_t at, float y, const float* bias,
                                        int64_t col, bool accumulate) {
  float one[1] = {y};
  store_projection_vector<1>(out, out_type, at, one, bias, col, accumulate);
}

}  // namespace ssdq::kernels
