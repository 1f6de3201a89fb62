// Times each stage of the chunked SSD prefill (kernels/ssd_chunk_scan.h) on its own and the whole
// launch, on Mamba-2 shapes, and prints achieved TFLOP/s and GB/s against each stage's tensor-core
// FLOPs and minimal bytes, then each kernel's registers, shared/local memory and occupancy.
// A benchmark: it measures, it asserts nothing. Usage: ssd_stage_bench [--quick] (default plan only).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/fill_random.h"
#include "kernels/ssd_chunk_scan.h"
#include "kernels/ssd_chunk_stages.cuh"

namespace ssdq {
namespace {

using kernels::check_cuda;
namespace sc = kernels::ssd_chunk;

constexpr int kWarmup = 3;
constexpr int kTimed = 20;
// H200 reference rates for the floor column (cuBLASLt bf16 GEMM, device-to-device copy).
constexpr double kRefTflops = 790.0;
constexpr double kRefGbs = 4200.0;

struct Shape {
  int batch, seqlen, heads, headdim, groups, dstate, chunk;
  std::string label() const {
    return fmt::format("b{} T{} H{} P{} N{} G{} L{}", batch, seqlen, heads, headdim, dstate, groups, chunk);
  }
};

// FLOPs (tensor-core multiply-adds × 2) and minimal HBM bytes of one launch of a stage.
struct Cost {
  double flops = 0, bytes = 0;
};

struct Costs {
  Cost cumsum, bmm, state, scan, whole;
};

Costs model_costs(const Shape& s) {
  const double B = s.batch, T = s.seqlen, H = s.heads, P = s.headdim, G = s.groups, N = s.dstate;
  const int nchunks = (s.seqlen + s.chunk - 1) / s.chunk;
  const double Tp = double(nchunks) * s.chunk;  // padded length: workspace rows
  // 64x64 tiles on and below the diagonal holding valid rows, and Σ over those rows' tiles of
  // the columns they read (for the CB·x products of ChunkScan).
  double pairs = 0, scan_tile_cols = 0;
  for (int c = 0; c < nchunks; ++c) {
    const int valid = std::min(s.chunk, s.seqlen - c * s.chunk);
    for (int tt = 0; tt * 64 < valid; ++tt) {
      pairs += tt + 1;
      scan_tile_cols += 64.0 * (tt + 1);
    }
  }
  const double x_bytes = B * T * H * P * 2, bc_bytes = B * T * G * N * 2, dtcs_bytes = 2 * B * H * Tp * 4;
  const double cb_bytes = B * G * pairs * 64 * 64 * 4, states_bytes = B * nchunks * H * P * N * 2;
  const double final_state_bytes = B * H * P * N * 4;
  Costs c;
  c.cumsum = {0, B * T * H * 2 + dtcs_bytes};
  c.bmm = {2 * B * G * pairs * 64 * 64 * N, 2 * bc_bytes + cb_bytes};
  c.state = {2 * B * T * H * P * N, x_bytes + bc_bytes + dtcs_bytes + 2 * final_state_bytes + states_bytes};
  c.scan = {2 * B * T * H * P * N + 2 * B * H * 64 * scan_tile_cols * P,
            x_bytes + bc_bytes + cb_bytes + states_bytes + dtcs_bytes + x_bytes};
  // End to end: x, B, C, dt in, y out, the fp32 state in and out; nothing through the workspace.
  c.whole = {c.bmm.flops + c.state.flops + c.scan.flops,
             x_bytes + 2 * bc_bytes + B * T * H * 2 + x_bytes + 2 * final_state_bytes};
  return c;
}

template <typename T>
T* device_alloc(size_t count) {
  T* ptr = nullptr;
  check_cuda(cudaMalloc(&ptr, count * sizeof(T)), "cudaMalloc");
  return ptr;
}

void fill(void* out, int64_t count, kernels::ElementType type, float center, float spread, uint64_t seed) {
  kernels::FillRandomArgs f;
  f.count = count;
  f.seed = seed;
  f.center = center;
  f.spread = spread;
  f.type = type;
  f.out = out;
  check_cuda(kernels::launch_fill_random(f, nullptr), "fill_random");
}

// Inputs in the mixer's layout: x, B, C side by side in one conv row per token; dt_raw [rows, heads].
struct Buffers {
  __nv_bfloat16 *conv = nullptr, *dt_raw = nullptr, *y = nullptr;
  float *dt_bias = nullptr, *A = nullptr, *D = nullptr, *state = nullptr;
  void* workspace = nullptr;
  kernels::SsdChunkScanArgs args;

