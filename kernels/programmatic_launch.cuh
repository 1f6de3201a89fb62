// Programmatic dependent launch (sm_90): a kernel launched by launch_kernel may be scheduled while
// the kernel before it in the stream is still running, so its launch latency and its independent
// prologue (prefetching weights, loading constants) overlap the previous kernel's tail. Each such
// kernel must call wait_for_previous_grid() before it reads anything an earlier kernel wrote or
// writes anything at all: that returns once the previous grid has completed and its writes are
// visible (and, because every kernel in the chain waits the same way, all grids before it too).
// allow_next_grid() lets the next kernel be scheduled once every block of this one has called it;
// every kernel calls it only after its own wait, so a kernel that starts early starts after every
// grid but the previous one has completed: what only those earlier grids wrote (a layer's SSM
// state, written one decode step before) may be read before the wait.
// On devices before sm_90, and for kernels launched without the attribute, both are no-ops.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "kernels/l2_prefetch.h"

namespace ssdq::kernels {

__device__ inline void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ inline void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Fetches the first min(bytes, kPrefetchBytesPerWarp) of [p, p + bytes) into L2 without waiting:
// 128-byte lines spread over the warp's lanes. Bounded, because a whole first wave of GEMV blocks
// prefetching whole weight rows asks for more than L2 holds.
constexpr long long kPrefetchBytesPerWarp = 2048;
__device__ inline void prefetch_l2(const void* p, long long bytes, int lane) {
  const char* base = static_cast<const char*>(p);
  bytes = bytes < kPrefetchBytesPerWarp ? bytes : kPrefetchBytesPerWarp;
  for (long long offset = static_cast<long long>(lane) * 128; offset < bytes; offset += 32 * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + offset));
}

// Block b of the grid asks the copy engine for its 1/gridDim share of each range (one bulk
// prefetch a range, thread 0), so the whole grid spreads the requests over every SM it runs on.
// Nothing waits for them: a hint, before wait_for_previous_grid().
__device__ inline void prefetch_l2_share(const L2Prefetch (&ranges)[kL2PrefetchRanges]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x + threadIdx.y + threadIdx.z != 0) return;
  const long long blocks = static_cast<long long>(gridDim.x) * gridDim.y * gridDim.z;
  const long long block =
      blockIdx.x + static_cast<long long>(gridDim.x) * (blockIdx.y + static_cast<long long>(gridDim.y) * blockIdx.z);
#pragma unroll
  for (int i = 0; i < kL2PrefetchRanges; ++i) {
    const L2Prefetch& r = ranges[i];
    if (r.bytes <= 0) continue;
    const long long share = ((r.bytes + blocks - 1) / blocks + 15) / 16 * 16;
    const long long begin = block * share;
    if (begin >= r.bytes) continue;
    const long long bytes = r.bytes - begin < share ? r.bytes - begin : share;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(static_cast<const char*>(r.p) + begin),
                 "r"(static_cast<unsigned>(bytes))
                 : "memory");
  }
#endif
}

// An attribute of the current device, asked once per (device, attribute) and cached; 0 when the
// query fails.
inline int current_device_attribute(cudaDeviceAttr attribute) {
  constexpr int kDevices = 64, kAttributes = 3;
  static std::atomic<int> known[kDevices][kAttributes];  // value + 1; 0: not asked yet
  const int slot = attribute == cudaDevAttrComputeCapabilityMajor   ? 0
                   : attribute == cudaDevAttrMultiProcessorCount    ? 1
                   : attribute == cudaDevAttrComputeCapabilityMinor ? 2
                                                                    : -1;
  int device = 0, value = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) return 0;
  if (slot >= 0) {
    const int cached = known[device][slot].load(std::memory_order_relaxed);
    if (cached > 0) return cached - 1;
  }
  if (cudaDeviceGetAttribute(&value, attribute, device) != cudaSuccess) value = 0;
  if (slot >= 0) known[device][slot].store(value + 1, std::memory_order_relaxed);
  return value;
}

// Programmatic dependent launch and thread block clusters: compute capability 9.0 or newer.
inline bool device_is_sm90_or_newer() { return current_device_attribute(cudaDevAttrComputeCapabilityMajor) >= 9; }

struct LaunchShape {
  dim3 grid, block;
  size_t shared = 0;
  unsigned cluster = 1;  // blocks of a thread block cluster along x (sm_90), 1 for none
};

// kernel<<<grid, block, shared, stream>>>(args...), programmatic where the device allows it.
// Only for kernels that call wait_for_previous_grid() as described above.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), const LaunchShape& shape, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = shape.grid;
  config.blockDim = shape.block;
  config.dynamicSmemBytes = shape.shared;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  config.attrs = attribute;
  if (device_is_sm90_or_newer()) {
    attribute[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[config.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (shape.cluster > 1) {
    attribute[config.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attribute[config.numAttrs].val.clusterDim.x = shape.cluster;
    attribute[config.numAttrs].val.clusterDim.y = 1;
    attribute[config.numAttrs++].val.clusterDim.z = 1;
  }
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // the failure is returned here, not left for the next launch to report
    return status;
  }
  return cudaGetLastError();
}

// Blocks of kKernel resident at once on one SM at `threads` threads and `shared` bytes of dynamic
// shared memory, asked once per kernel and shared size (a decode step launches the same few
// shapes); a template argument, so each kernel keeps its own cache.
template <auto kKernel>
cudaError_t resident_blocks_per_sm(int threads, size_t shared, int* per_sm) {
  static std::atomic<int64_t> known{-1};  // shared bytes << 16 | blocks an SM
  const int64_t cached = known.load(std::memory_order_relaxed);
  if (cached >= 0 && static_cast<size_t>(cached >> 16) == shared) {
    *per_sm = static_cast<int>(cached & 0xFFFF);
    return cudaSuccess;
  }
  const cudaError_t status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kKernel, threads, shared);
  if (status != cudaSuccess) return status;
  known.store(static_cast<int64_t>(shared) << 16 | (*per_sm & 0xFFFF), std::memory_order_relaxed);
  return cudaSuccess;
}

// Lets `kernel` take `shared` bytes of dynamic shared memory: opts in above the default 48 KB
// where those bytes and the kernel's static shared memory exceed it together.
template <typename... Params>
cudaError_t allow_dynamic_shared(void (*kernel)(Params...), size_t shared) {
  if (shared == 0) return cudaSuccess;
  cudaFuncAttributes attributes{};
  if (const cudaError_t status = cudaFuncGetAttributes(&attributes, kernel); status != cudaSuccess) return status;
  if (shared + attributes.sharedSizeBytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
}

}  // namespace ssdq::kernels
