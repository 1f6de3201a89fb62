#include "kernels/device_info.h"

#include <cuda_runtime.h>

namespace ssdq::kernels {

std::vector<DeviceInfo> list_devices(std::string* error) {
  std::vector<DeviceInfo> out;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (error) *error = cudaGetErrorString(status);
    cudaGetLastError();
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back({i, prop.name, prop.major, prop.minor, prop.totalGlobalMem, prop.multiProcessorCount,
                   static_cast<size_t>(prop.l2CacheSize)});
  }
  if (out.empty() && error) *error = "no CUDA device found";
  return out;
}

PeerLink peer_link(int from, int to) {
  PeerLink link;
  int value = 0;
  if (cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, from, to) == cudaSuccess) link.access = value;
  if (cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrNativeAtomicSupported, from, to) == cudaSuccess)
    link.native_atomics = value;
  if (cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrPerformanceRank, from, to) == cudaSuccess)
    link.performance_rank = value;
  cudaGetLastError();  // a failed query is an answer here, not an error for the next launch
  return link;
}

}  // namespace ssdq::kernels
