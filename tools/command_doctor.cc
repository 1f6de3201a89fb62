#include <fmt/format.h>

#include "formats/error.h"
#include "kernels/device_info.h"
#include "tools/commands.h"

namespace ssdq::cli {
namespace {

void run_doctor() {
  std::string error;
  const auto devices = kernels::list_devices(&error);
  if (devices.empty()) fail("no usable CUDA device: {} (the CPU backend still works)", error);
  bool any_supported = false;
  for (const auto& d : devices) {
    const bool ok = kernels::device_supported(d);
    any_supported |= ok;
    fmt::print("cuda:{}  {}  sm_{}{}  {:.1f} GiB  {} SMs  {}\n", d.index, d.name, d.major, d.minor,
               d.total_memory / double(1 << 30), d.multiprocessors,
               ok ? "supported" : fmt::format("too old (ssdq needs sm_{}0 or newer)", kernels::kMinComputeMajor));
  }
  if (!any_supported) fail("no CUDA device is new enough for ssdq's kernels");
}

}  // namespace

void add_doctor_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("doctor", "List the CUDA devices ssdq can use and whether its kernels support them.");
  cmd->callback([] { run_doctor(); });
}

}  // namespace ssdq::cli
