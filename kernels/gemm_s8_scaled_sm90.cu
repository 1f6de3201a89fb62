// CUTLASS 3.x kernels of kernels/gemm_s8_scaled.h. Compiled for sm_90a alone and with
// --fmad=false: the epilogue tree is cutlass::multiplies / plus on float, and without contraction
// each is one correctly rounded operation, as in the CPU's linear_forward (fma(a, s, 0) = a·s for
// the positive scales the quantizer writes); the int8 output's quantizer divides with __fdiv_rn.
#include "kernels/gemm_s8_scaled.h"

#include <atomic>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "kernels/programmatic_launch.cuh"

namespace ssdq::kernels {
namespace {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// What the epilogue does with v = (acc·s_w)·s_x + bias: store it, add it into out, or store its
// int8 code.
enum class Out { kStore, kAccumulate, kInt8 };

// kernels/quant_epilogue.cuh quantize_int8 on a fragment: rne(v / s) saturated to ±127, NaN → 0,
// as an integer-valued float (the epilogue's cvt.rni.sat.s8 then converts it exactly).
template <class T>
struct QuantizeToInt8 {
  template <int N>
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(const cutlass::Array<float, N>& v,
                                                     const cutlass::Array<float, N>& scale) const {
    cutlass::Array<float, N> q;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      const float r = rintf(__fdiv_rn(v[i], scale[i]));
      q[i] = r != r ? 0.f : fminf(fmaxf(r, -127.f), 127.f);
    }
    return q;
  }
};

// out = (acc·s_w)·s_x + bias [+ out]: s_w and bias broadcast along rows (one value a column).
template <class Tile, Out kOut>
struct ScaledEpilogue {
  using Column = fusion::Sm90RowBroadcast<0, Tile, float, float>;
  using WeightScaled = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>,
                                       fusion::Sm90AccFetch, Column>;
  using Scaled = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, WeightScaled,
                                 fusion::Sm90ScalarBroadcast<float>>;
  using Biased = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, float, float, kRound>, Scaled, Column>;
  using Summed = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, float, float, kRound>, fusion::Sm90SrcFetch<float>,
                                 Biased>;
  using Quantized = fusion::Sm90EVT<fusion::Sm90Compute<QuantizeToInt8, int8_t, float, kRound>, Biased, Column>;
  using Tree = std::conditional_t<kOut == Out::kAccumulate, Summed,
                                  std::conditional_t<kOut == Out::kInt8, Quantized, Biased>>;

  static typename Tree::Arguments arguments(const GemmS8ScaledArgs& a) {
    typename Biased::Arguments biased{{{{}, {a.w_scales}, {}}, {{a.x_scale}}, {}}, {a.bias}, {}};
    if constexpr (kOut == Out::kAccumulate) return {{}, biased, {}};
    else if constexpr (kOut == Out::kInt8) return {biased, {a.out_scales}, {}};
    else return biased;
  }
};

// Configurations measured on an H100 among five (docs/kernels/gemm.md): 128 × 128 × 128 tiles,
// ping-pong warp groups, 1 × 2 clusters, and 256 × 128 × 128 cooperative for long k.
template <class Tile, class Cluster, Out kOut, bool kCooperative = false>
struct Kernel {
  static constexpr bool kAccumulate = kOut == Out::kAccumulate;
  using Epilogue = ScaledEpilogue<Tile, kOut>;
  using ElementC = std::conditional_t<kAccumulate, float, void>;
  using ElementD = std::conditional_t<kOut == Out::kInt8, int8_t, float>;
  static constexpr int kAlignD = 16 / sizeof(ElementD);
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto,
      int32_t, float, ElementC, cutlass::layout::RowMajor, 4, ElementD, cutlass::layout::RowMajor, kAlignD,
      std::conditional_t<kCooperative, cutlass::epilogue::TmaWarpSpecializedCooperative, cutlass::epilogue::TmaWarpSpecialized>,
      typename Epilogue::Tree>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, cutlass::layout::RowMajor, 16, int8_t,
      cutlass::layout::ColumnMajor, 16, int32_t, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      std::conditional_t<kCooperative, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                         cutlass::gemm::KernelTmaWarpSpecializedPingpong>>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                          CollectiveEpilogue, cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  template <class Stride>
  static Stride row_stride(int64_t ld) {
    Stride s{};
    get<0>(s) = ld;
    return s;
  }

