#include "kernels/conv_state_replay.h"

#include <type_traits>

#include "kernels/causal_conv1d_step.cuh"
#include "kernels/element_type.h"

namespace ssdq::kernels {
namespace {

constexpr int kThreads = 128;  // one channel of one sequence a thread
constexpr int kMaxWidth = 8;

template <typename T>
__global__ void __launch_bounds__(kThreads) conv_state_replay_kernel(ConvStateReplayArgs a) {
  const int c = blockIdx.x * kThreads + threadIdx.x, b = blockIdx.y;
  if (c >= a.channels) return;
  const int n = a.seq_steps[b];
  if (n <= 0) return;
  const int keep = a.width - 1;
  T* state = static_cast<T*>(a.state) + (static_cast<int64_t>(b) * a.channels + c) * keep;
  const T* in = static_cast<const T*>(a.in) + static_cast<int64_t>(b) * a.steps * a.in_stride + c;
  T next[kMaxWidth - 1];
  // Position n + k of (state ++ inputs): still in the old state while n + k < keep.
  for (int k = 0; k < keep; ++k) {
    const int i = n + k;
    if (i < keep) {
      next[k] = state[i];
    } else if constexpr (std::is_same_v<T, float>) {
      next[k] = ChannelFormat(a.in_formats, c).apply(in[static_cast<int64_t>(i - keep) * a.in_stride]);
    } else {
      next[k] = in[static_cast<int64_t>(i - keep) * a.in_stride];
    }
  }
  for (int k = 0; k < keep; ++k) state[k] = next[k];
}

}  // namespace

bool conv_state_replay_supported(const ConvStateReplayArgs& a) {
  return a.batch > 0 && a.batch <= 65535 && a.channels > 0 && a.width >= 2 && a.width <= kMaxWidth && a.steps > 0 &&
         a.seq_steps && a.in && a.state && a.in_stride >= a.channels &&
         (a.type == ElementType::kF32 || (a.type == ElementType::kBF16 && !a.in_formats));
}

cudaError_t launch_conv_state_replay(const ConvStateReplayArgs& a, cudaStream_t stream) {
  if (!conv_state_replay_supported(a)) return cudaErrorInvalidValue;
  const dim3 grid((a.channels + kThreads - 1) / kThreads, a.batch);
  if (a.type == ElementType::kF32)
    conv_state_replay_kernel<float><<<grid, kThreads, 0, stream>>>(a);
  else
    conv_state_replay_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace ssdq::kernels
