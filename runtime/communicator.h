// The collectives a tensor-parallel rank's layers call (model/tensor_parallel.h shards the
// weights): sums across ranks, every rank receiving the same bits. Implemented by VirtualRanks
// (threads of one process on the CPU, for tests and the CPU specification); a GPU implementation
// (NCCL, or a one-shot peer-to-peer all-reduce) or a multi-process one (a process per GPU under a
// launcher) implements the same interface without touching the layer code.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace ssdq {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[0, count) ← Σ over the ranks of their data, summed in rank order (so every rank gets the
  // same bits). Every rank must call it, with the same count.
  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  virtual void all_reduce_sum(double* data, int64_t count) = 0;
  // Integer partial products (W8A8's int32 accumulators): exact, so the sum is the one rank's.
  virtual void all_reduce_sum(int32_t* data, int64_t count) = 0;
};

// `size` ranks as threads of this process, each calling through its own Communicator
// (rank(r)); a collective waits until every rank has entered it.
class VirtualRanks {
 public:
  explicit VirtualRanks(int size);
  ~VirtualRanks();
  Communicator& rank(int r);
  int size() const { return static_cast<int>(ranks_.size()); }

 private:
  class Rank;
  template <typename T>
  void all_reduce(int rank, T* data, int64_t count);
  void barrier();

  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<void*> buffers_;  // each rank's data during a collective
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace ssdq
