#include "kernels/ssd_state_update.h"

#include <algorithm>
#include <type_traits>

#include "kernels/programmatic_launch.cuh"
#include "kernels/quant_epilogue.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxPerLane = 8;  // dstate up to 256

// One block per (head, sequence, slice of headdim rows); a warp owns rows and keeps each row's
// dstate values in registers (dstate/32 per lane) across all `steps` tokens; y is a warp
// reduction. Small batches split each head's rows over several blocks to fill the GPU.
template <typename T, typename S, int kPerLane>
__global__ void __launch_bounds__(kWarps * 32) ssd_state_update_kernel(SsdStateUpdateArgs a) {
  const int head = blockIdx.x, seq = blockIdx.y;
  const int rows_per_block = (a.headdim + gridDim.z - 1) / gridDim.z;
  const int row_begin = blockIdx.z * rows_per_block, row_end = min(a.headdim, row_begin + rows_per_block);
  const int group = head / (a.heads / a.groups);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* x_base = static_cast<const T*>(a.x) + head * a.headdim;
  const T* b_base = static_cast<const T*>(a.B) + group * a.dstate;
  const T* c_base = static_cast<const T*>(a.C) + group * a.dstate;
  const T* dt_base = static_cast<const T*>(a.dt) + head;
  T* y_base = static_cast<T*>(a.y) + head * a.headdim;
  const float A = a.A[head], skip = a.D[head];
  const float bias = a.dt_bias ? a.dt_bias[head] : 0.f;
  wait_for_previous_grid();
  allow_next_grid();
  S* state = static_cast<S*>(a.state) + (static_cast<int64_t>(seq) * a.heads + head) * a.headdim * a.dstate;
  for (int p = row_begin + warp; p < row_end; p += kWarps) {
    S* row = state + static_cast<int64_t>(p) * a.dstate;
    float s[kPerLane], scale[kPerLane];
    if constexpr (std::is_same_v<S, int8_t>) {
      // One scale row per channel: read once, and once per element only when it varies along n.
      const int channel = head * a.headdim + p;
      const float* scales = a.state_scales + static_cast<int64_t>(a.state_scale_index ? a.state_scale_index[channel]
                                                                                      : channel) *
                                                 a.state_scale_inner;
      const float channel_scale = scales[0];
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        scale[i] = a.state_scale_inner == 1 ? channel_scale : scales[lane + 32 * i];
        s[i] = __fmul_rn(static_cast<float>(row[lane + 32 * i]), scale[i]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) s[i] = row[lane + 32 * i];
    }
    for (int j = 0; j < a.steps; ++j) {
      const int64_t token = static_cast<int64_t>(seq) * a.steps + j;
      float dt = to_float(dt_base[token * a.dt_stride]);
      if (a.dt_format != 0.f) dt = apply_format_code(dt, a.dt_format);
      if (a.dt_bias) dt = fminf(fmaxf(softplus(dt + bias), a.dt_min), a.dt_max);
      const float decay = __expf(dt * A);
      const float xp = to_float(x_base[token * a.x_stride + p]);
      const float dtx = dt * xp;
      const T* b = b_base + token * a.bc_stride;
      const T* c = c_base + token * a.bc_stride;
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        s[i] = decay * s[i] + dtx * to_float(b[lane + 32 * i]);
        acc += s[i] * to_float(c[lane + 32 * i]);
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
      if (lane == 0) y_base[token * a.y_stride + p] = from_float<T>(acc + skip * xp);
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if constexpr (std::is_same_v<S, int8_t>) {
        row[lane + 32 * i] = quantize_int8(s[i], scale[i]);
      } else {
        row[lane + 32 * i] = s[i];
      }
    }
  }
}

template <typename T, typename S>
cudaError_t launch_typed(const SsdStateUpdateArgs& a, cudaStream_t stream) {
  // Small batches split each head's rows over several blocks, up to one row a warp, while the
  // blocks fit the GPU at once (8 of 256 threads an SM): the per-row chain of dependent loads,
  // not bandwidth, is what a decode step waits for.
  const int blocks = a.heads * a.batch, resident = 8 * std::max(1, current_device_attribute(cudaDevAttrMultiProcessorCount));
  const int splits = std::max(1, std::min(resident / blocks, a.headdim / kWarps));
  const dim3 grid(a.heads, a.batch, splits), block(kWarps * 32);
  switch (a.dstate / 32) {
    case 1: return launch_kernel(ssd_state_update_kernel<T, S, 1>, LaunchShape{grid, block}, stream, a);
    case 2: return launch_kernel(ssd_state_update_kernel<T, S, 2>, LaunchShape{grid, block}, stream, a);
    case 3: return launch_kernel(ssd_state_update_kernel<T, S, 3>, LaunchShape{grid, block}, stream, a);
    case 4: return launch_kernel(ssd_state_update_kernel<T, S, 4>, LaunchShape{grid, block}, stream, a);
    case 5: return launch_kernel(ssd_state_update_kernel<T, S, 5>, LaunchShape{grid, block}, stream, a);
    case 6: return launch_kernel(ssd_state_update_kernel<T, S, 6>, LaunchShape{grid, block}, stream, a);
    case 7: return launch_kernel(ssd_state_update_kernel<T, S, 7>, LaunchShape{grid, block}, stream, a);
    case 8: return launch_kernel(ssd_state_update_kernel<T, S, 8>, LaunchShape{grid, block}, stream, a);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool ssd_state_update_supported(const SsdStateUpdateArgs& a) {
  return a.batch > 0 && a.batch <= 65535 && a.heads > 0 && a.groups > 0 && a.heads % a.groups == 0 &&
         a.headdim > 0 && a.dstate > 0 && a.dstate % 32 == 0 && a.dstate / 32 <= kMaxPerLane && a.steps >= 1 &&
         a.x && a.B && a.C && a.dt && a.A && a.D && a.state && a.y &&
         (a.state_type == ElementType::kF32 ||
          (a.state_type == ElementType::kS8 && a.state_scales &&
           (a.state_scale_inner == 1 || a.state_scale_inner == a.dstate)));
}

cudaError_t launch_ssd_state_update(const SsdStateUpdateArgs& a, cudaStream_t stream) {
  if (!ssd_state_update_supported(a)) return cudaErrorInvalidValue;
  if (a.state_type == ElementType::kS8)
    return a.io_type == ElementType::kBF16 ? launch_typed<__nv_bfloat16, int8_t>(a, stream)
                                           : launch_typed<float, int8_t>(a, stream);
  return a.io_type == ElementType::kBF16 ? launch_typed<__nv_bfloat16, float>(a, stream)
                                         : launch_typed<float, float>(a, stream);
}

}  // namespace ssdq::kernels
