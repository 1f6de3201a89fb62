// NCCL, loaded when tensor parallelism first needs it (dlopen of libnccl.so.2, or the file named by
// SSDQ_NCCL_LIBRARY), so that ssdq builds and runs on machines without it; only the few entry
// points ssdq calls, declared with NCCL's stable C ABI.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace ssdq {

struct NcclUniqueId {
  char internal[128];
};
using NcclComm = struct ncclComm*;

struct NcclLibrary {
  // The library, loaded once; fails naming the files tried and dlerror's reason.
  static const NcclLibrary& get();
  // Whether it can be loaded (why not, in `why`), without failing.
  static bool available(std::string* why);

  int version = 0;  // NCCL_VERSION_CODE: 22809 for 2.28.9
  std::string path;
  std::string version_string() const;

  // Each returns an error naming `what` and NCCL's message.
  NcclUniqueId unique_id() const;
  NcclComm init_rank(int ranks, const NcclUniqueId& id, int rank) const;
  void destroy(NcclComm comm) const;
  // In place, fp32, summed.
  void all_reduce_sum(float* data, size_t count, NcclComm comm, cudaStream_t stream) const;
  // recv[rank · count, (rank + 1) · count) ← each rank's send[0, count), fp32.
  void all_gather(const float* send, float* recv, size_t count, NcclComm comm, cudaStream_t stream) const;

 private:
  NcclLibrary() = default;
  // The library or null (the reason in `error`), loaded on the first call.
  static const NcclLibrary* load(std::string* error);
  using Result = int;
  Result (*get_version_)(int*) = nullptr;
  Result (*get_unique_id_)(NcclUniqueId*) = nullptr;
  Result (*comm_init_rank_)(NcclComm*, int, NcclUniqueId, int) = nullptr;
  Result (*comm_destroy_)(NcclComm) = nullptr;
  Result (*all_reduce_)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  Result (*all_gather_)(const void*, void*, size_t, int, NcclComm, cudaStream_t) = nullptr;
  const char* (*get_error_string_)(Result) = nullptr;
  void check(Result result, const char* what) const;
};

}  // namespace ssdq
