// Times the CUDA kernels of this family on real model shapes and prints achieved bandwidth
// against the bytes each launch must move (a benchmark: it measures, it asserts nothing).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/add_rmsnorm.h"
#include "kernels/cuda_check.h"
#include "kernels/causal_conv1d.h"
#include "kernels/gemm.h"
#include "kernels/gemm_s8_grouped.h"
#include "kernels/gemm_s8_scaled.h"
#include "kernels/gemm_w4a16.h"
#include "kernels/gemv.h"
#include "kernels/hadamard_quant.h"
#include "kernels/qgemv.h"
#include "kernels/scale_int32.h"
#include "kernels/weight_unpack.h"
#include "kernels/ssd_conv_step.h"
#include "kernels/ssd_state_update.h"
#include "model/hadamard_base.h"

namespace ssdq {
namespace {

using kernels::check_cuda;

float* device_random(size_t count, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> host(count);
  for (float& v : host) v = dist(rng);
  float* ptr = nullptr;
  check_cuda(cudaMalloc(&ptr, count * sizeof(float)), "cudaMalloc");
  check_cuda(cudaMemcpy(ptr, host.data(), count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  return ptr;
}

template <typename Launch>
double time_us(Launch launch, int iterations = 200) {
  for (int i = 0; i < 10; ++i) check_cuda(launch(), "warm-up launch");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < iterations; ++i) check_cuda(launch(), "launch");
  cudaEventRecord(stop);
  check_cuda(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  return ms * 1000.0 / iterations;
}

double copy_bandwidth_gbs() {
  const size_t bytes = size_t(1) << 30;
  void *a, *b;
  check_cuda(cudaMalloc(&a, bytes), "cudaMalloc");
  check_cuda(cudaMalloc(&b, bytes), "cudaMalloc");
  const double us = time_us([&] { return cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); }, 20);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / us / 1e3;  // read + write
}

// Random fp32 inputs of `steps` tokens for each of `batch` sequences (headdim 64, dstate 128), an
// fp32 state and an output buffer (int8 states: a quarter of the state is used).
kernels::SsdStateUpdateArgs random_state_update_args(int batch, int heads, int groups, int steps, std::mt19937& rng) {
  const int P = 64, N = 128;
  const size_t tokens = size_t(batch) * steps;
  kernels::SsdStateUpdateArgs a;
  a.batch = batch;
  a.heads = heads;
  a.headdim = P;
  a.groups = groups;
  a.dstate = N;
  a.steps = steps;
  a.x = device_random(tokens * heads * P, -1, 1, rng);
  a.x_stride = heads * P;
  float* bc = device_random(tokens * 2 * groups * N, -1, 1, rng);
  a.B = bc;
  a.C = bc + groups * N;
  a.bc_stride = 2 * groups * N;
  a.dt = device_random(tokens * heads, 0.001f, 0.1f, rng);
  a.dt_stride = heads;
  a.y_stride = heads * P;
  a.A = device_random(heads, -4, -1, rng);
  a.D = device_random(heads, 0.5f, 1.5f, rng);
  a.state = device_random(size_t(batch) * heads * P * N, -1, 1, rng);
  check_cuda(cudaMalloc(&a.y, tokens * heads * P * sizeof(float)), "cudaMalloc");
  return a;
}

void bench_state_update(int batch, int heads, int groups, double bandwidth, bool int8_state = false) {
  const int P = 64, N = 128;
  std::mt19937 rng(1);
  kernels::SsdStateUpdateArgs a = random_state_update_args(batch, heads, groups, 1, rng);
  if (int8_state) {
    a.state_type = kernels::ElementType::kS8;
    a.state_scales = device_random(size_t(heads) * P, 0.004f, 0.012f, rng);  // per (h, p), as SSDi8
    // States across the int8 range (the bytes of random floats would pile up at a few values)
    std::uniform_int_distribution<int> q(-127, 127);
    std::vector<int8_t> values(size_t(batch) * heads * P * N);
    for (auto& v : values) v = static_cast<int8_t>(q(rng));
    check_cuda(cudaMemcpy(a.state, values.data(), values.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  const double us = time_us([&] { return kernels::launch_ssd_state_update(a, nullptr); });
  const double bytes = 2.0 * batch * heads * P * N * (int8_state ? 1 : sizeof(float));
  fmt::print("ssd_state_update  batch {:4d} heads {:3d} groups {} {}: {:8.2f} us  {:7.1f} GB/s  ({:.0f}% of copy bandwidth)\n",
             batch, heads, groups, int8_state ? "int8" : "fp32", us, bytes / us / 1e3, 100 * bytes / us / 1e3 / bandwidth);
}

// One launch alone, its L2 emptied first (a verify window's state update finds its replayed
// inputs where the previous window left them, several GB of weights ago): µs between events
// around it, the median of `iterations`.
template <typename Launch>
double cold_launch_us(Launch launch, int iterations = 50) {
  static void* flush = nullptr;
  constexpr size_t kFlushBytes = size_t(256) << 20;  // past any L2
  if (!flush) check_cuda(cudaMalloc(&flush, kFlushBytes), "cudaMalloc");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> times;
  for (int i = 0; i < iterations + 3; ++i) {
    check_cuda(cudaMemsetAsync(flush, i & 0xff, kFlushBytes), "flush L2");
    cudaEventRecord(start);
    check_cuda(launch(), "launch");
    cudaEventRecord(stop);
    check_cuda(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i >= 3) times.push_back(ms * 1000.f);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// A verify window's state update at batch 1 (one launch of `window` tokens rounded after each)
// with the previous window's kept tokens replayed first inside it (SsdStateUpdateArgs::
// replay_steps), against a single step; cold L2 (cold_launch_us).
void bench_window_state_update(int heads, int groups) {
  std::mt19937 rng(3);
  constexpr int kWindow = 7;
  const kernels::SsdStateUpdateArgs kept = random_state_update_args(1, heads, groups, kWindow, rng);
  kernels::SsdStateUpdateArgs a = random_state_update_args(1, heads, groups, kWindow, rng);
  a.round_every_step = true;
  int32_t* counts = nullptr;
  check_cuda(cudaMalloc(&counts, 2 * sizeof(int32_t)), "cudaMalloc");
  std::string line = fmt::format("ssd_state_update  window, batch 1, heads {:3d} groups {}, cold L2:", heads, groups);
  kernels::SsdStateUpdateArgs step = a;
  step.steps = 1;
  step.round_every_step = false;
  line += fmt::format(" step {:6.2f} us;", cold_launch_us([&] { return kernels::launch_ssd_state_update(step, nullptr); }));
  for (const int replayed : {-1, 0, 3, 7}) {
    kernels::SsdStateUpdateArgs w = a;
    if (replayed >= 0) {
      const int32_t host[2] = {replayed, kWindow};
      check_cuda(cudaMemcpy(counts, host, sizeof(host), cudaMemcpyHostToDevice), "cudaMemcpy");
      w.replay_steps = counts;
      w.replay_x = kept.x;
      w.replay_B = kept.B;
      w.replay_dt = kept.dt;
      w.store_final = false;
    }
    const double us = cold_launch_us([&] { return kernels::launch_ssd_state_update(w, nullptr); });
    line += replayed < 0 ? fmt::format(" {} tokens {:6.2f} us;", kWindow, us)
                         : fmt::format(" + {} replayed {:6.2f} us;", replayed, us);
  }
  fmt::print("{}\n", line);
  cudaFree(counts);
}

// The fp32 engine's prefill recurrence (calibration and export passes): `steps` tokens of each of
// `batch` sequences in one launch, fp32 inputs and state; row-steps per µs says how many
// (sequence, head, row, token) updates of N values the GPU makes.
void bench_long_recurrence(int batch, int heads, int groups, int steps) {
  const int P = 64;
  std::mt19937 rng(2);
  const int64_t tokens = int64_t(batch) * steps;
  const kernels::SsdStateUpdateArgs a = random_state_update_args(batch, heads, groups, steps, rng);
  const double us = time_us([&] { return kernels::launch_ssd_state_update(a, nullptr); }, 5);
  fmt::print("ssd_state_update  long: batch {:3d} × {} tokens, heads {:3d} groups {}: {:8.2f} ms  {:8.0f} row-steps/us\n",
             batch, steps, heads, groups, us / 1e3, double(tokens) * heads * P / us);
}

// One decode step's conv + int8-state update as the quantized backend runs it (fp32 in_proj row,
// int8 formats on the conv's input and output, per-(h, p) state scales): the two kernels one after
// the other against the fused ssd_conv_step. Back-to-back launches, so each includes its launch.
void bench_conv_step(int batch, int heads, int groups) {
  const int P = 64, N = 128, E = heads * P, channels = E + 2 * groups * N, row = channels + E + heads;
  std::mt19937 rng(7);
  kernels::CausalConv1dArgs conv;
  conv.batch = batch;
  conv.seqlen = 1;
  conv.channels = channels;
  conv.width = 4;
  conv.in = device_random(size_t(batch) * row, -1, 1, rng);
  conv.in_stride = row;
  conv.weight = device_random(size_t(channels) * 4, -0.5f, 0.5f, rng);
  conv.bias = device_random(channels, -0.2f, 0.2f, rng);
  conv.state = device_random(size_t(batch) * channels * 3, -1, 1, rng);
  conv.in_type = conv.out_type = kernels::ElementType::kF32;
  conv.in_formats = device_random(channels, 0.01f, 0.03f, rng);
  conv.out_formats = device_random(channels, 0.01f, 0.03f, rng);
  conv.out = device_random(size_t(batch) * channels, -1, 1, rng);
  kernels::SsdStateUpdateArgs step;
  step.batch = batch;
  step.heads = heads;
  step.headdim = P;
  step.groups = groups;
  step.dstate = N;
  const float* xbc = static_cast<const float*>(conv.out);
  step.x = xbc;
  step.B = xbc + E;
  step.C = xbc + E + groups * N;
  step.x_stride = step.bc_stride = channels;
  step.dt = static_cast<const float*>(conv.in) + channels + E;
  step.dt_stride = row;
  step.A = device_random(heads, -4, -1, rng);
  step.D = device_random(heads, 0.5f, 1.5f, rng);
  step.dt_bias = device_random(heads, -4, -1, rng);
  step.state = device_random(size_t(batch) * E * N / 4 + 1, -1, 1, rng);  // int8 bytes
  step.state_type = kernels::ElementType::kS8;
  step.state_scales = device_random(E, 0.004f, 0.012f, rng);
  step.y = device_random(size_t(batch) * E, -1, 1, rng);
  step.y_stride = E;
  kernels::SsdConvStepArgs fused{conv, step, nullptr};
  check_cuda(cudaMalloc(&fused.arrivals, size_t(batch) * groups * sizeof(int32_t)), "cudaMalloc");
  check_cuda(cudaMemset(fused.arrivals, 0, size_t(batch) * groups * sizeof(int32_t)), "cudaMemset");
  const double separate = time_us([&] {
    const cudaError_t status = kernels::launch_causal_conv1d(conv, nullptr);
    return status != cudaSuccess ? status : kernels::launch_ssd_state_update(step, nullptr);
  });
  const double one = time_us([&] { return kernels::launch_ssd_conv_step(fused, nullptr); });
  fmt::print("conv + state      batch {:4d} heads {:3d} groups {} int8: conv then state update {:6.2f} us, "
             "ssd_conv_step {:6.2f} us\n",
             batch, heads, groups, separate, one);
}

void bench_add_rmsnorm(int rows, int dim, double bandwidth) {
  std::mt19937 rng(2);
  kernels::AddRmsNormArgs a;
  a.rows = rows;
  a.dim = dim;
  a.residual = device_random(size_t(rows) * dim, -1, 1, rng);
  a.delta = device_random(size_t(rows) * dim, -1, 1, rng);
  a.weight = device_random(dim, 0.5f, 1.5f, rng);
  check_cuda(cudaMalloc(&a.out, size_t(rows) * dim * sizeof(float)), "cudaMalloc");
  const double us = time_us([&] { return kernels::launch_add_rmsnorm(a, nullptr); });
  const double bytes = 4.0 * rows * dim * sizeof(float);  // residual in/out, delta in, out
  fmt::print("add_rmsnorm       rows {:6d} dim {:5d}: {:8.2f} us  {:7.1f} GB/s  ({:.0f}% of copy bandwidth)\n", rows, dim,
             us, bytes / us / 1e3, 100 * bytes / us / 1e3 / bandwidth);
}

void bench_gemm(int64_t m, int64_t n, int64_t k, double bandwidth, double* total_us) {
  std::mt19937 rng(3);
  using bf16 = __nv_bfloat16;
  std::vector<uint16_t> host(size_t(n) * k, 0x3c00);
  bf16 *x, *w, *out;
  check_cuda(cudaMalloc(&x, m * k * 2), "cudaMalloc");
  check_cuda(cudaMalloc(&w, n * k * 2), "cudaMalloc");
  check_cuda(cudaMalloc(&out, m * n * 2), "cudaMalloc");
  check_cuda(cudaMemcpy(w, host.data(), n * k * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  check_cuda(cudaMemset(x, 0x3c, m * k * 2), "memset");
  void* workspace;
  check_cuda(cudaMalloc(&workspace, 32 << 20), "cudaMalloc");
  kernels::Gemm gemm(workspace, 32 << 20);
  kernels::GemmArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.x = x;
  a.ldx = k;
  a.w = w;
  a.out = out;
  a.ldout = n;
  const double us = time_us([&] {
    gemm.run(a, nullptr);
    return cudaSuccess;
  });
  *total_us += us;
  const double bytes = 2.0 * (n * k + m * k + m * n);
  fmt::print("gemm (cuBLASLt)   m {:5d} n {:6d} k {:5d}: {:8.2f} us  {:7.1f} GB/s  ({:.0f}% of copy bandwidth)\n", m, n, k, us,
             bytes / us / 1e3, 100 * bytes / us / 1e3 / bandwidth);
  cudaFree(x);
  cudaFree(w);
  cudaFree(out);
  cudaFree(workspace);
}

// The fused decode GEMVs of one layer at batch m: in_proj in_dim × D, out_proj D × 2D with the
// gated norm over `groups` groups; each with the norms built by every block (staged = null) and as
// the engine launches them (room for staged rows given: gemv.cu decides).
void bench_gemv(int m, double bandwidth, int D, int in_dim, int groups) {
  std::mt19937 rng(4);
  using bf16 = __nv_bfloat16;
  const int E = 2 * D;
  bf16* w_in = reinterpret_cast<bf16*>(device_random(size_t(in_dim) * D / 2, -1, 1, rng));  // bf16 bytes from floats
  bf16* w_out = reinterpret_cast<bf16*>(device_random(size_t(D) * E / 2, -1, 1, rng));
  float* residual = device_random(size_t(m) * D, -1, 1, rng);
  float* norm = device_random(E, 0.5f, 1.5f, rng);
  bf16* zxbcdt = reinterpret_cast<bf16*>(device_random(size_t(m) * in_dim / 2 + 8, -1, 1, rng));
  bf16* y = reinterpret_cast<bf16*>(device_random(size_t(m) * E / 2, -1, 1, rng));
  kernels::GemvArgs a;
  a.m = m;
  a.n = in_dim;
  a.k = D;
  a.input = kernels::GemvInput::kRmsNorm;
  a.residual = residual;
  a.norm_weight = norm;
  a.w = w_in;
  a.out = zxbcdt;
  a.ldout = in_dim;
  // Where the engine builds several rows' norms once (GemvArgs::staged), as it launches them.
  bf16* staged = reinterpret_cast<bf16*>(device_random(size_t(m) * E / 2, -1, 1, rng));
  const double in_fused_us = kernels::gemv_supported(a) ? time_us([&] { return kernels::launch_gemv(a, nullptr); }) : NAN;
  a.staged = staged;
  const double in_us = time_us([&] { return kernels::launch_gemv(a, nullptr); });
  kernels::GemvArgs o;
  o.m = m;
  o.n = D;
  o.k = E;
  o.input = kernels::GemvInput::kGatedRmsNorm;
  o.y = y;
  o.z = zxbcdt;
  o.z_stride = in_dim;
  o.group_size = E / groups;
  o.norm_weight = norm;
  o.w = w_out;
  o.out = residual;
  o.ldout = D;
  o.out_type = kernels::ElementType::kF32;
  o.accumulate = true;
  // (rows the blocks cannot hold in shared memory are only taken staged: NaN)
  const double out_fused_us = kernels::gemv_supported(o) ? time_us([&] { return kernels::launch_gemv(o, nullptr); }) : NAN;
  o.staged = staged;
  const double out_us = time_us([&] { return kernels::launch_gemv(o, nullptr); });
  const double in_bytes = 2.0 * in_dim * D, out_bytes = 2.0 * D * E;
  fmt::print("gemv+rmsnorm      m {} in_proj  {:5d} × {:4d}: {:8.2f} us  {:7.1f} GB/s  ({:.0f}% of copy bandwidth); "
             "norm in every block {:8.2f} us\n",
             m, in_dim, D, in_us, in_bytes / in_us / 1e3, 100 * in_bytes / in_us / 1e3 / bandwidth, in_fused_us);
  fmt::print("gemv+gated norm   m {} out_proj {:5d} × {:4d}, {} groups: {:8.2f} us  {:7.1f} GB/s  ({:.0f}% of copy "
             "bandwidth); norm in every block {:8.2f} us\n",
             m, D, E, groups, out_us, out_bytes / out_us / 1e3, 100 * out_bytes / out_us / 1e3 / bandwidth, out_fused_us);
  for (void* p : {static_cast<void*>(w_in), static_cast<void*>(w_out), static_cast<void*>(residual),
                  static_cast<void*>(norm), static_cast<void*>(zxbcdt), static_cast<void*>(y), static_cast<void*>(staged)})
    cudaFree(p);
}

// The quantized decode projections of mamba2-2.7b (in_proj 10576 × 2560, out_proj 2560 × 5120):
// bytes = weights in their stored width + their scales; the bf16 row is the same shape's plain
// bf16 GEMV for the speed-up.
void bench_qgemv(int m, double bandwidth) {
  std::mt19937 rng(6);
  const int shapes[2][2] = {{10576, 2560}, {2560, 5120}};
  for (const auto& shape : shapes) {
    const int n = shape[0], k = shape[1], group = 128;
    void* w = device_random(size_t(n) * k / 4 + 16, -1, 1, rng);  // int8 bytes (int4 uses half)
    float* scales = device_random(size_t(n) * (k / group), 0.001f, 0.01f, rng);
    void* x = device_random(size_t(m) * k / 2 + 16, -1, 1, rng);  // int8 or fp16 rows
    float* out = device_random(size_t(m) * n, -1, 1, rng);
    kernels::GemvArgs b;
    b.m = std::min(m, kernels::kGemvMaxRows);
    b.n = n;
    b.k = k;
    b.x = static_cast<__nv_bfloat16*>(x);
    b.ldx = k;
    void* w16 = device_random(size_t(n) * k / 2, -1, 1, rng);
    b.w = static_cast<__nv_bfloat16*>(w16);
    b.out = out;
    b.ldout = n;
    b.out_type = kernels::ElementType::kF32;
    // (above the bf16 GEMV's 4 rows the comparison is the gemm lines' cuBLASLt)
    const double bf16_us = m <= kernels::kGemvMaxRows ? time_us([&] { return kernels::launch_gemv(b, nullptr); }) : NAN;
    std::string line = fmt::format("qgemv m {:2d} n {:5d} k {:4d}: bf16 gemv {:6.2f} us", m, n, k, bf16_us);
    using S = kernels::QgemvSchedule;
    const std::pair<kernels::QgemvKind, S> variants[] = {{kernels::QgemvKind::kW8A8, S::kSplitGroups},
                                                         {kernels::QgemvKind::kW8A8, S::kSplitK},
                                                         {kernels::QgemvKind::kW4A8, S::kSplitGroups},
                                                         {kernels::QgemvKind::kW4A8, S::kQuad},
                                                         {kernels::QgemvKind::kW4A16, S::kSplitGroups},
                                                         {kernels::QgemvKind::kW4A16, S::kQuad}};
    for (auto [kind, schedule] : variants) {
      kernels::QgemvArgs a;
      a.kind = kind;
      a.schedule = schedule;
      a.m = m;
      a.n = n;
      a.k = k;
      a.x_int8 = static_cast<int8_t*>(x);
      a.x_f16 = static_cast<__half*>(x);
      a.ldx = k;
      a.w = w;
      a.w_scales = scales;
      a.group_size = group;
      a.out = out;
      a.ldout = n;
      const double us = time_us([&] { return kernels::launch_qgemv(a, nullptr); });
      const bool int4 = kind != kernels::QgemvKind::kW8A8;
      const double bytes = double(n) * k * (int4 ? 0.5 : 1.0) + 4.0 * n * (int4 ? k / group : 1);
      line += fmt::format(" | {}{} {:6.2f} us {:5.0f} GB/s ({:3.0f}%) {:.2f}× bf16",
                          kind == kernels::QgemvKind::kW8A8 ? "w8a8" : int4 && kind == kernels::QgemvKind::kW4A8 ? "w4a8" : "w4a16",
                          schedule == S::kSplitGroups ? (int4 ? "/split" : "/warp")
                          : schedule == S::kQuad      ? "/quad"
                                                      : "/splitk",
                          us, bytes / us / 1e3, 100 * bytes / us / 1e3 / bandwidth, bf16_us / us);
    }
    fmt::print("{}\n", line);
    cudaFree(w);
    cudaFree(w16);
    cudaFree(scales);
    cudaFree(x);
    cudaFree(out);
  }
}

// The W8A8 prefill projection: cuBLASLt's int8 GEMM (IMMA) into int32, then the scaling epilogue
// into the fp32 residual; on sm_90 the fused CUTLASS kernel (fp32 out, as the quantized backend
// writes); the bf16 GEMM of the same shape for the speed-up.
const char* grouped_tile_name(kernels::GemmS8GroupedTile tile) {
  return tile == kernels::GemmS8GroupedTile::kWgmma   ? "wgmma 64×128"
         : tile == kernels::GemmS8GroupedTile::kLarge ? "mma.sync 128×128"
         : tile == kernels::GemmS8GroupedTile::kNarrow ? "mma.sync 32×32"
                                                      : "mma.sync 32×64";
}

// The int8 GEMM (int32 out) of `cols` of k and its scaling pass into fp32 `out`, as the backend
// sets them up; rows of k bytes.
kernels::GemmArgs s8_gemm_args(int64_t m, int64_t n, int64_t k, int64_t cols, const int8_t* x, const int8_t* w,
                               int32_t* acc) {
  kernels::GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = cols;
  g.in_type = kernels::ElementType::kS8;
  g.x = x;
  g.ldx = k;
  g.w = w;
  g.ldw = k;
  g.out = acc;
  g.ldout = n;
  g.out_type = kernels::ElementType::kS32;
  return g;
}
kernels::ScaleInt32Args scale_args(int64_t m, int64_t n, const int32_t* acc, const float* scales, float* out) {
  kernels::ScaleInt32Args s;
  s.m = m;
  s.n = n;
  s.acc = acc;
  s.ld_acc = n;
  s.w_scales = scales;
  s.out = out;
  s.ldout = n;
  return s;
}

// Times the grouped GEMM on each of `tiles` the device supports, printing " | label tile µs (TOPS)".
void print_grouped_tiles(kernels::GemmS8GroupedArgs q, std::initializer_list<kernels::GemmS8GroupedTile> tiles,
                         const char* label, int iterations) {
  const double ops = 2.0 * q.m * q.n * q.k;
  for (auto tile : tiles) {
    q.tile = tile;
    if (!kernels::gemm_s8_grouped_supported(q)) continue;
    const double us = time_us([&] { return kernels::launch_gemm_s8_grouped(q, nullptr); }, iterations);
    fmt::print(" | {}{} {:7.1f} us ({:4.0f} TOPS)", label, grouped_tile_name(tile), us, ops / us / 1e6);
  }
}

kernels::GemmS8GroupedArgs grouped_args(int64_t m, int64_t n, int64_t k, const int8_t* x, const int8_t* w,
                                        const float* scales, int64_t group, float* out) {
  kernels::GemmS8GroupedArgs q;
  q.m = m;
  q.n = n;
  q.k = k;
  q.x = x;
  q.ldx = k;
  q.w = w;
  q.ldw = k;
  q.w_scales = scales;
  q.group_size = group;
  q.out = out;
  q.ldout = n;
  return q;
}

constexpr auto kAllTiles = {kernels::GemmS8GroupedTile::kLarge, kernels::GemmS8GroupedTile::kSmall,
                            kernels::GemmS8GroupedTile::kWgmma};

void bench_gemm_s8(int64_t m, int64_t n, int64_t k, bool into_residual) {
  int8_t *x, *w;
  int32_t* acc;
  float *scales, *out;
  check_cuda(cudaMalloc(&x, m * k), "cudaMalloc");
  check_cuda(cudaMalloc(&w, n * k), "cudaMalloc");
  check_cuda(cudaMalloc(&acc, m * n * 4), "cudaMalloc");
  check_cuda(cudaMalloc(&out, m * n * 4), "cudaMalloc");
  check_cuda(cudaMalloc(&scales, n * 4), "cudaMalloc");
  check_cuda(cudaMemset(x, 3, m * k), "memset");
  check_cuda(cudaMemset(w, 5, n * k), "memset");
  check_cuda(cudaMemset(scales, 0, n * 4), "memset");
  check_cuda(cudaMemset(out, 0, m * n * 4), "memset");
  void* workspace;
  check_cuda(cudaMalloc(&workspace, 32 << 20), "cudaMalloc");
  kernels::Gemm gemm(workspace, 32 << 20);
  kernels::GemmArgs g = s8_gemm_args(m, n, k, k, x, w, acc);
  kernels::ScaleInt32Args s = scale_args(m, n, acc, scales, out);
  // in_proj writes a 16-bit buffer; out_proj adds into the fp32 residual (as the FP path does)
  s.out_type = into_residual ? kernels::ElementType::kF32 : kernels::ElementType::kBF16;
  s.accumulate = into_residual;
  const double gemm_us = time_us([&] {
    gemm.run(g, nullptr);
    return cudaSuccess;
  }, 50);
  const double scale_us = time_us([&] { return kernels::launch_scale_int32(s, nullptr); }, 50);
  kernels::GemmS8ScaledArgs f;
  f.m = m;
  f.n = n;
  f.k = k;
  f.x = x;
  f.ldx = k;
  f.w = w;
  f.ldw = k;
  f.w_scales = scales;
  f.out = out;
  f.ldout = n;
  f.accumulate = into_residual;
  const bool fused = kernels::gemm_s8_scaled_supported(f);
  const double fused_us = fused ? time_us([&] { return kernels::launch_gemm_s8_scaled(f, nullptr); }, 50) : 0;
  g.in_type = kernels::ElementType::kBF16;  // same buffers reinterpreted: only the time matters
  g.out_type = into_residual ? kernels::ElementType::kF32 : kernels::ElementType::kBF16;
  g.accumulate = into_residual;
  void* x16;
  void* w16;
  check_cuda(cudaMalloc(&x16, m * k * 2), "cudaMalloc");
  check_cuda(cudaMalloc(&w16, n * k * 2), "cudaMalloc");
  check_cuda(cudaMemset(x16, 0, m * k * 2), "memset");
  check_cuda(cudaMemset(w16, 0, n * k * 2), "memset");
  g.x = x16;
  g.w = w16;
  g.out = out;
  const double bf16_us = time_us([&] {
    gemm.run(g, nullptr);
    return cudaSuccess;
  }, 50);
  const double ops = 2.0 * m * n * k;
  fmt::print("w8a8 gemm m {:5d} n {:5d} k {:4d} {}: int8 {:7.1f} us ({:4.0f} TOPS) + scale {:6.1f} us = {:7.1f} us | "
             "bf16 {:7.1f} us ({:4.0f} TFLOP/s) | {:.2f}× bf16",
             m, n, k, into_residual ? "→ fp32 residual +=" : "→ bf16 buffer     ", gemm_us, ops / gemm_us / 1e6, scale_us, gemm_us + scale_us, bf16_us, ops / bf16_us / 1e6,
             bf16_us / (gemm_us + scale_us));
  if (fused)
    fmt::print(" | fused (fp32 out) {:7.1f} us ({:4.0f} TOPS), {:.2f}× bf16", fused_us, ops / fused_us / 1e6, bf16_us / fused_us);
  kernels::GemmS8GroupedArgs q = grouped_args(m, n, k, x, w, scales, k, out);  // one group a row, fp32 out
  q.accumulate = into_residual;
  print_grouped_tiles(q, kAllTiles, "", 50);
  fmt::print("\n");
  for (void* p : {static_cast<void*>(x), static_cast<void*>(w), static_cast<void*>(acc), static_cast<void*>(out),
                  static_cast<void*>(scales), workspace, x16, w16})
    cudaFree(p);
}

// in_proj of a W8A8 layer whose conv.in is int8, split (runtime/cuda_backend.cc
// split_in_proj_args): z|dt (n_float columns) in fp32 and x|B|C (n_int8) as int8 codes, against
// the one fused GEMM over all columns in fp32.
void bench_gemm_s8_split(int64_t m, int64_t n_float, int64_t n_int8, int64_t k) {
  std::mt19937 rng(9);
  const int64_t n = n_float + n_int8;
  int8_t *x, *w, *out8;
  float* out;
  check_cuda(cudaMalloc(&x, m * k), "cudaMalloc");
  check_cuda(cudaMalloc(&w, n * k), "cudaMalloc");
  check_cuda(cudaMalloc(&out, m * n * 4), "cudaMalloc");
  check_cuda(cudaMalloc(&out8, m * n_int8), "cudaMalloc");
  check_cuda(cudaMemset(x, 3, m * k), "memset");
  check_cuda(cudaMemset(w, 5, n * k), "memset");
  float* scales = device_random(n, 1e-4f, 2e-4f, rng);
  float* out_scales = device_random(n_int8, 0.01f, 0.02f, rng);
  kernels::GemmS8ScaledArgs whole;
  whole.m = m;
  whole.n = n;
  whole.k = k;
  whole.x = x;
  whole.ldx = k;
  whole.w = w;
  whole.ldw = k;
  whole.w_scales = scales;
  whole.out = out;
  whole.ldout = n;
  kernels::GemmS8ScaledArgs z_dt = whole, xbc = whole;
  z_dt.n = n_float;
  xbc.n = n_int8;
  xbc.w = w + n_float * k;
  xbc.w_scales = scales + n_float;
  xbc.out = out8;
  xbc.ldout = n_int8;
  xbc.out_type = kernels::ElementType::kS8;
  xbc.out_scales = out_scales;
  if (kernels::gemm_s8_scaled_supported(whole) && kernels::gemm_s8_scaled_supported(z_dt) &&
      kernels::gemm_s8_scaled_supported(xbc)) {
    const double whole_us = time_us([&] { return kernels::launch_gemm_s8_scaled(whole, nullptr); }, 50);
    const double z_dt_us = time_us([&] { return kernels::launch_gemm_s8_scaled(z_dt, nullptr); }, 50);
    const double xbc_us = time_us([&] { return kernels::launch_gemm_s8_scaled(xbc, nullptr); }, 50);
    const double both_us = time_us([&] {
      const cudaError_t e = kernels::launch_gemm_s8_scaled(z_dt, nullptr);
      return e != cudaSuccess ? e : kernels::launch_gemm_s8_scaled(xbc, nullptr);
    }, 50);
    fmt::print("w8a8 in_proj m {:5d} n {:5d} k {:4d}: fp32 out {:7.1f} us | split: {} fp32 {:7.1f} us + {} int8 {:7.1f} us, "
               "back to back {:7.1f} us\n",
               m, n, k, whole_us, n_float, z_dt_us, n_int8, xbc_us, both_us);
  }
  for (void* p : {static_cast<void*>(x), static_cast<void*>(w), static_cast<void*>(out), static_cast<void*>(out8),
                  static_cast<void*>(scales), static_cast<void*>(out_scales)})
    cudaFree(p);
}

// The W4A8 prefill projection (int4 weights, groups of `group` columns, fp32 out): the int4 → int8
// unpack plus the one-kernel grouped GEMM, against one cuBLASLt GEMM + chain step per group.
void bench_gemm_w4a8(int64_t m, int64_t n, int64_t k, int64_t group) {
  const int64_t groups = k / group;
  int8_t *x, *w8;
  uint8_t* w4;
  int32_t* acc;
  float *scales, *out, *chain;
  check_cuda(cudaMalloc(&x, m * k), "cudaMalloc");
  check_cuda(cudaMalloc(&w4, n * k / 2), "cudaMalloc");
  check_cuda(cudaMalloc(&w8, n * k), "cudaMalloc");
  check_cuda(cudaMalloc(&acc, m * n * 4), "cudaMalloc");
  check_cuda(cudaMalloc(&out, m * n * 4), "cudaMalloc");
  check_cuda(cudaMalloc(&chain, m * n * 4), "cudaMalloc");
  check_cuda(cudaMalloc(&scales, n * groups * 4), "cudaMalloc");
  check_cuda(cudaMemset(x, 3, m * k), "memset");
  check_cuda(cudaMemset(w4, 0x35, n * k / 2), "memset");
  check_cuda(cudaMemset(scales, 0, n * groups * 4), "memset");
  kernels::WeightUnpackArgs u;
  u.rows = n;
  u.cols = static_cast<int>(k);
  u.bits = 4;
  u.values = w4;
  u.out = w8;
  u.out_type = kernels::ElementType::kS8;
  const double unpack_us = time_us([&] { return kernels::launch_weight_unpack(u, nullptr); }, 50);
  kernels::GemmS8GroupedArgs q = grouped_args(m, n, k, x, w8, scales, group, out);
  fmt::print("w4a8 gemm m {:5d} n {:5d} k {:4d} group {}: unpack {:6.1f} us ({:4.0f} GB/s)", m, n, k, group, unpack_us,
             1.5 * n * k / unpack_us / 1e3);
  print_grouped_tiles(q, kAllTiles, "", 20);
  q.w = reinterpret_cast<const int8_t*>(w4);  // int4 read packed, no unpack
  q.w_bits = 4;
  print_grouped_tiles(q, {kernels::GemmS8GroupedTile::kLarge, kernels::GemmS8GroupedTile::kSmall, kernels::GemmS8GroupedTile::kNarrow},
                      "packed ", 20);
  void* workspace;
  check_cuda(cudaMalloc(&workspace, 32 << 20), "cudaMalloc");
  {
    kernels::Gemm gemm(workspace, 32 << 20);
    kernels::GemmArgs g = s8_gemm_args(m, n, k, group, x, w8, acc);
    kernels::ScaleInt32Args s = scale_args(m, n, acc, scales, out);
    s.groups = static_cast<int>(groups);
    s.chain = chain;
    const double per_group_us = time_us([&] {
      for (int group_index = 0; group_index < groups; ++group_index) {
        g.x = x + group_index * group;
        g.w = w8 + group_index * group;
        gemm.run(g, nullptr);
        s.group = group_index;
        if (const cudaError_t status = kernels::launch_scale_int32(s, nullptr); status != cudaSuccess) return status;
      }
      return cudaSuccess;
    }, 5);
    fmt::print(" | cuBLASLt per group + chain {:7.1f} us\n", per_group_us);
  }
  for (void* p : {static_cast<void*>(x), static_cast<void*>(w4), static_cast<void*>(w8), static_cast<void*>(acc),
                  static_cast<void*>(out), static_cast<void*>(chain), static_cast<void*>(scales), workspace})
    cudaFree(p);
}

// The W4A16 projection above the decode GEMV's rows (int4 weights, groups of `group` columns, fp16
// rows, fp32 out): CUTLASS's mixed-input GEMM (kernels/gemm_w4a16.h) against the expansion to fp16
// plus a cuBLASLt fp16 GEMM, the path it replaces.
void bench_gemm_w4a16(int64_t m, int64_t n, int64_t k, int64_t group) {
  const int64_t groups = k / group;
  void *x, *w16, *workspace, *scales_t;
  uint8_t* w4;
  float *scales, *out;
  check_cuda(cudaMalloc(&x, m * k * 2), "cudaMalloc");
  check_cuda(cudaMalloc(&w4, n * k / 2), "cudaMalloc");
  check_cuda(cudaMalloc(&w16, n * k * 2), "cudaMalloc");
  check_cuda(cudaMalloc(&out, m * n * 4), "cudaMalloc");
  check_cuda(cudaMalloc(&scales, n * groups * 4), "cudaMalloc");
  check_cuda(cudaMalloc(&scales_t, n * groups * 4), "cudaMalloc");
  check_cuda(cudaMalloc(&workspace, 32 << 20), "cudaMalloc");
  check_cuda(cudaMemset(x, 0x1c, m * k * 2), "memset");
  check_cuda(cudaMemset(w4, 0x35, n * k / 2), "memset");
  check_cuda(cudaMemset(scales, 0x3c, n * groups * 4), "memset");
  kernels::GemmW4A16Args a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.x = x;
  a.ldx = k;
  a.w = w4;
  a.w_scales = scales;
  a.group_size = static_cast<int>(group);
  a.out = out;
  a.ldout = n;
  a.workspace = scales_t;
  double mixed_us[3] = {};
  const kernels::GemmW4A16Tile tiles[3] = {kernels::GemmW4A16Tile::k128x128, kernels::GemmW4A16Tile::k128x256,
                                           kernels::GemmW4A16Tile::k64x128};
  for (int t = 0; t < 3; ++t) {
    a.tile = tiles[t];
    if (kernels::gemm_w4a16_supported(a)) mixed_us[t] = time_us([&] { return kernels::launch_gemm_w4a16(a, nullptr); }, 20);
  }
  kernels::WeightUnpackArgs u;
  u.rows = n;
  u.cols = static_cast<int>(k);
  u.bits = 4;
  u.values = w4;
  u.scales = scales;
  u.group_size = static_cast<int>(group);
  u.out = w16;
  u.out_type = kernels::ElementType::kF16;
  const double unpack_us = time_us([&] { return kernels::launch_weight_unpack(u, nullptr); }, 20);
  kernels::Gemm gemm(workspace, 32 << 20);
  kernels::GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.in_type = kernels::ElementType::kF16;
  g.x = x;
  g.ldx = k;
  g.w = w16;
  g.out = out;
  g.out_type = kernels::ElementType::kF32;
  g.ldout = n;
  const double gemm_us = time_us([&] {
    gemm.run(g, nullptr);
    return cudaSuccess;
  }, 20);
  fmt::print("w4a16 gemm m {:5d} n {:5d} k {:4d} group {}: CUTLASS mixed input 128x128 {:7.1f}, 128x256 {:7.1f}, "
             "64x128 {:7.1f} us | unpack {:6.1f} + cuBLASLt fp16 {:7.1f} = {:7.1f} us\n",
             m, n, k, group, mixed_us[0], mixed_us[1], mixed_us[2], unpack_us, gemm_us, unpack_us + gemm_us);
  for (void* p : {x, static_cast<void*>(w4), w16, static_cast<void*>(out), static_cast<void*>(scales), scales_t, workspace})
    cudaFree(p);
}

void bench_conv_decode(int batch, double bandwidth) {
  std::mt19937 rng(5);
  using bf16 = __nv_bfloat16;
  const int channels = 5376, in_dim = 10576;
  kernels::CausalConv1dArgs a;
  a.batch = batch;
  a.seqlen = 1;
  a.channels = channels;
  a.width = 4;
  a.in = reinterpret_cast<bf16*>(device_random(size_t(batch) * in_dim / 2 + 8, -1, 1, rng));
  a.in_stride = in_dim;
  a.weight = device_random(size_t(channels) * 4, -1, 1, rng);
  a.bias = device_random(channels, -1, 1, rng);
  a.state = reinterpret_cast<bf16*>(device_random(size_t(batch) * channels * 3 / 2 + 8, -1, 1, rng));
  a.out = reinterpret_cast<bf16*>(device_random(size_t(batch) * channels / 2 + 8, -1, 1, rng));
  const double us = time_us([&] { return kernels::launch_causal_conv1d(a, nullptr); });
  fmt::print("causal_conv1d     batch {:4d} decode step:  {:8.2f} us\n", batch, us);
  (void)bandwidth;
}

// The W8A8 prefill conv of mamba2-2.7b: fp32 in and out, int8 formats on both (as the quantized
// backend runs it), against the bytes it must move.
void bench_conv_prefill(int seqlen, double bandwidth) {
  std::mt19937 rng(6);
  const int channels = 5376, in_dim = 10576;
  kernels::CausalConv1dArgs a;
  a.batch = 1;
  a.seqlen = seqlen;
  a.channels = channels;
  a.width = 4;
  a.in_type = a.out_type = kernels::ElementType::kF32;
  a.in = device_random(size_t(seqlen) * in_dim, -1, 1, rng);
  a.in_stride = in_dim;
  a.weight = device_random(size_t(channels) * 4, -1, 1, rng);
  a.bias = device_random(channels, -1, 1, rng);
  a.state = device_random(size_t(channels) * 3, -1, 1, rng);
  a.out = device_random(size_t(seqlen) * channels, -1, 1, rng);
  a.in_formats = device_random(channels, 0.01f, 0.02f, rng);
  a.out_formats = device_random(channels, 0.01f, 0.02f, rng);
  const double bytes = 2.0 * seqlen * channels * sizeof(float);
  for (int tile : {0, 64, 32, 16}) {
    a.tile_tokens = tile;
    const double us = time_us([&] { return kernels::launch_causal_conv1d(a, nullptr); });
    fmt::print("causal_conv1d     {:5d} tokens fp32, int8 formats, tile {:>4}: {:8.2f} us  {:7.1f} GB/s  ({:.0f}% of copy bandwidth)\n",
               seqlen, tile ? std::to_string(tile) : "auto", us, bytes / us / 1e3, 100 * bytes / us / 1e3 / bandwidth);
  }
  // The SSDi8 prefill's conv: fp16 x (its fp16 format) and int8 B|C rows, each plan specialized
  // or through the per-element dispatch.
  const int x_channels = 5120;
  std::vector<float> codes(channels);
  for (int c = 0; c < channels; ++c) codes[c] = c < x_channels ? -1.f : 0.01f;
  float* out_codes = device_random(channels, 0, 0, rng);
  check_cuda(cudaMemcpy(out_codes, codes.data(), channels * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  a.out = nullptr;
  a.out_formats = out_codes;
  a.part_count = 2;
  a.parts[0] = {device_random(size_t(seqlen) * x_channels / 2, -1, 1, rng), 0, x_channels, kernels::ElementType::kF16};
  a.parts[1] = {device_random(size_t(seqlen) * (channels - x_channels) / 4, -1, 1, rng), x_channels,
                channels - x_channels, kernels::ElementType::kS8};
  const double part_bytes = double(seqlen) * (channels * sizeof(float) + x_channels * 2 + (channels - x_channels));
  for (int tile : {0, 64, 32, 16})
    for (bool specialize : {true, false}) {
      if (!specialize && tile) continue;
      a.tile_tokens = tile;
      a.specialize = specialize;
      const double us = time_us([&] { return kernels::launch_causal_conv1d(a, nullptr); });
      fmt::print("causal_conv1d     {:5d} tokens fp32 → fp16 x, int8 B|C, {:>11}, tile {:>4}: {:8.2f} us  {:7.1f} GB/s  ({:.0f}% of copy bandwidth)\n",
                 seqlen, specialize ? "specialized" : "generic", tile ? std::to_string(tile) : "auto", us,
                 part_bytes / us / 1e3, 100 * part_bytes / us / 1e3 / bandwidth);
    }
  // The same from int8 codes (a split in_proj's output, rows of `channels` bytes).
  a.in = device_random(size_t(seqlen) * channels / 4, -1, 1, rng);
  a.in_stride = channels;
  a.in_type = kernels::ElementType::kS8;
  a.specialize = true;
  const double code_bytes = double(seqlen) * (channels + x_channels * 2 + (channels - x_channels));
  for (int tile : {0, 64, 32, 16}) {
    a.tile_tokens = tile;
    const double us = time_us([&] { return kernels::launch_causal_conv1d(a, nullptr); });
    fmt::print("causal_conv1d     {:5d} tokens int8 codes → fp16 x, int8 B|C, tile {:>4}: {:8.2f} us  {:7.1f} GB/s  ({:.0f}% of copy bandwidth)\n",
               seqlen, tile ? std::to_string(tile) : "auto", us, code_bytes / us / 1e3, 100 * code_bytes / us / 1e3 / bandwidth);
  }
}

// out_proj's input: gated norm + Hadamard + int8, one block a row against a cluster and against
// the row in one block's registers (kRegisters, which takes H_K's host copy).
void bench_hadamard_quant(int rows, int n, int base_order, int groups) {
  std::mt19937 rng(8);
  kernels::HadamardQuantArgs a;
  a.rows = rows;
  a.n = n;
  a.y = device_random(size_t(rows) * n, -1, 1, rng);
  a.ldy = n;
  a.z = device_random(size_t(rows) * n, -1, 1, rng);
  a.z_stride = n;
  a.norm_weight = device_random(n, 0.5f, 1.5f, rng);
  a.group_size = n / groups;
  a.base_order = base_order;
  const std::vector<int8_t> signs = hadamard_base_matrix(base_order);  // H_K: the unrolled kernels take only it
  int8_t* d_signs = nullptr;
  check_cuda(cudaMalloc(&d_signs, signs.size()), "cudaMalloc");
  check_cuda(cudaMemcpy(d_signs, signs.data(), signs.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  a.base_matrix = base_order > 1 ? d_signs : nullptr;
  a.normalize = 1.f / std::sqrt(float(n));
  check_cuda(cudaMalloc(&a.out, size_t(rows) * n), "cudaMalloc");
  a.out_scale = 0.02f;
  std::string line = fmt::format("hadamard_quant    rows {:3d} n {:5d} (K {:2d}, {} groups):", rows, n, base_order, groups);
  for (auto schedule : {kernels::HadamardQuantSchedule::kRowPerBlock, kernels::HadamardQuantSchedule::kCluster}) {
    a.schedule = schedule;
    const bool ok = kernels::hadamard_quant_supported(a);
    const double us = ok ? time_us([&] { return kernels::launch_hadamard_quant(a, nullptr); }) : NAN;
    line += fmt::format("  {} {:6.2f} us", schedule == kernels::HadamardQuantSchedule::kCluster ? "cluster" : "row", us);
    if (schedule == kernels::HadamardQuantSchedule::kRowPerBlock && base_order > 1) {  // the unrolled mix
      a.base_matrix_host = signs.data();
      line += fmt::format("  row, unrolled mix {:6.2f} us", time_us([&] { return kernels::launch_hadamard_quant(a, nullptr); }));
      a.base_matrix_host = nullptr;
    }
  }
  a.schedule = kernels::HadamardQuantSchedule::kRegisters;
  a.base_matrix_host = signs.data();
  const double registers_us =
      kernels::hadamard_quant_supported(a) ? time_us([&] { return kernels::launch_hadamard_quant(a, nullptr); }) : NAN;
  line += fmt::format("  registers {:6.2f} us", registers_us);
  fmt::print("{}\n", line);
}

// The W8A8 / W4A8 (groups of 128) decode projections as a model step sees them: weights not in
// L2 (each launch takes the next of enough copies to fill 256 MB), in_proj with the norm
// prologue, every schedule of the kind.
void bench_qgemv_cold(kernels::QgemvKind kind, int m, int n, int k, bool norm_prologue, double bandwidth) {
  std::mt19937 rng(12);
  const bool int4 = kind == kernels::QgemvKind::kW4A8;
  const int group_size = 128;
  const size_t bytes = int4 ? size_t(n) * k / 2 : size_t(n) * k;
  const int copies = static_cast<int>(std::max<size_t>(2, (size_t(256) << 20) / bytes + 1));
  std::vector<void*> weights{device_random(bytes / 4, -1, 1, rng)};  // one random matrix, copied
  for (int i = 1; i < copies; ++i) {
    check_cuda(cudaMalloc(&weights.emplace_back(), bytes), "cudaMalloc");
    check_cuda(cudaMemcpy(weights.back(), weights[0], bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
  }
  kernels::QgemvArgs a;
  a.kind = kind;
  a.m = m;
  a.n = n;
  a.k = k;
  a.x_int8 = reinterpret_cast<int8_t*>(device_random(size_t(m) * k / 4, -1, 1, rng));
  a.ldx = k;
  a.x_scale = 0.02f;
  a.group_size = int4 ? group_size : 0;
  a.w_scales = device_random(int4 ? size_t(n) * (k / group_size) : size_t(n), 0.001f, 0.01f, rng);
  a.out = device_random(size_t(m) * n, -1, 1, rng);
  a.ldout = n;
  a.w = weights[0];
  if (norm_prologue) {
    a.norm_residual = device_random(size_t(m) * k, -1, 1, rng);
    a.norm_weight = device_random(k, 0.5f, 1.5f, rng);
  }
  std::string line = fmt::format("qgemv {} cold m {} {:5d} × {:4d}{}:", int4 ? "w4a8" : "w8a8", m, n, k,
                                 norm_prologue ? " (norm prologue)" : "");
  using S = kernels::QgemvSchedule;
  for (auto [schedule, name] : {std::pair{S::kSplitGroups, "warp"}, std::pair{S::kSplitK, "splitk"},
                                std::pair{S::kQuad, "quad"}, std::pair{S::kStream, "stream"},
                                std::pair{S::kLaneGroup, "lane group"}}) {
    a.schedule = schedule;
    if (!kernels::qgemv_supported(a)) continue;
    int next = 0;
    const double us = time_us([&] {
      a.w = weights[next++ % copies];
      return kernels::launch_qgemv(a, nullptr);
    });
    line += fmt::format(" | {} {:6.2f} us {:5.0f} GB/s ({:3.0f}%)", name, us, bytes / us / 1e3, 100 * bytes / us / 1e3 / bandwidth);
  }
  fmt::print("{}\n", line);
  for (void* w : weights) cudaFree(w);
  cudaFree(const_cast<int8_t*>(a.x_int8));
  cudaFree(const_cast<float*>(a.w_scales));
  cudaFree(a.out);
  if (norm_prologue) {
    cudaFree(const_cast<float*>(a.norm_residual));
    cudaFree(const_cast<float*>(a.norm_weight));
  }
}

// in_proj's input at decode: add_rmsnorm (int8 out) then the GEMV, against the GEMV's norm prologue.
void bench_norm_qgemv(int m, kernels::QgemvKind kind) {
  std::mt19937 rng(9);
  const int n = 10576, k = 2560;
  kernels::AddRmsNormArgs norm;
  norm.rows = m;
  norm.dim = k;
  norm.residual = device_random(size_t(m) * k, -1, 1, rng);
  norm.weight = device_random(k, 0.5f, 1.5f, rng);
  check_cuda(cudaMalloc(&norm.out, size_t(m) * k), "cudaMalloc");
  norm.out_type = kernels::ElementType::kS8;
  norm.out_scale = 0.02f;
  kernels::QgemvArgs a;
  a.kind = kind;
  a.m = m;
  a.n = n;
  a.k = k;
  a.x_int8 = static_cast<int8_t*>(norm.out);
  a.ldx = k;
  a.x_scale = norm.out_scale;
  a.w = device_random(size_t(n) * k / 4, -1, 1, rng);
  a.w_scales = device_random(size_t(n) * (k / 128), 0.001f, 0.01f, rng);
  a.group_size = 128;
  a.out = device_random(size_t(m) * n, -1, 1, rng);
  a.ldout = n;
  const double separate = time_us([&] {
    const cudaError_t status = kernels::launch_add_rmsnorm(norm, nullptr);
    return status != cudaSuccess ? status : kernels::launch_qgemv(a, nullptr);
  });
  a.norm_residual = norm.residual;
  a.norm_weight = norm.weight;
  const double fused = time_us([&] { return kernels::launch_qgemv(a, nullptr); });
  fmt::print("norm + {} in_proj m {:2d}: add_rmsnorm then qgemv {:6.2f} us, norm in the qgemv prologue {:6.2f} us\n",
             kind == kernels::QgemvKind::kW8A8 ? "W8A8" : "W4A8", m, separate, fused);
}

}  // namespace
}  // namespace ssdq

// Sections: state, long, norm, gemv, qgemv, hadamard, gemm (w8a8 and w4a8), w4a16, conv, decode; the arguments
// pick some (none: all).
int main(int argc, char** argv) {
  const auto want = [&](const char* section) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; ++i)
      if (std::strcmp(argv[i], section) == 0) return true;
    return false;
  };
  cudaDeviceProp prop{};
  ssdq::check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const double bandwidth = ssdq::copy_bandwidth_gbs();
  fmt::print("device {} (sm_{}{}), device-to-device copy {:.0f} GB/s\n", prop.name, prop.major, prop.minor, bandwidth);
  if (want("state")) {
    for (int batch : {1, 8, 32, 128}) ssdq::bench_state_update(batch, 80, 1, bandwidth);  // mamba2-2.7b
    for (int batch : {1, 32, 128}) ssdq::bench_state_update(batch, 80, 1, bandwidth, true);
    ssdq::bench_state_update(1, 128, 8, bandwidth);  // 8B-like
    for (int batch : {1, 8, 32}) ssdq::bench_conv_step(batch, 80, 1);
    ssdq::bench_conv_step(1, 128, 8);
  }
  if (want("window")) {
    ssdq::bench_window_state_update(80, 1);   // mamba2-2.7b
    ssdq::bench_window_state_update(128, 8);  // 8B-like
  }
  if (want("long")) {
    ssdq::bench_long_recurrence(16, 80, 1, 2048);   // mamba2-2.7b, a calibration batch of 16 × 2048
    ssdq::bench_long_recurrence(16, 128, 8, 2048);  // 8B-like
    ssdq::bench_long_recurrence(4, 80, 1, 2048);    // 320 blocks: the long kernel; an upper bound of it at batch 1
    ssdq::bench_long_recurrence(1, 80, 1, 2048);    // a batch-1 prefill (the row-a-warp kernel)
  }
  if (want("norm"))
    for (int rows : {1, 32, 2048, 16384}) ssdq::bench_add_rmsnorm(rows, 2560, bandwidth);
  if (want("gemv"))
    for (const auto [d_model, in_dim, groups] : {std::tuple{2560, 10576, 1}, std::tuple{4096, 18560, 8}})  // 2.7b, 8B-like
      for (int m : {1, 2, 4, 6, 8, 14, 16}) ssdq::bench_gemv(m, bandwidth, d_model, in_dim, groups);
  if (want("qgemv")) {
    for (int m : {1, 4, 8, 16}) ssdq::bench_qgemv(m, bandwidth);
    for (int m : {1, 4}) {  // mamba2-2.7b and 8B-like in_proj / out_proj
      for (auto kind : {ssdq::kernels::QgemvKind::kW8A8, ssdq::kernels::QgemvKind::kW4A8}) {
        ssdq::bench_qgemv_cold(kind, m, 10576, 2560, true, bandwidth);
        ssdq::bench_qgemv_cold(kind, m, 2560, 5120, false, bandwidth);
        ssdq::bench_qgemv_cold(kind, m, 18560, 4096, true, bandwidth);
        ssdq::bench_qgemv_cold(kind, m, 4096, 8192, false, bandwidth);
      }
    }
    for (int m : {1, 4, 16})
      for (auto kind : {ssdq::kernels::QgemvKind::kW8A8, ssdq::kernels::QgemvKind::kW4A8}) ssdq::bench_norm_qgemv(m, kind);
  }
  if (want("hadamard")) {
    for (int rows : {1, 4, 16, 32, 2048}) ssdq::bench_hadamard_quant(rows, 5120, 20, 1);  // mamba2-2.7b
    for (int rows : {1, 16, 2048}) ssdq::bench_hadamard_quant(rows, 8192, 1, 8);         // 8B-like
  }
  if (want("gemm")) {
    for (int64_t m : {4, 8, 16, 32, 64, 2048, 16384}) {  // few rows (against qgemv above); prefill of 1 × 2048 and 8 × 2048 tokens
      ssdq::bench_gemm_s8(m, 10576, 2560, false);  // in_proj
      ssdq::bench_gemm_s8(m, 2560, 5120, true);    // out_proj
    }
    ssdq::bench_gemm_s8(2048, 18560, 4096, false);  // 8B-like in_proj and out_proj, 2048 tokens
    ssdq::bench_gemm_s8(2048, 4096, 8192, true);
    ssdq::bench_gemm_s8_split(2048, 5120 + 80, 5376, 2560);  // in_proj split: 2.7b, 8B-like
    ssdq::bench_gemm_s8_split(2048, 8192 + 128, 10240, 4096);
    for (int64_t m : {4, 8, 16, 32, 128, 2048}) {  // W4A8 (groups of 128): decode at batch 4 to 16 (against qgemv), 32, 128, prefill
      ssdq::bench_gemm_w4a8(m, 10576, 2560, 128);
      ssdq::bench_gemm_w4a8(m, 2560, 5120, 128);
    }
    ssdq::bench_gemm_w4a8(2048, 18560, 4096, 128);
  }
  if (want("w4a16")) {
    for (int64_t m : {32, 128, 2048}) {  // decode at batch 32 and 128, prefill of 2048 tokens (2.7b, then 8B-like)
      ssdq::bench_gemm_w4a16(m, 10576, 2560, 128);
      ssdq::bench_gemm_w4a16(m, 2560, 5120, 128);
      ssdq::bench_gemm_w4a16(m, 18560, 4096, 128);
      ssdq::bench_gemm_w4a16(m, 4096, 8192, 128);
    }
  }
  if (want("conv")) {
    for (int b : {1, 8}) ssdq::bench_conv_decode(b, bandwidth);
    for (int seqlen : {2048, 16384}) ssdq::bench_conv_prefill(seqlen, bandwidth);
  }
  if (want("decode"))
    for (int m : {1, 8, 32}) {  // one decode step's projections of mamba2-2.7b (per layer) and its lm_head
      double total = 0;
      ssdq::bench_gemm(m, 10576, 2560, bandwidth, &total);
      ssdq::bench_gemm(m, 2560, 5120, bandwidth, &total);
      fmt::print("  → 64 layers of in_proj + out_proj at m = {}: {:.3f} ms\n", m, 64 * total / 1e3);
      ssdq::bench_gemm(m, 50288, 2560, bandwidth, &total);
    }
  return 0;
}
