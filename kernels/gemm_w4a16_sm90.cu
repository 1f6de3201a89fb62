// CUTLASS 3.x mixed-input kernel of kernels/gemm_w4a16.h. The problem is posed transposed, the
// weights as the narrow operand A so that they pass through the register file where CUTLASS
// dequantizes them ("ConvertAndScale" with fp32 scales: int4 → float, times the scale, rounded to
// fp16 — weight_unpack's kF16 value), the tokens as B:
//   D[n, m] = Σ_c W[n, c]·X[m, c], D column-major with leading dimension ldout = out[m, n].
#include "kernels/gemm_w4a16.h"

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "kernels/programmatic_launch.cuh"

namespace ssdq::kernels {
namespace {

using namespace cute;

// Tiles of kM weight rows × kN tokens × 64 (k: one 128-byte fp16 row); cooperative: two consumer warp
// groups share a tile, else ping-pong (each takes its own 64-row tile in turn).
template <int kM, int kN, bool kCooperative>
struct Kernel {
  using Tile = Shape<Int<kM>, Int<kN>, _64>;
  using Cluster = Shape<_1, _1, _1>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto,
      float, float, void, cutlass::layout::ColumnMajor, 4, float, cutlass::layout::ColumnMajor, 4,
      std::conditional_t<kCooperative, cutlass::epilogue::TmaWarpSpecializedCooperative,
                         cutlass::epilogue::TmaWarpSpecialized>>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::tuple<cutlass::int4b_t, float>,
      cutlass::layout::RowMajor, 32, cutlass::half_t, cutlass::layout::ColumnMajor, 8, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      std::conditional_t<kCooperative, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                         cutlass::gemm::KernelTmaWarpSpecializedPingpong>>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using StrideA = typename GemmKernel::StrideA;
  using StrideB = typename GemmKernel::StrideB;
  using StrideD = typename GemmKernel::StrideD;
  using StrideScale = typename CollectiveMainloop::StrideScale;

  static typename Gemm::Arguments arguments(const GemmW4A16Args& a) {
    cutlass::KernelHardwareInfo hw;
    cudaGetDevice(&hw.device_id);
    hw.sm_count = current_device_attribute(cudaDevAttrMultiProcessorCount);
    StrideA stride_w{};
    get<0>(stride_w) = a.k;
    StrideB stride_x{};
    get<0>(stride_x) = a.ldx;
    StrideD stride_out{};
    get<1>(stride_out) = a.ldout;
    StrideScale stride_scales{};
    get<1>(stride_scales) = a.n;
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {static_cast<int>(a.n), static_cast<int>(a.m), static_cast<int>(a.k), 1},
        {static_cast<const cutlass::int4b_t*>(a.w), stride_w, static_cast<const cutlass::half_t*>(a.x), stride_x,
         static_cast<const float*>(a.workspace), stride_scales, a.group_size},
        {{}, nullptr, {}, a.out, stride_out},
        hw};
    args.epilogue.thread.alpha = 1.f;
    args.epilogue.thread.beta = 0.f;
    return args;
  }
};

// scales_t[g, r] = scales[r, g]: 32 × 32 tiles through shared memory.
__global__ void transpose_scales_kernel(const float* __restrict__ scales, float* __restrict__ scales_t, int64_t rows,
                                        int groups) {
  __shared__ float tile[32][33];
  const int64_t r0 = int64_t(blockIdx.x) * 32;
  const int g0 = blockIdx.y * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t r = r0 + i;
    const int g = g0 + threadIdx.x;
    if (r < rows && g < groups) tile[i][threadIdx.x] = scales[r * groups + g];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int g = g0 + i;
    const int64_t r = r0 + threadIdx.x;
    if (r < rows && g < groups) scales_t[int64_t(g) * rows + r] = tile[threadIdx.x][i];
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

int64_t scale_groups(const GemmW4A16Args& a) { return a.group_size > 0 ? a.k / a.group_size : 0; }

// Calls f with the tile configuration's kernel (a value of its type).
template <class F>
auto dispatch(const GemmW4A16Args& a, F&& f) {
  GemmW4A16Tile tile = a.tile;
  if (tile == GemmW4A16Tile::kAuto)
    tile = a.m > kGemmW4A16FewRows ? GemmW4A16Tile::k128x256
           : a.n >= 8192           ? GemmW4A16Tile::k128x128
                                   : GemmW4A16Tile::k64x128;
  switch (tile) {
    case GemmW4A16Tile::k128x256:
      return f(Kernel<128, 256, true>{});
    case GemmW4A16Tile::k64x128:
      return f(Kernel<64, 128, false>{});
    default:  // k128x128 (gemm_w4a16_supported refuses values outside the enum)
      return f(Kernel<128, 128, true>{});
  }
}

}  // namespace

size_t gemm_w4a16_workspace_bytes(const GemmW4A16Args& a) {
  return a.n > 0 && scale_groups(a) > 0 ? static_cast<size_t>((a.n * scale_groups(a) * 4 + 15) / 16 * 16) : 0;
}

bool gemm_w4a16_supported(const GemmW4A16Args& a) {
  const bool sm90 = current_device_attribute(cudaDevAttrComputeCapabilityMajor) == 9 &&
                    current_device_attribute(cudaDevAttrComputeCapabilityMinor) == 0;
  const bool shapes = a.m > 0 && a.n > 0 && a.k > 0 && a.m <= INT32_MAX && a.n <= INT32_MAX && a.k <= INT32_MAX &&
                      a.group_size >= 64 && a.group_size % 64 == 0 && a.k % a.group_size == 0 && a.ldx >= a.k &&
                      a.ldx % 8 == 0 && a.ldout >= a.n && a.ldout % 4 == 0 && a.n % 4 == 0;
  const bool known_tile = a.tile == GemmW4A16Tile::kAuto || a.tile == GemmW4A16Tile::k128x128 ||
                          a.tile == GemmW4A16Tile::k128x256 || a.tile == GemmW4A16Tile::k64x128;
  const bool pointers = a.x && a.w && a.w_scales && a.out && a.workspace && aligned16(a.x) && aligned16(a.w) &&
                        aligned16(a.out) && aligned16(a.workspace);
  if (!sm90 || !shapes || !known_tile || !pointers) return false;
  return dispatch(a, [&](auto kernel) {
    using K = decltype(kernel);
    const auto args = K::arguments(a);
    return K::Gemm::can_implement(args) == cutlass::Status::kSuccess && K::Gemm::get_workspace_size(args) == 0;
  });
}

cudaError_t launch_gemm_w4a16(const GemmW4A16Args& a, cudaStream_t stream) {
  if (!gemm_w4a16_supported(a)) return cudaErrorInvalidValue;
  const int groups = static_cast<int>(scale_groups(a));
  transpose_scales_kernel<<<dim3(static_cast<unsigned>((a.n + 31) / 32), (groups + 31) / 32), dim3(32, 8), 0, stream>>>(
      a.w_scales, static_cast<float*>(a.workspace), a.n, groups);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return dispatch(a, [&](auto kernel) {
    using K = decltype(kernel);
    typename K::Gemm gemm;
    const auto args = K::arguments(a);
    if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
    if (gemm.run(stream) != cutlass::Status::kSuccess) {
      const cudaError_t error = cudaGetLastError();
      return error == cudaSuccess ? cudaErrorLaunchFailure : error;
    }
    return cudaGetLastError();
  });
}

}  // namespace ssdq::kernels
