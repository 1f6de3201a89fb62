// A tensor-parallel rank's collectives on the device: the CUDA engine's side of
// runtime/communicator.h. The engine calls only DeviceCommunicator, so ranks in other processes
// (one process per GPU under a launcher, or several hosts) are another implementation of it: their
// partial buffers exchanged as CUDA IPC handles (or not at all: NCCL alone), the NCCL unique id sent
// over the launcher's channel instead of shared in memory (docs/TENSOR_PARALLEL.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/tp_all_reduce.h"

namespace ssdq {

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where a layer writes its partial rows (`floats` floats): one of the buffers the peers read
  // directly, alternating with `layer`'s parity, when the one-shot all-reduce takes that size;
  // otherwise `fallback` (summed by NCCL in place).
  virtual float* partial_buffer(int64_t floats, int64_t layer, float* fallback) const = 0;
  // residual += the ranks' partials summed, as kernels/tp_all_reduce.h says: `args` gives the shape
  // and the epilogue, `partial` is what partial_buffer returned. Every rank calls it in the same order.
  virtual void sum_into_residual(kernels::TpReduceArgs args, float* partial, cudaStream_t stream) const = 0;
  // Whether a message of `floats` floats takes the one-shot kernel (else NCCL), and that in words.
  virtual bool one_shot(int64_t floats) const = 0;
  std::string route(int64_t floats) const { return one_shot(floats) ? "one-shot (peer)" : "NCCL"; }
  // recv[q · count, (q + 1) · count) ← rank q's send[0, count) on every rank (NCCL): the
  // vocab-parallel lm_head's slices of the logits. Every rank calls it in the same order.
  virtual void all_gather(const float* send, float* recv, int64_t count, cudaStream_t stream) const = 0;
};

// The ranks of this process, one GPU each: peer access enabled between every pair where the
// hardware allows it, each rank's two partial buffers and its barrier allocated once and their
// addresses shared, and NCCL communicators made from an in-process unique id (one thread per rank
// while they initialise).
class CudaRankGroup {
 public:
  // Fails naming the reason when a device is missing or neither peer access nor NCCL is there.
  explicit CudaRankGroup(const std::vector<int>& devices);
  ~CudaRankGroup();
  CudaRankGroup(const CudaRankGroup&) = delete;
  CudaRankGroup& operator=(const CudaRankGroup&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  int device(int rank) const { return devices_[rank]; }
  DeviceCommunicator& rank(int r) const;
  bool peer_access() const { return peer_access_; }
  bool nccl() const { return !comms_.empty(); }
  // Peer access, NCCL's version and the one-shot limit, in words.
  std::string describe() const;

  // Floats a partial buffer holds: the one-shot all-reduce's largest message.
  static constexpr int64_t kOneShotMaxFloats = int64_t(1) << 21;
  // Floats the one-shot takes before NCCL does: each rank reads (ranks − 1) messages over its links,
  // so the limit falls with the square of the peers (measured crossovers against NCCL: above 5 MB at
  // 2 GPUs, between 0.3 and 1.3 MB at 4; docs/kernels/tp_all_reduce.md).
  int64_t one_shot_limit() const;

 private:
  class Rank;
  friend class Rank;
  std::vector<int> devices_;
  bool peer_access_ = false;
  std::vector<void*> comms_;                 // NcclComm per rank (empty: NCCL absent)
  std::vector<float*> partials_[2];          // per parity, per rank
  std::vector<unsigned*> flags_, counters_;  // per rank
  std::vector<void*> allocations_;           // per rank: the partials and the barrier, one block
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::string nccl_note_;                    // why NCCL is absent
};

}  // namespace ssdq