  static typename Gemm::Arguments arguments(const GemmS8ScaledArgs& a) {
    cutlass::KernelHardwareInfo hw;
    cudaGetDevice(&hw.device_id);
    hw.sm_count = current_device_attribute(cudaDevAttrMultiProcessorCount);
    using K = typename Gemm::GemmKernel;
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), 1},
        {a.x, row_stride<typename K::StrideA>(a.ldx), a.w, row_stride<typename K::StrideB>(a.ldw)},
        {{}, kAccumulate ? static_cast<const float*>(a.out) : nullptr, row_stride<typename K::StrideC>(a.ldout),
         static_cast<ElementD*>(a.out), row_stride<typename K::StrideD>(a.ldout)},
        hw};
    args.epilogue.thread = Epilogue::arguments(a);
    return args;
  }

  static bool supported(const GemmS8ScaledArgs& a) {
    const typename Gemm::Arguments args = arguments(a);
    return Gemm::can_implement(args) == cutlass::Status::kSuccess && Gemm::get_workspace_size(args) == 0;
  }

  static cudaError_t run(const GemmS8ScaledArgs& a, cudaStream_t stream) {
    Gemm gemm;
    const typename Gemm::Arguments args = arguments(a);
    if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
    if (gemm.run(stream) != cutlass::Status::kSuccess) {
      const cudaError_t error = cudaGetLastError();
      return error == cudaSuccess ? cudaErrorLaunchFailure : error;
    }
    return cudaGetLastError();
  }
};

using Overwrite = Kernel<Shape<_128, _128, _128>, Shape<_1, _2, _1>, Out::kStore>;
using OverwriteCooperative = Kernel<Shape<_256, _128, _128>, Shape<_1, _1, _1>, Out::kStore, true>;
using Accumulate = Kernel<Shape<_128, _128, _128>, Shape<_1, _2, _1>, Out::kAccumulate>;
using Quantize = Kernel<Shape<_128, _128, _128>, Shape<_1, _2, _1>, Out::kInt8>;

// Cooperative 256 × 128 won where k ≥ 4096 and its tiles fill two waves (2048 × 18560 × 4096:
// 223 against 240 µs; 16384 × 2560 × 5120: 298 against 342 µs), ping-pong elsewhere (2048 × 2560 ×
// 5120: 46 against 61 µs; 2048 × 10576 × 2560: 89 against 105 µs).
bool cooperative(const GemmS8ScaledArgs& a) {
  if (a.accumulate || a.out_type == ElementType::kS8 || a.schedule == GemmS8ScaledSchedule::kPingPong) return false;
  if (a.schedule == GemmS8ScaledSchedule::kCooperative) return true;
  const int64_t tiles = (a.m + 255) / 256 * ((a.n + 127) / 128);
  return a.k >= 4096 && tiles >= 2 * int64_t(current_device_attribute(cudaDevAttrMultiProcessorCount));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemm_s8_scaled_supported(const GemmS8ScaledArgs& a) {
  const bool sm90 = current_device_attribute(cudaDevAttrComputeCapabilityMajor) == 9 &&
                    current_device_attribute(cudaDevAttrComputeCapabilityMinor) == 0;
  const bool shapes = a.m > 0 && a.n > 0 && a.k > 0 && a.m <= INT32_MAX && a.n <= INT32_MAX && a.k <= INT32_MAX &&
                      a.ldx >= a.k && a.ldw >= a.k && a.ldout >= a.n && a.ldx % 16 == 0 && a.ldw % 16 == 0 &&
                      a.k % 16 == 0 && a.ldout % 4 == 0 && a.n % 4 == 0;
  const bool pointers = a.x && a.w && a.w_scales && a.out && aligned16(a.x) && aligned16(a.w) && aligned16(a.out);
  if (!sm90 || !shapes || !pointers || (a.accumulate && a.schedule == GemmS8ScaledSchedule::kCooperative)) return false;
  if (a.out_type == ElementType::kS8) {
    const bool int8_out = a.out_scales && !a.accumulate && a.schedule != GemmS8ScaledSchedule::kCooperative &&
                          a.n % 16 == 0 && a.ldout % 16 == 0;
    return int8_out && Quantize::supported(a);
  }
  if (a.out_type != ElementType::kF32) return false;
  if (a.accumulate) return Accumulate::supported(a);
  return cooperative(a) ? OverwriteCooperative::supported(a) : Overwrite::supported(a);
}

cudaError_t launch_gemm_s8_scaled(const GemmS8ScaledArgs& a, cudaStream_t stream) {
  if (!gemm_s8_scaled_supported(a)) return cudaErrorInvalidValue;
  if (a.out_type == ElementType::kS8) return Quantize::run(a, stream);
  if (a.accumulate) return Accumulate::run(a, stream);
  return cooperative(a) ? OverwriteCooperative::run(a, stream) : Overwrite::run(a, stream);
}

}  // namespace ssdq::kernels
