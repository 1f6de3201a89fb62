#include "kernels/ssd_state_update.h"

namespace ssdq::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxPerLane = 8;  // dstate up to 256

// One block per (sequence, head); each warp walks headdim rows, each lane holds dstate/32
// state entries of the row, and the row's output is a warp reduction.
template <int kPerLane>
__global__ void ssd_state_update_kernel(SsdStateUpdateArgs a) {
  const int head = blockIdx.x, seq = blockIdx.y;
  const int group = head / (a.heads / a.groups);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float dt = a.dt[seq * a.heads + head];
  const float decay = __expf(dt * a.A[head]);
  const float skip = a.D[head];
  const float* B = a.B + seq * a.bc_stride + group * a.dstate;
  const float* C = a.C + seq * a.bc_stride + group * a.dstate;
  float b[kPerLane], c[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    b[i] = B[lane + 32 * i];
    c[i] = C[lane + 32 * i];
  }
  const float* x = a.x + seq * a.x_stride + head * a.headdim;
  float* y = a.y + static_cast<int64_t>(seq) * a.heads * a.headdim + head * a.headdim;
  float* state = a.state + (static_cast<int64_t>(seq) * a.heads + head) * a.headdim * a.dstate;
  for (int p = warp; p < a.headdim; p += kWarps) {
    const float xp = x[p];
    const float dtx = dt * xp;
    float* row = state + static_cast<int64_t>(p) * a.dstate;
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const float s = decay * row[lane + 32 * i] + dtx * b[i];
      row[lane + 32 * i] = s;
      acc += s * c[i];
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (lane == 0) y[p] = acc + skip * xp;
  }
}

template <int kPerLane>
cudaError_t launch(const SsdStateUpdateArgs& a, cudaStream_t stream) {
  ssd_state_update_kernel<kPerLane><<<dim3(a.heads, a.batch), kWarps * 32, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

bool ssd_state_update_supported(const SsdStateUpdateArgs& a) {
  return a.batch > 0 && a.heads > 0 && a.groups > 0 && a.heads % a.groups == 0 && a.headdim > 0 &&
         a.dstate % 32 == 0 && a.dstate / 32 >= 1 && a.dstate / 32 <= kMaxPerLane && a.batch <= 65535;
}

cudaError_t launch_ssd_state_update(const SsdStateUpdateArgs& a, cudaStream_t stream) {
  if (!ssd_state_update_supported(a)) return cudaErrorInvalidValue;
  switch (a.dstate / 32) {
    case 1: return launch<1>(a, stream);
    case 2: return launch<2>(a, stream);
    case 3: return launch<3>(a, stream);
    case 4: return launch<4>(a, stream);
    case 5: return launch<5>(a, stream);
    case 6: return launch<6>(a, stream);
    case 7: return launch<7>(a, stream);
    case 8: return launch<8>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ssdq::kernels
