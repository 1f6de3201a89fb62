#include "runtime/cuda_measure.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>

#include "formats/error.h"
#include "kernels/fill_random.h"
#include "kernels/gemm.h"
#include "kernels/ssd_chunk_scan.h"
#include "kernels/ssdi8_chunk_scan.h"
#include "runtime/bench.h"

namespace ssdq {
namespace {

void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA: {}: {}", what, cudaGetErrorString(status));
}

// Device memory freed at scope exit.
class Scratch {
 public:
  ~Scratch() {
    for (void* p : blocks_) cudaFree(p);
  }
  template <typename T>
  T* alloc(size_t count) {
    void* p = nullptr;
    cuda_ok(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc (benchmark buffers)");
    blocks_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  T* random(size_t count, float center, float spread, kernels::ElementType type) {
    T* p = alloc<T>(count);
    kernels::FillRandomArgs a;
    a.count = static_cast<int64_t>(count);
    a.seed = blocks_.size();
    a.center = center;
    a.spread = spread;
    a.type = type;
    a.out = p;
    cuda_ok(kernels::launch_fill_random(a, nullptr), "fill random");
    return p;
  }

 private:
  std::vector<void*> blocks_;
};

// Median milliseconds of `launch` over `repeats` runs after warm-ups, timed with events. The
// warm-ups last at least 200 ms (and two runs): the first shape of `bench --module ssd` measured
// ~15 % slow after two.
template <typename Launch>
double median_ms(Launch launch, int repeats) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const auto warm_start = std::chrono::steady_clock::now();
  for (int i = 0; i < 2 || std::chrono::steady_clock::now() - warm_start < std::chrono::milliseconds(200); ++i) {
    launch();
    cuda_ok(cudaDeviceSynchronize(), "warm-up run");
  }
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i) {
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    cuda_ok(cudaEventSynchronize(stop), "benchmark run");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

DeviceCeilings measure_device_ceilings(int device) {
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  DeviceCeilings ceilings;
  Scratch scratch;
  const size_t bytes = size_t{2} << 30;
  char* a = scratch.alloc<char>(bytes);
  char* b = scratch.alloc<char>(bytes);
  cuda_ok(cudaMemset(a, 1, bytes), "memset");
  const double copy_ms = median_ms([&] { cuda_ok(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "copy"); }, 10);
  ceilings.copy_gb_per_s = 2.0 * bytes / (copy_ms * 1e6);

  const int64_t n = 8192;
  using bf16 = __nv_bfloat16;
  bf16* x = scratch.random<bf16>(n * n, 0.f, 1.f, kernels::ElementType::kBF16);
  bf16* w = scratch.random<bf16>(n * n, 0.f, 1.f, kernels::ElementType::kBF16);
  bf16* out = scratch.alloc<bf16>(n * n);
  void* workspace = scratch.alloc<char>(32 << 20);
  kernels::Gemm gemm(workspace, 32 << 20);
  kernels::GemmArgs args;
  args.m = args.n = args.k = n;
  args.x = x;
  args.ldx = n;
  args.w = w;
  args.out = out;
  args.ldout = n;
  const double gemm_ms = median_ms([&] { gemm.run(args, nullptr); }, 20);
  ceilings.bf16_tflop_per_s = 2.0 * n * n * n / (gemm_ms * 1e9);
  return ceilings;
}

namespace {

SsdModuleTiming time_ssdi8(const Mamba2Config& c, int64_t batch, int64_t length, int repeats) {
  const int64_t H = c.nheads(), P = c.headdim, N = c.d_state, G = c.ngroups;
  const int64_t M = batch * length;
  Scratch scratch;
  kernels::Ssdi8ChunkScanArgs a;
  a.batch = static_cast<int>(batch);
  a.seqlen = static_cast<int>(length);
  a.heads = static_cast<int>(H);
  a.headdim = static_cast<int>(P);
  a.groups = static_cast<int>(G);
  a.dstate = static_cast<int>(N);
  a.chunk = static_cast<int>(c.chunk_size);
  // The kernel's operands as the conv writes them: fp16 x rows, int8 B|C rows.
  a.x = scratch.random<__half>(M * H * P, 0.f, 1.f, kernels::ElementType::kF16);
  a.x_stride = H * P;
  int8_t* bc = scratch.random<int8_t>(M * 2 * G * N, 0.f, 127.f, kernels::ElementType::kS8);
  a.Bq = bc;
  a.Cq = bc + G * N;
  a.bc_stride = 2 * G * N;
  a.dt_raw = scratch.random<float>(M * H, -3.f, 1.f, kernels::ElementType::kF32);
  a.dt_stride = H;
  a.dt_bias = scratch.random<float>(H, -1.f, 0.5f, kernels::ElementType::kF32);
  a.A = scratch.random<float>(H, -8.5f, 7.5f, kernels::ElementType::kF32);
  a.D = scratch.random<float>(H, 1.f, 0.1f, kernels::ElementType::kF32);
  a.B_scales = scratch.random<float>(G, 0.01f, 0.001f, kernels::ElementType::kF32);
  a.C_scales = scratch.random<float>(G, 0.01f, 0.001f, kernels::ElementType::kF32);
  a.cb_scales = scratch.random<float>(G, 0.1f, 0.01f, kernels::ElementType::kF32);
  a.x_scaled_scales = scratch.random<float>(H * P, 0.01f, 0.001f, kernels::ElementType::kF32);
  a.state_scales = scratch.random<float>(H * P, 0.01f, 0.001f, kernels::ElementType::kF32);
  a.state = scratch.alloc<int8_t>(batch * H * P * N);
  a.y = scratch.alloc<float>(M * H * P);
  a.y_stride = H * P;
  a.workspace = scratch.alloc<char>(kernels::ssdi8_chunk_scan_workspace_bytes(a));
  if (!kernels::ssdi8_chunk_scan_supported(a)) fail("the SSDi8 kernel does not support this shape");
  SsdModuleTiming t;
  t.batch = batch;
  t.length = length;
  t.ms = median_ms([&] { cuda_ok(kernels::launch_ssdi8_chunk_scan(a, nullptr), "ssdi8_chunk_scan"); }, repeats);
  t.flops = ssd_flops(c, M);
  // fp16 x, int8 B and C, fp32 dt read once, fp32 y written once, the int8 state read and written
  // once (the C·Bᵀ workspace, written once and read from L2 by every head, not counted).
  t.bytes = M * (H * P * 2.0 + 2 * G * N + H * 4.0) + M * H * P * 4.0 + 2.0 * batch * H * P * N;
  return t;
}

}  // namespace

std::vector<SsdModuleTiming> measure_ssd_module(const Mamba2Config& c,
                                                const std::vector<std::pair<int64_t, int64_t>>& shapes, int device,
                                                int repeats, SsdModulePath path) {
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  using bf16 = __nv_bfloat16;
  std::vector<SsdModuleTiming> timings;
  const int64_t H = c.nheads(), P = c.headdim, N = c.d_state, G = c.ngroups, conv_dim = c.conv_dim();
  for (const auto& [batch, length] : shapes) {
    if (path == SsdModulePath::kSsdi8) {
      timings.push_back(time_ssdi8(c, batch, length, repeats));
      continue;
    }
    Scratch scratch;
    const int64_t M = batch * length;
    kernels::SsdChunkScanArgs a;
    a.batch = static_cast<int>(batch);
    a.seqlen = static_cast<int>(length);
    a.heads = static_cast<int>(H);
    a.headdim = static_cast<int>(P);
    a.groups = static_cast<int>(G);
    a.dstate = static_cast<int>(N);
    a.chunk = static_cast<int>(c.chunk_size);
    // The layout the model uses: x|B|C rows of the conv output; dt in its own rows here.
    bf16* xbc = scratch.random<bf16>(M * conv_dim, 0.f, 1.f, kernels::ElementType::kBF16);
    a.x = xbc;
    a.x_row_stride = conv_dim;
    a.B = xbc + H * P;
    a.C = xbc + H * P + G * N;
    a.bc_row_stride = conv_dim;
    a.dt_raw = scratch.random<bf16>(M * H, -3.f, 1.f, kernels::ElementType::kBF16);
    a.dt_row_stride = H;
    a.dt_bias = scratch.random<float>(H, -1.f, 0.5f, kernels::ElementType::kF32);
    a.A = scratch.random<float>(H, -8.5f, 7.5f, kernels::ElementType::kF32);
    a.D = scratch.random<float>(H, 1.f, 0.1f, kernels::ElementType::kF32);
    a.state = scratch.random<float>(batch * H * P * N, 0.f, 1.f, kernels::ElementType::kF32);
    a.y = scratch.alloc<bf16>(M * H * P);
    a.workspace = scratch.alloc<char>(kernels::ssd_chunk_scan_workspace_bytes(a));
    if (!kernels::ssd_chunk_scan_supported(a)) fail("the SSD kernels do not support this shape");
    SsdModuleTiming t;
    t.batch = batch;
    t.length = length;
    t.ms = median_ms([&] { cuda_ok(kernels::launch_ssd_chunk_scan(a, nullptr), "ssd_chunk_scan"); }, repeats);
    t.flops = ssd_flops(c, M);
    // x, B, C, dt read once, y written once, the state read and written once.
    t.bytes = M * (H * P + 2 * G * N + H) * 2.0 + M * H * P * 2.0 + 2.0 * batch * H * P * N * 4;
    timings.push_back(t);
  }
  return timings;
}

}  // namespace ssdq