  explicit Buffers(const Shape& s) {
    using kernels::ElementType;
    const int64_t rows = int64_t(s.batch) * s.seqlen;
    const int64_t xw = int64_t(s.heads) * s.headdim, gn = int64_t(s.groups) * s.dstate;
    const int64_t conv_stride = xw + 2 * gn;
    conv = device_alloc<__nv_bfloat16>(rows * conv_stride);
    dt_raw = device_alloc<__nv_bfloat16>(rows * s.heads);
    y = device_alloc<__nv_bfloat16>(rows * xw);
    dt_bias = device_alloc<float>(s.heads);
    A = device_alloc<float>(s.heads);
    D = device_alloc<float>(s.heads);
    state = device_alloc<float>(size_t(s.batch) * xw * s.dstate);
    fill(conv, rows * conv_stride, ElementType::kBF16, 0.f, 1.f, 1);
    fill(dt_raw, rows * s.heads, ElementType::kBF16, -2.5f, 1.5f, 2);  // softplus: dt ≈ 0.02 … 0.3
    fill(dt_bias, s.heads, ElementType::kF32, 0.f, 0.5f, 3);
    fill(A, s.heads, ElementType::kF32, -4.25f, 3.75f, 4);  // [-8, -0.5]
    fill(D, s.heads, ElementType::kF32, 1.f, 0.5f, 5);
    fill(state, int64_t(s.batch) * xw * s.dstate, ElementType::kF32, 0.f, 1.f, 6);
    args.batch = s.batch;
    args.seqlen = s.seqlen;
    args.heads = s.heads;
    args.headdim = s.headdim;
    args.groups = s.groups;
    args.dstate = s.dstate;
    args.chunk = s.chunk;
    args.x = conv;
    args.x_row_stride = conv_stride;
    args.B = conv + xw;
    args.C = conv + xw + gn;
    args.bc_row_stride = conv_stride;
    args.dt_raw = dt_raw;
    args.dt_row_stride = s.heads;
    args.dt_bias = dt_bias;
    args.A = A;
    args.D = D;
    args.state = state;
    args.y = y;
    const size_t ws = kernels::ssd_chunk_scan_workspace_bytes(args);
    check_cuda(cudaMalloc(&workspace, ws), "cudaMalloc workspace");
    args.workspace = workspace;
    check_cuda(cudaDeviceSynchronize(), "fill");
  }
  ~Buffers() {
    for (void* p : {static_cast<void*>(conv), static_cast<void*>(dt_raw), static_cast<void*>(y),
                    static_cast<void*>(dt_bias), static_cast<void*>(A), static_cast<void*>(D),
                    static_cast<void*>(state), workspace})
      cudaFree(p);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
};

// Median of kTimed single launches, each between its own pair of events. The queue is filled
// first (warm-up launches of the whole op) so that host launch overhead never shows as a gap.
template <typename Launch>
double median_ms(const kernels::SsdChunkScanArgs& args, Launch launch) {
  for (int i = 0; i < kWarmup; ++i) {
    check_cuda(kernels::launch_ssd_chunk_scan(args, nullptr), "warm-up");
    check_cuda(launch(), "warm-up stage");
  }
  std::vector<cudaEvent_t> events(2 * kTimed);
  for (cudaEvent_t& e : events) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
  for (int i = 0; i < kTimed; ++i) {
    check_cuda(cudaEventRecord(events[2 * i]), "cudaEventRecord");
    check_cuda(launch(), "timed launch");
    check_cuda(cudaEventRecord(events[2 * i + 1]), "cudaEventRecord");
  }
  check_cuda(cudaEventSynchronize(events.back()), "cudaEventSynchronize");
  std::vector<float> ms(kTimed);
  for (int i = 0; i < kTimed; ++i) check_cuda(cudaEventElapsedTime(&ms[i], events[2 * i], events[2 * i + 1]), "elapsed");
  for (cudaEvent_t& e : events) cudaEventDestroy(e);
  std::nth_element(ms.begin(), ms.begin() + kTimed / 2, ms.end());
  return ms[kTimed / 2];
}

struct KernelRow {
  std::string shape, stage, config;
  cudaFuncAttributes attr{};
  size_t dynamic_smem = 0;
  int blocks_per_sm = 0;
  int64_t grid_blocks = 0;
};

std::vector<KernelRow> kernel_rows;  // printed after the timings
int multiprocessors = 0;

KernelRow describe(const std::string& shape, const std::string& config, const sc::StageLaunch& stage) {
  KernelRow row;
  row.shape = shape;
  row.stage = stage.name;
  row.config = config;
  check_cuda(cudaFuncGetAttributes(&row.attr, stage.kernel), "cudaFuncGetAttributes");
  if (stage.smem > 0)
    check_cuda(cudaFuncSetAttribute(stage.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(stage.smem)),
               "cudaFuncSetAttribute");
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&row.blocks_per_sm, stage.kernel,
                                                           int(stage.block.x * stage.block.y * stage.block.z),
                                                           stage.smem),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  row.dynamic_smem = stage.smem;
  row.grid_blocks = int64_t(stage.grid.x) * stage.grid.y * stage.grid.z;
  return row;
}

void print_timing(const std::string& shape, const std::string& stage, const std::string& config, double ms,
                  const Cost& cost) {
  const double floor_ms = std::max(cost.flops / (kRefTflops * 1e9), cost.bytes / (kRefGbs * 1e6));
  const std::string tflops = cost.flops > 0 ? fmt::format("{:8.1f}", cost.flops / ms / 1e9) : fmt::format("{:>8}", "-");
  fmt::print("{:<30} {:<20} {:<16} {:9.4f} {} {:9.1f} {:9.4f} {:7.1f}x\n", shape, stage, config, ms, tflops,
             cost.bytes / ms / 1e6, floor_ms, ms / floor_ms);
}

void bench_shape(const Shape& s, bool variants) {
  Buffers buf(s);
  sc::Plan plan;
  if (!sc::make_plan(buf.args, &plan)) {
    fmt::print("{:<30} unsupported on this device\n", s.label());
    return;
  }
  const Costs costs = model_costs(s);
  const std::string shape = s.label();
  auto time_stage = [&](const sc::Plan& p, const sc::StageLaunch& stage) {
    return median_ms(buf.args, [&] { return sc::launch_stage(stage, p, nullptr); });
  };
  const std::string base_config = fmt::format("k{} rows{}", plan.heads_per_block, plan.state_rows);

  const double whole = median_ms(buf.args, [&] { return kernels::launch_ssd_chunk_scan(buf.args, nullptr); });
  double stage_sum = 0;
  const sc::StageLaunch stages[] = {sc::cumsum_stage(plan), sc::bmm_stage(plan), sc::state_stage(plan),
                                    sc::output_stage(plan)};
  const Cost* stage_costs[] = {&costs.cumsum, &costs.bmm, &costs.state, &costs.scan};
  for (int i = 0; i < 4; ++i) {
    const double ms = time_stage(plan, stages[i]);
    stage_sum += ms;
    print_timing(shape, stages[i].name, base_config + " *", ms, *stage_costs[i]);
    kernel_rows.push_back(describe(shape, base_config + " *", stages[i]));
  }
  print_timing(shape, "sum of stages", base_config + " *", stage_sum, costs.whole);
  print_timing(shape, "whole launch", base_config + " *", whole, costs.whole);
  if (!variants) return;

  // The other ChunkState row counts and ChunkScan heads per block the plan could have picked.
  for (int rows : {32, 64, 128}) {
    if (rows == plan.state_rows || !sc::state_rows_valid(buf.args, rows)) continue;
    sc::Plan p = plan;
    p.state_rows = rows;
    const sc::StageLaunch stage = sc::state_stage(p);
    print_timing(shape, stage.name, fmt::format("rows{}", rows), time_stage(p, stage), costs.state);
    kernel_rows.push_back(describe(shape, fmt::format("rows{}", rows), stage));
  }
  for (int k = 1; k <= sc::kMaxHeadsPerBlock; k *= 2) {
    if (k == plan.heads_per_block || plan.heads_per_group % k != 0) continue;
    sc::Plan p = plan;
    p.heads_per_block = k;
    p.head_blocks = s.heads / k;
    const sc::StageLaunch stage = sc::output_stage(p);
    print_timing(shape, stage.name, fmt::format("k{}", k), time_stage(p, stage), costs.scan);
    kernel_rows.push_back(describe(shape, fmt::format("k{}", k), stage));
  }
}

double copy_bandwidth_gbs() {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  check_cuda(cudaMalloc(&a, bytes), "cudaMalloc");
  check_cuda(cudaMalloc(&b, bytes), "cudaMalloc");
  for (int i = 0; i < 3; ++i) check_cuda(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "copy");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < 10; ++i) check_cuda(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "copy");
  cudaEventRecord(stop);
  check_cuda(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes * 10 / (ms * 1e6);
}

int run(bool quick) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  multiprocessors = prop.multiProcessorCount;
  fmt::print("device: {} (sm_{}{}, {} SMs), device-to-device copy {:.0f} GB/s (read + write)\n", prop.name,
             prop.major, prop.minor, prop.multiProcessorCount, copy_bandwidth_gbs());
  fmt::print("median of {} single launches after warm-up; '*' = the plan launch_ssd_chunk_scan picks "
             "(k heads per ChunkScan block, ChunkState rows);\nfloor = max(FLOPs / {:.0f} TFLOP/s, bytes / {:.0f} GB/s); "
             "bytes = each stage's minimal HBM traffic, 'whole' = x, B, C, dt in, y out, state in + out\n\n",
             kTimed, kRefTflops, kRefGbs);
  fmt::print("{:<30} {:<20} {:<16} {:>9} {:>8} {:>9} {:>9} {:>8}\n", "shape", "stage", "config", "ms", "TFLOP/s",
             "GB/s", "floor ms", "/floor");

