#include "runtime/cuda_resources.h"

#include <string>

namespace ssdq {

kernels::DeviceInfo select_cuda_device(int index) {
  std::string error;
  const auto devices = kernels::list_devices(&error);
  if (devices.empty()) fail("--device cuda: no usable CUDA device ({}); use --device cpu", error);
  if (index < 0 || index >= static_cast<int>(devices.size()))
    fail("--device cuda: device index {} does not exist ({} device(s) visible)", index, devices.size());
  const kernels::DeviceInfo& device = devices[index];
  if (!kernels::device_supported(device))
    fail("--device cuda: {} is sm_{}{}; ssdq's CUDA kernels need sm_{}0 or newer", device.name, device.major,
         device.minor, kernels::kMinComputeMajor);
  cuda_ok(cudaSetDevice(device.index), "cudaSetDevice");
  return device;
}

}  // namespace ssdq
