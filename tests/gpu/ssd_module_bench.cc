// The SSD module alone, FP (bf16 chunked SSD) against SSDi8 (the integer chunked kernel), in
// alternating rounds on one device: the same timing as `ssdq bench --module ssd`
// (runtime/cuda_measure.h), in a binary small enough to carry several builds of a kernel to a GPU
// machine and compare them there. A benchmark: it measures and prints, it asserts nothing.
// Usage: ssd_module_bench [--rounds R] [--repeats N] [--batch B] [--length L] [--ssdi8-only] CONFIG...
// (CONFIG: a synthetic config name, e.g. mamba2-2.7b).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "formats/error.h"
#include "runtime/cuda_measure.h"
#include "model/synthetic_configs.h"

namespace ssdq {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv) {
  int rounds = 3, repeats = 10;
  int64_t batch = 32, length = 2048;
  bool ssdi8_only = false;
  std::vector<std::string> configs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> long {
      if (i + 1 >= argc) fail("{} needs a value", arg);
      return std::strtol(argv[++i], nullptr, 10);
    };
    if (arg == "--rounds") rounds = static_cast<int>(value());
    else if (arg == "--repeats") repeats = static_cast<int>(value());
    else if (arg == "--batch") batch = value();
    else if (arg == "--length") length = value();
    else if (arg == "--ssdi8-only") ssdi8_only = true;
    else if (arg == "--help" || arg == "-h") {
      fmt::print("usage: ssd_module_bench [--rounds R] [--repeats N] [--batch B] [--length L] [--ssdi8-only] CONFIG...\n");
      return 0;
    } else configs.push_back(arg);
  }
  if (configs.empty() || rounds < 1 || repeats < 1 || batch < 1 || length < 1)
    fail("usage: ssd_module_bench [--rounds R] [--repeats N] [--batch B] [--length L] [--ssdi8-only] CONFIG...");
  std::map<std::string, std::vector<double>> fp, int8;
  for (int r = 0; r < rounds; ++r)
    for (const std::string& name : configs) {
      const Mamba2Config config = synthetic_config(name);
      const std::vector<std::pair<int64_t, int64_t>> shape = {{batch, length}};
      const double s = measure_ssd_module(config, shape, 0, repeats, SsdModulePath::kSsdi8)[0].ms;
      int8[name].push_back(s);
      if (ssdi8_only) {
        fmt::print("{} round {}: SSDi8 {:.3f} ms\n", name, r, s);
        continue;
      }
      const double f = measure_ssd_module(config, shape, 0, repeats, SsdModulePath::kFloat)[0].ms;
      fp[name].push_back(f);
      fmt::print("{} round {}: FP {:.3f} ms, SSDi8 {:.3f} ms ({:.3f}x)\n", name, r, f, s, f / s);
    }
  for (const std::string& name : configs) {
    if (ssdi8_only) {
      fmt::print("{} median of {}: SSDi8 {:.3f} ms\n", name, rounds, median(int8[name]));
      continue;
    }
    const double f = median(fp[name]), s = median(int8[name]);
    fmt::print("{} median of {}: FP {:.3f} ms, SSDi8 {:.3f} ms ({:.3f}x)\n", name, rounds, f, s, f / s);
  }
  return 0;
}

}  // namespace
}  // namespace ssdq

int main(int argc, char** argv) {
  try {
    return ssdq::run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "ssd_module_bench: {}\n", e.what());
    return 1;
  }
}
