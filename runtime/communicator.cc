#include "runtime/communicator.h"

#include <algorithm>

#include "formats/error.h"

namespace ssdq {

class VirtualRanks::Rank : public Communicator {
 public:
  Rank(VirtualRanks* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  void all_reduce_sum(float* data, int64_t count) override { group_->all_reduce(rank_, data, count); }
  void all_reduce_sum(double* data, int64_t count) override { group_->all_reduce(rank_, data, count); }
  void all_reduce_sum(int32_t* data, int64_t count) override { group_->all_reduce(rank_, data, count); }

 private:
  VirtualRanks* group_;
  int rank_;
};

VirtualRanks::VirtualRanks(int size) : buffers_(size) {
  if (size < 1) fail("tensor parallel: {} ranks", size);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(this, r));
}

VirtualRanks::~VirtualRanks() = default;

Communicator& VirtualRanks::rank(int r) { return *ranks_.at(r); }

void VirtualRanks::barrier() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t generation = generation_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
    return;
  }
  changed_.wait(lock, [&] { return generation_ != generation; });
}

// Publish, wait for every rank, sum every rank's buffer in rank order into a private copy, wait
// until every rank has read, then write the sum back.
template <typename T>
void VirtualRanks::all_reduce(int rank, T* data, int64_t count) {
  buffers_[rank] = data;
  barrier();
  std::vector<T> sum(count, T(0));
  for (int r = 0; r < size(); ++r) {
    const T* other = static_cast<const T*>(buffers_[r]);
    for (int64_t i = 0; i < count; ++i) sum[i] += other[i];
  }
  barrier();
  std::copy(sum.begin(), sum.end(), data);
}

}  // namespace ssdq
