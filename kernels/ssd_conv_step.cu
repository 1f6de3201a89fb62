#include "kernels/ssd_conv_step.h"

#include "kernels/causal_conv1d_step.cuh"
#include "kernels/ssd_state_update.cuh"

namespace ssdq::kernels {
namespace {

constexpr int kWidth = 4;

// Block (head, sequence, slice of rows) of the state update's grid. Thread t convolves B|C channels
// t, t + 256, … of the head's group into shared memory; each warp convolves the x channel of the
// row it is on, spread over its first lanes. A thread issues all of its loads (its first SSM state
// row, its conv inputs, dt) before it uses any, and those the previous grid does not write (the SSM
// and conv states, the constants) before it waits for that grid. Five blocks an SM where dstate ≤
// 128 (48 registers, a few bytes spilled): then a 2.7b decode step's 640 blocks fit the GPU at
// once, where 57–60 registers left four an SM and a second wave (the first version: TPOT 2.42 →
// 2.74 ms).
template <typename S, int kPerLane>
__global__ void __launch_bounds__(kStateUpdateWarps * 32, kPerLane <= 4 ? 5 : 1)
    ssd_conv_step_kernel(SsdConvStepArgs a) {
  constexpr int kDstate = 32 * kPerLane, kThreads = kStateUpdateWarps * 32;
  constexpr int kBcPerThread = (2 * kDstate + kThreads - 1) / kThreads;
  const SsdStateUpdateArgs& s = a.step;
  const StateSlice slice(s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b_first = s.heads * s.headdim + slice.group * kDstate;  // the group's B channels, then its C channels
  const int c_first = s.heads * s.headdim + (s.groups + slice.group) * kDstate;
  __shared__ float bc_conv[2 * kDstate];
  __shared__ bool last_of_group;
  const HeadConstants head(s, slice.head);
  StateRow<S, kPerLane> row;
  ConvStepLanes<kWidth> x_channel;
  ConvStepChannel<kWidth> bc[kBcPerThread];
  int p = slice.row_begin + warp;
  // What the previous grid does not write — the warp's first SSM state row, the conv states and
  // constants — is loaded before waiting for it, and the warp's later state rows are fetched into L2.
  if (p < slice.row_end) {
    row.load(s, slice, p, lane);
    x_channel.load_state(a.conv, slice.head * s.headdim + p, slice.seq, lane);
    prefetch_later_state_rows<S>(s, slice, p, lane);
  }
#pragma unroll
  for (int j = 0; j < kBcPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i < 2 * kDstate) bc[j].load_state(a.conv, i < kDstate ? b_first + i : c_first + i - kDstate, slice.seq);
  }
  wait_for_previous_grid();
  allow_next_grid();
  if (p < slice.row_end) x_channel.load_input(a.conv, slice.head * s.headdim + p, slice.seq, lane);
#pragma unroll
  for (int j = 0; j < kBcPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i < 2 * kDstate) bc[j].load_input(a.conv, i < kDstate ? b_first + i : c_first + i - kDstate, slice.seq);
  }
  const float* dt_raw = static_cast<const float*>(s.dt) + static_cast<int64_t>(slice.seq) * s.dt_stride;
  const float dt = head.dt(s, dt_raw[slice.head]);
#pragma unroll
  for (int j = 0; j < kBcPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i < 2 * kDstate) bc_conv[i] = bc[j].output();
  }
  __syncthreads();
  // Every block of the group has read the group's B|C conv state (its values are in bc_conv) once it
  // counts itself in, so the last to do so can advance that state.
  if (threadIdx.x == 0)
    last_of_group = atomicAdd(&a.arrivals[slice.seq * s.groups + slice.group], 1) ==
                    static_cast<int>(gridDim.z) * (s.heads / s.groups) - 1;

  float* y = static_cast<float*>(s.y) + static_cast<int64_t>(slice.seq) * s.y_stride + slice.head * s.headdim;
  for (; p < slice.row_end; p += kStateUpdateWarps) {
    if (p != slice.row_begin + warp) {
      row.load(s, slice, p, lane);
      x_channel.load_state(a.conv, slice.head * s.headdim + p, slice.seq, lane);
      x_channel.load_input(a.conv, slice.head * s.headdim + p, slice.seq, lane);
    }
    const float x = x_channel.output(lane);
    x_channel.store_state(lane);  // the row's x channel belongs to this block alone
    row.dequantize();
    const float out = row.advance(head, dt, x, [&](int i) { return bc_conv[lane + 32 * i]; },
                                  [&](int i) { return bc_conv[kDstate + lane + 32 * i]; });
    if (lane == 0) y[p] = out;
    row.store(s, lane);
  }

  __syncthreads();
  if (last_of_group) {
#pragma unroll
    for (int j = 0; j < kBcPerThread; ++j)
      if (threadIdx.x + j * kThreads < 2 * kDstate) bc[j].store_state();
    if (threadIdx.x == 0) a.arrivals[slice.seq * s.groups + slice.group] = 0;
  }
}

template <void (*kKernel)(SsdConvStepArgs)>
cudaError_t launch_one_wave(const SsdConvStepArgs& a, cudaStream_t stream) {
  int per_sm = 0;
  const int threads = kStateUpdateWarps * 32;
  if (const cudaError_t status = resident_blocks_per_sm<kKernel>(threads, 0, &per_sm); status != cudaSuccess)
    return status;
  return launch_kernel(kKernel, LaunchShape{state_update_grid(a.step, per_sm), dim3(threads)}, stream, a);
}

template <typename S>
cudaError_t launch_state_type(const SsdConvStepArgs& a, cudaStream_t stream) {
  switch (a.step.dstate) {
    case 64: return launch_one_wave<ssd_conv_step_kernel<S, 2>>(a, stream);
    case 128: return launch_one_wave<ssd_conv_step_kernel<S, 4>>(a, stream);
    case 256: return launch_one_wave<ssd_conv_step_kernel<S, 8>>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

bool ssd_conv_step_supported(const SsdConvStepArgs& a) {
  const CausalConv1dArgs& c = a.conv;
  const SsdStateUpdateArgs& s = a.step;
  SsdStateUpdateArgs with_inputs = s;  // the state update's own checks, x|B|C aside
  with_inputs.x = with_inputs.B = with_inputs.C = c.in;
  return ssd_state_update_supported(with_inputs) && s.steps == 1 && s.io_type == ElementType::kF32 &&
         (s.dstate == 64 || s.dstate == 128 || s.dstate == 256) && a.arrivals &&
         c.seqlen == 1 && c.width == kWidth && c.batch == s.batch && c.in_type == ElementType::kF32 &&
         c.out_type == ElementType::kF32 && !c.in_scales && c.in && c.in_stride >= c.channels && c.weight && c.bias &&
         c.state && static_cast<int64_t>(c.channels) == int64_t(s.heads) * s.headdim + 2 * int64_t(s.groups) * s.dstate;
}

cudaError_t launch_ssd_conv_step(const SsdConvStepArgs& a, cudaStream_t stream) {
  if (!ssd_conv_step_supported(a)) return cudaErrorInvalidValue;
  return a.step.state_type == ElementType::kS8 ? launch_state_type<int8_t>(a, stream)
                                               : launch_state_type<float>(a, stream);
}

}  // namespace ssdq::kernels
