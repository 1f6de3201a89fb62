// Device resources shared by the CUDA backends: error checks, a byte layout planned before one
// allocation, counted device blocks, pinned host buffers, and device selection.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "formats/error.h"
#include "kernels/device_info.h"

namespace ssdq {

inline void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA: {}: {}", what, cudaGetErrorString(status));
}

constexpr size_t kAlign = 256;
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
constexpr size_t kLogitsBlockBytes = size_t{256} << 20;

inline size_t align_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Byte offsets of the pieces of one allocation, laid out before the allocation is made.
class Layout {
 public:
  size_t add(size_t bytes) {
    const size_t offset = total_;
    total_ += align_up(std::max<size_t>(bytes, 1));
    return offset;
  }
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

// Counts what the backend holds on the device, for the memory report.
struct MemoryCounter {
  size_t live = 0, peak = 0;
  void add(size_t bytes) {
    live += bytes;
    peak = std::max(peak, live);
  }
  void remove(size_t bytes) { live -= bytes; }
};

class DeviceBlock {
 public:
  DeviceBlock() = default;
  DeviceBlock(size_t bytes, const char* what, MemoryCounter* counter) : bytes_(bytes), counter_(counter) {
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      fail("CUDA: out of device memory: {} needs {:.1f} MiB, {:.1f} MiB free of {:.1f} MiB", what, bytes / 1048576.0,
           free_bytes / 1048576.0, total_bytes / 1048576.0);
    }
    if (counter_) counter_->add(bytes_);
  }
  ~DeviceBlock() { release(); }
  DeviceBlock(DeviceBlock&& other) noexcept { *this = std::move(other); }
  DeviceBlock& operator=(DeviceBlock&& other) noexcept {
    if (this != &other) {
      release();
      std::swap(ptr_, other.ptr_);
      std::swap(bytes_, other.bytes_);
      std::swap(counter_, other.counter_);
    }
    return *this;
  }
  template <typename T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(static_cast<char*>(ptr_) + offset);
  }
  size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (ptr_) {
      cudaFree(ptr_);
      if (counter_) counter_->remove(bytes_);
    }
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  MemoryCounter* counter_ = nullptr;
};

template <typename T>
class PinnedBuffer {
 public:
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  // At least `count` elements; a larger request replaces the buffer and counts one more in
  // *generation (when given): a captured graph that copies to or from it is then stale.
  T* get(size_t count, uint64_t* generation = nullptr) {
    if (count > capacity_) {
      if (ptr_) cudaFreeHost(ptr_);
      ptr_ = nullptr;
      cuda_ok(cudaMallocHost(reinterpret_cast<void**>(&ptr_), count * sizeof(T)), "cudaMallocHost");
      capacity_ = count;
      if (generation) ++*generation;
    }
    return ptr_;
  }

 private:
  T* ptr_ = nullptr;
  size_t capacity_ = 0;
};

template <typename T>
void upload(T* dst, const std::vector<T>& src, const char* what = "upload weights") {
  cuda_ok(cudaMemcpy(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice), what);
}

// A decode step captured into a CUDA graph and replayed while its key (what the captured launches
// depend on: workspace addresses, the outputs asked for) stays the same. The first step runs
// eagerly, so library plans (cuBLASLt's) are made outside the capture.
class DecodeGraph {
 public:
  DecodeGraph() = default;
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;
  ~DecodeGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }

  template <typename Enqueue>
  void run(cudaStream_t stream, uint64_t key, Enqueue&& enqueue) {
    if (exec_ && key_ == key) {
      cuda_ok(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
      return;
    }
    if (!warmed_) {
      enqueue();
      warmed_ = true;
      return;
    }
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
    cudaGraph_t graph = nullptr;
    cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      enqueue();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    const cudaError_t status = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);
    cuda_ok(status, "cudaGraphInstantiate");
    key_ = key;
    cuda_ok(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
  }

 private:
  cudaGraphExec_t exec_ = nullptr;
  uint64_t key_ = 0;
  bool warmed_ = false;
};

// The device `index` made current, after checking it exists and is new enough (sm_80+); fails
// with a message naming the problem and the CPU alternative.
kernels::DeviceInfo select_cuda_device(int index);

}  // namespace ssdq
