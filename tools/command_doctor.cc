#include <fmt/format.h>

#include "formats/error.h"
#include "kernels/device_info.h"
#include "runtime/nccl_library.h"
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
  // Tensor parallelism (--tp N on GPUs K … K + N − 1): peer access between every pair lets the
  // small all-reduces take the one-shot kernel; NCCL takes the large ones and gathers the logits.
  const int n = static_cast<int>(devices.size());
  if (n > 1) {
    fmt::print("peer access (tensor parallelism's one-shot all-reduce; the driver's link rank, 0 the best here):\n");
    std::string header = fmt::format("{:>8}", "");
    for (int b = 0; b < n; ++b) header += fmt::format(" {:>16}", fmt::format("cuda:{}", b));
    fmt::print("{}\n", header);
    for (int a = 0; a < n; ++a) {
      std::string row = fmt::format("{:>8}", fmt::format("cuda:{}", a));
      for (int b = 0; b < n; ++b) {
        if (a == b) {
          row += fmt::format(" {:>16}", "-");
          continue;
        }
        const kernels::PeerLink link = kernels::peer_link(a, b);
        row += fmt::format(" {:>16}", link.access ? fmt::format("yes, rank {}{}", link.performance_rank,
                                                                link.native_atomics ? ", atomics" : "")
                                                  : "no");
      }
      fmt::print("{}\n", row);
    }
  }
  std::string why;
  if (NcclLibrary::available(&why)) {
    const NcclLibrary& nccl = NcclLibrary::get();
    fmt::print("NCCL {} ({}): tensor parallelism's large all-reduces and the lm_head's logits gather\n",
               nccl.version_string(), nccl.path);
  } else {
    fmt::print("NCCL: absent ({}); --tp then sums over peer access only (messages up to 8 MB) and runs the lm_head "
               "whole on rank 0\n",
               why);
  }
}

}  // namespace

void add_doctor_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "doctor",
      "List the CUDA devices ssdq can use and whether its kernels support them; with several, the peer access "
      "between them and the NCCL library tensor parallelism (--tp) uses.");
  cmd->callback([] { run_doctor(); });
}

}  // namespace ssdq::cli