  std::vector<Shape> shapes;
  for (int chunk : {256, 128, 64})
    for (int batch : {32, 8, 1}) shapes.push_back({batch, 2048, 80, 64, 1, 128, chunk});
  shapes.push_back({32, 256, 80, 64, 1, 128, 256});
  shapes.push_back({32, 1024, 80, 64, 1, 128, 256});
  for (int chunk : {256, 128})
    for (int batch : {32, 8, 1}) shapes.push_back({batch, 2048, 128, 64, 8, 128, chunk});
  for (const Shape& s : shapes) {
    bench_shape(s, !quick);
    fmt::print("\n");
  }

  fmt::print("kernel attributes (regs/thread, static + dynamic shared KB, local bytes/thread), occupancy "
             "(blocks/SM), grid blocks and waves (grid / (blocks/SM × {} SMs)):\n",
             multiprocessors);
  fmt::print("{:<30} {:<20} {:<16} {:>5} {:>9} {:>9} {:>6} {:>7} {:>9} {:>7}\n", "shape", "stage", "config", "regs",
             "static KB", "dyn KB", "local", "blk/SM", "grid", "waves");
  for (const KernelRow& r : kernel_rows) {
    const double waves = r.blocks_per_sm > 0 ? double(r.grid_blocks) / (double(r.blocks_per_sm) * multiprocessors) : 0;
    fmt::print("{:<30} {:<20} {:<16} {:5d} {:9.1f} {:9.1f} {:6d} {:7d} {:9d} {:7.2f}\n", r.shape, r.stage, r.config,
               r.attr.numRegs, r.attr.sharedSizeBytes / 1024.0, r.dynamic_smem / 1024.0, int(r.attr.localSizeBytes),
               r.blocks_per_sm, r.grid_blocks, waves);
  }
  return 0;
}

}  // namespace
}  // namespace ssdq

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  try {
    return ssdq::run(quick);
  } catch (const std::exception& e) {
    fmt::print(stderr, "ssd_stage_bench: {}\n", e.what());
    return 1;
  }
}
