// What CUDA devices this process can see, and whether ssdq's kernels run on them.
#pragma once

#include <string>
#include <vector>

namespace ssdq::kernels {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  size_t total_memory = 0;
  int multiprocessors = 0;
  size_t l2_cache_bytes = 0;
};

// An empty list with `error` set when no driver or no device is present.
std::vector<DeviceInfo> list_devices(std::string* error);

// How device `from` reaches device `to`'s memory (tensor parallelism's one-shot all-reduce needs
// peer access between every pair of its GPUs).
struct PeerLink {
  bool access = false;        // loads and stores to the peer's memory
  bool native_atomics = false;
  int performance_rank = -1;  // the driver's relative rank of the link (0: the best on this host)
};
PeerLink peer_link(int from, int to);

// Kernels are built for sm_80 and sm_90a (PTX for compute_80 covers newer parts).
constexpr int kMinComputeMajor = 8;
inline bool device_supported(const DeviceInfo& device) { return device.major >= kMinComputeMajor; }

}  // namespace ssdq::kernels
