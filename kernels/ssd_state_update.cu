#include "kernels/ssd_state_update.h"

#include "kernels/ssd_state_update.cuh"

namespace ssdq::kernels {
namespace {

// One block per (head, sequence, slice of headdim rows) (state_update_grid); a warp owns rows and
// keeps each row's dstate values in registers (dstate/32 per lane) across all `steps` tokens; y is
// a warp reduction. kBeforeWait: the warp's first state row is loaded, and its later rows fetched
// into L2, before waiting for the previous grid (the state is not its output) — for grids sized to
// fit the GPU at once, where the step waits on latency. A grid of many waves (batch 32, 128) is
// bandwidth-bound, and the early row's registers (48 → 54 at an int8 state, dstate 128) cost it a
// block an SM: 2.7b W8A8 TPOT at batch 128 21.65 → 25.70 ms with it.
template <typename T, typename S, int kPerLane, bool kBeforeWait>
__global__ void __launch_bounds__(kStateUpdateWarps * 32) ssd_state_update_kernel(SsdStateUpdateArgs a) {
  const StateSlice slice(a);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* x_base = static_cast<const T*>(a.x) + slice.head * a.headdim;
  const T* b_base = static_cast<const T*>(a.B) + slice.group * a.dstate;
  const T* c_base = static_cast<const T*>(a.C) + slice.group * a.dstate;
  const T* dt_base = static_cast<const T*>(a.dt) + slice.head;
  T* y_base = static_cast<T*>(a.y) + slice.head * a.headdim;
  const HeadConstants head(a, slice.head);
  const int first = slice.row_begin + warp;
  StateRow<S, kPerLane> row;
  if (kBeforeWait && first < slice.row_end) {
    row.load(a, slice, first, lane);
    prefetch_later_state_rows<S>(a, slice, first, lane);
  }
  wait_for_previous_grid();
  allow_next_grid();
  for (int p = first; p < slice.row_end; p += kStateUpdateWarps) {
    if (!kBeforeWait || p != first) row.load(a, slice, p, lane);
    row.dequantize();
    for (int j = 0; j < a.steps; ++j) {
      const int64_t token = static_cast<int64_t>(slice.seq) * a.steps + j;
      const float dt = head.dt(a, to_float(dt_base[token * a.dt_stride]));
      const float xp = to_float(x_base[token * a.x_stride + p]);
      const T* b = b_base + token * a.bc_stride;
      const T* c = c_base + token * a.bc_stride;
      const float y = row.advance(head, dt, xp, [&](int i) { return to_float(b[lane + 32 * i]); },
                                  [&](int i) { return to_float(c[lane + 32 * i]); });
      if (lane == 0) y_base[token * a.y_stride + p] = from_float<T>(y);
    }
    row.store(lane);
  }
}

template <typename T, typename S, bool kBeforeWait>
cudaError_t launch_state_update(const SsdStateUpdateArgs& a, const LaunchShape& shape, cudaStream_t stream) {
  switch (a.dstate / 32) {
    case 1: return launch_kernel(ssd_state_update_kernel<T, S, 1, kBeforeWait>, shape, stream, a);
    case 2: return launch_kernel(ssd_state_update_kernel<T, S, 2, kBeforeWait>, shape, stream, a);
    case 3: return launch_kernel(ssd_state_update_kernel<T, S, 3, kBeforeWait>, shape, stream, a);
    case 4: return launch_kernel(ssd_state_update_kernel<T, S, 4, kBeforeWait>, shape, stream, a);
    case 5: return launch_kernel(ssd_state_update_kernel<T, S, 5, kBeforeWait>, shape, stream, a);
    case 6: return launch_kernel(ssd_state_update_kernel<T, S, 6, kBeforeWait>, shape, stream, a);
    case 7: return launch_kernel(ssd_state_update_kernel<T, S, 7, kBeforeWait>, shape, stream, a);
    case 8: return launch_kernel(ssd_state_update_kernel<T, S, 8, kBeforeWait>, shape, stream, a);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T, typename S>
cudaError_t launch_typed(const SsdStateUpdateArgs& a, cudaStream_t stream) {
  // 8 blocks an SM, the most that 256 threads allow (the kernel has 38–64 registers, which allow
  // 4–6: then some of the blocks of a decode step run in a second wave).
  const LaunchShape shape{state_update_grid(a, 8), dim3(kStateUpdateWarps * 32)};
  // The early loads for the grids sized to fit the GPU at once (small batches; state_update_grid),
  // not for the many waves of a large batch.
  const int64_t blocks = int64_t(shape.grid.x) * shape.grid.y * shape.grid.z;
  const bool fits = blocks <= 8 * int64_t(current_device_attribute(cudaDevAttrMultiProcessorCount));
  return fits ? launch_state_update<T, S, true>(a, shape, stream) : launch_state_update<T, S, false>(a, shape, stream);
}

}  // namespace

bool ssd_state_update_supported(const SsdStateUpdateArgs& a) {
  return a.batch > 0 && a.batch <= 65535 && a.heads > 0 && a.groups > 0 && a.heads % a.groups == 0 &&
         a.headdim > 0 && a.dstate > 0 && a.dstate % 32 == 0 && a.dstate / 32 <= kStateUpdateMaxPerLane && a.steps >= 1 &&
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
