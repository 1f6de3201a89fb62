#include "runtime/cuda_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <thread>

#include <fmt/format.h>

#include "formats/error.h"
#include "runtime/cuda_resources.h"
#include "runtime/nccl_library.h"

namespace ssdq {

class CudaRankGroup::Rank : public DeviceCommunicator {
 public:
  Rank(const CudaRankGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }

  float* partial_buffer(int64_t floats, int64_t layer, float* fallback) const override {
    return one_shot(floats) ? group_.partials_[layer % 2][rank_] : fallback;
  }

  void sum_into_residual(kernels::TpReduceArgs a, float* partial, cudaStream_t stream) const override {
    a.ranks = size();
    a.rank = rank_;
    const int64_t floats = a.rows * a.width + (a.folded_norm ? a.rows : 0);
    for (int parity = 0; parity < 2; ++parity) {
      if (partial != group_.partials_[parity][rank_]) continue;
      for (int q = 0; q < size(); ++q) {
        a.partials[q] = group_.partials_[parity][q];
        a.flags[q] = group_.flags_[q];
      }
      a.counters = group_.counters_[rank_];
      cuda_ok(kernels::launch_peer_all_reduce(a, stream), "tensor-parallel all-reduce (one-shot)");
      return;
    }
    if (!group_.nccl())
      fail("tensor parallel: an all-reduce of {} floats is larger than the one-shot's {} and NCCL is absent ({})",
           floats, kOneShotMaxFloats, group_.nccl_note_);
    NcclLibrary::get().all_reduce_sum(partial, static_cast<size_t>(floats), static_cast<NcclComm>(group_.comms_[rank_]),
                                      stream);
    a.partials[rank_] = partial;
    cuda_ok(kernels::launch_tp_residual_add(a, stream), "tensor-parallel residual add");
  }

  void all_gather(const float* send, float* recv, int64_t count, cudaStream_t stream) const override {
    if (!group_.nccl()) fail("tensor parallel: gathering the vocab-parallel logits needs NCCL ({})", group_.nccl_note_);
    NcclLibrary::get().all_gather(send, recv, static_cast<size_t>(count), static_cast<NcclComm>(group_.comms_[rank_]),
                                  stream);
  }

  bool one_shot(int64_t floats) const override { return group_.peer_access_ && floats <= group_.one_shot_limit(); }

 private:
  const CudaRankGroup& group_;
  int rank_;
};

CudaRankGroup::CudaRankGroup(const std::vector<int>& devices) : devices_(devices) {
  const int n = size();
  if (n < 1 || n > kernels::kMaxTpRanks) fail("tensor parallel: {} ranks (1 to {} are supported)", n, kernels::kMaxTpRanks);
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) visible = 0;
  for (int d : devices_)
    if (d < 0 || d >= visible)
      fail("--tp {}: needs {} CUDA devices, {} visible (device {} is missing); --device cpu --tp {} runs the CPU "
           "specification of sharded execution",
           n, n, visible, d, n);
  // Peer access between every pair, or the one-shot all-reduce is off for the group.
  peer_access_ = n > 1;
  for (int a = 0; a < n && peer_access_; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      int can = 0;
      cuda_ok(cudaDeviceCanAccessPeer(&can, devices_[a], devices_[b]), "cudaDeviceCanAccessPeer");
      if (!can) peer_access_ = false;
    }
  if (peer_access_)
    for (int a = 0; a < n; ++a) {
      cuda_ok(cudaSetDevice(devices_[a]), "cudaSetDevice");
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        const cudaError_t status = cudaDeviceEnablePeerAccess(devices_[b], 0);
        if (status == cudaErrorPeerAccessAlreadyEnabled) {
          cudaGetLastError();
          continue;
        }
        cuda_ok(status, "cudaDeviceEnablePeerAccess");
      }
    }
  // Each rank's two partial buffers and its barrier (flags, then counters), zeroed.
  const size_t partial_bytes = kOneShotMaxFloats * sizeof(float);
  for (int r = 0; r < n; ++r) {
    cuda_ok(cudaSetDevice(devices_[r]), "cudaSetDevice");
    void* block = nullptr;
    const size_t bytes = 2 * partial_bytes + kernels::tp_barrier_bytes();
    cuda_ok(cudaMalloc(&block, bytes), "cudaMalloc (tensor-parallel buffers)");
    allocations_.push_back(block);
    cuda_ok(cudaMemset(block, 0, bytes), "cudaMemset");
    char* base = static_cast<char*>(block);
    partials_[0].push_back(reinterpret_cast<float*>(base));
    partials_[1].push_back(reinterpret_cast<float*>(base + partial_bytes));
    flags_.push_back(reinterpret_cast<unsigned*>(base + 2 * partial_bytes));
    counters_.push_back(flags_.back() + kernels::kTpReduceMaxBlocks * kernels::kMaxTpRanks);
  }
  // NCCL: one communicator per rank from one unique id, initialised together (each call blocks
  // until every rank has joined).
  if (n > 1 && NcclLibrary::available(&nccl_note_)) {
    // Every connection made now, not lazily at a first all-reduce that may be inside a CUDA graph
    // capture (where NCCL cannot set one up). A value the user set is kept.
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    const NcclLibrary& nccl = NcclLibrary::get();
    const NcclUniqueId id = nccl.unique_id();
    comms_.assign(n, nullptr);
    std::vector<std::exception_ptr> errors(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        try {
          cuda_ok(cudaSetDevice(devices_[r]), "cudaSetDevice");
          comms_[r] = nccl.init_rank(n, id, r);
          // One eager all-reduce, so that whatever NCCL still sets up on first use happens outside
          // any capture.
          float* one = nullptr;
          cuda_ok(cudaMalloc(&one, sizeof(float)), "cudaMalloc");
          nccl.all_reduce_sum(one, 1, static_cast<NcclComm>(comms_[r]), nullptr);
          cuda_ok(cudaDeviceSynchronize(), "NCCL warm-up");
          cudaFree(one);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  }
  if (n > 1 && !peer_access_ && comms_.empty())
    fail("tensor parallel: the GPUs have no peer access to each other and NCCL is absent ({})", nccl_note_);
  for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
  cuda_ok(cudaSetDevice(devices_[0]), "cudaSetDevice");
}

CudaRankGroup::~CudaRankGroup() {
  for (size_t r = 0; r < comms_.size(); ++r) {
    cudaSetDevice(devices_[r]);
    if (comms_[r]) NcclLibrary::get().destroy(static_cast<NcclComm>(comms_[r]));
  }
  for (size_t r = 0; r < allocations_.size(); ++r) {
    cudaSetDevice(devices_[r]);
    cudaFree(allocations_[r]);
  }
}

int64_t CudaRankGroup::one_shot_limit() const {
  const int64_t peers = std::max(1, size() - 1);
  return kOneShotMaxFloats / (peers * peers);
}

DeviceCommunicator& CudaRankGroup::rank(int r) const { return *ranks_.at(r); }

std::string CudaRankGroup::describe() const {
  std::string nccl = comms_.empty() ? fmt::format("NCCL absent ({})", nccl_note_)
                                    : fmt::format("NCCL {}", NcclLibrary::get().version_string());
  return fmt::format("{} GPUs, peer access {}; all-reduce: {}{}", size(), peer_access_ ? "on" : "off (one-shot off)",
                     peer_access_ ? fmt::format("one-shot up to {} KB, ", one_shot_limit() * 4 / 1024) : "", nccl);
}

}  // namespace ssdq
